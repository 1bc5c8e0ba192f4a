package app_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"

	"github.com/pulsequeue/pulse/services/control-api/internal/app"
	"github.com/pulsequeue/pulse/services/control-api/internal/config"
)

func TestApp(t *testing.T) {
	t.Parallel()

	t.Run("StopAnswersEveryAcceptedSubmitAndLosesNone", func(t *testing.T) {
		t.Parallel()
		ctx := t.Context()
		cfg := config.Default()
		cfg.Auth = "none"
		cfg.DatabaseURL = pgtest.URL(t)
		cfg.HTTPAddr, cfg.GRPCAddr = "127.0.0.1:0", "127.0.0.1:0"
		a, err := app.New(ctx, cfg, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.NoError(t, a.Start(context.Background()))

		conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		defer conn.Close()
		client := pulsev1.NewControlServiceClient(conn)

		// Producers submit until the server stops answering; every id it
		// acknowledged must then be in the database.
		var (
			mu    sync.Mutex
			acked []uuid.UUID
			n     atomic.Int64
			wg    sync.WaitGroup
		)
		enough := make(chan struct{})
		var once sync.Once
		for range 20 {
			wg.Go(func() {
				for {
					res, err := client.SubmitJob(ctx, &pulsev1.SubmitJobRequest{Job: &pulsev1.JobSpec{Topic: "shutdown.test"}})
					if err != nil {
						return
					}
					mu.Lock()
					acked = append(acked, uuid.MustParse(res.GetResult().GetId()))
					mu.Unlock()
					if n.Add(1) == 200 {
						once.Do(func() { close(enough) })
					}
				}
			})
		}
		<-enough
		require.NoError(t, a.Stop(ctx))
		wg.Wait()

		resp, err := http.Get("http://" + a.AdminAddr() + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err, "the HTTP listener is closed")

		db, err := pgx.Connect(ctx, cfg.DatabaseURL)
		require.NoError(t, err)
		defer db.Close(ctx)
		var found int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1)`, acked).Scan(&found))
		require.GreaterOrEqual(t, len(acked), 200)
		require.Equal(t, len(acked), found, "every acknowledged submit is in the database")
	})
}
