package pgconn_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/migrate"
	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
	"github.com/pulsequeue/pulse/pkg/server/proctest"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := lis.Addr().String()
	require.NoError(t, lis.Close())
	return addr
}

func withParam(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("OpensAMigratedDatabaseNamedAfterTheService", func(t *testing.T) {
		t.Parallel()
		pool, err := pgconn.Open(t.Context(), pgconn.Options{
			URL: pgtest.URL(t), Service: "reaper", MinSchemaVersion: 1,
		})
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		var name, jit string
		require.NoError(t, pool.QueryRow(t.Context(), `SHOW application_name`).Scan(&name))
		require.Equal(t, "reaper", name)
		require.Equal(t, pgconn.DefaultMaxConns, pool.Config().MaxConns)
		require.NoError(t, pool.QueryRow(t.Context(), `SHOW jit`).Scan(&jit))
		require.Equal(t, "off", jit, "no statement of pulse earns back a JIT compile")
	})

	t.Run("KeepsAnApplicationNameAndMaxConnsTheCallerChose", func(t *testing.T) {
		t.Parallel()
		pool, err := pgconn.Open(t.Context(), pgconn.Options{
			URL: withParam(t, pgtest.URL(t), "application_name", "reaper-eu"), Service: "reaper", MaxConns: 3,
		})
		require.NoError(t, err)
		t.Cleanup(pool.Close)

		var name string
		require.NoError(t, pool.QueryRow(t.Context(), `SHOW application_name`).Scan(&name))
		require.Equal(t, "reaper-eu", name)
		require.EqualValues(t, 3, pool.Config().MaxConns)

		pool, err = pgconn.Open(t.Context(), pgconn.Options{URL: withParam(t, pgtest.URL(t), "jit", "on"), Service: "reaper"})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		var jit string
		require.NoError(t, pool.QueryRow(t.Context(), `SHOW jit`).Scan(&jit))
		require.Equal(t, "on", jit)
	})

	t.Run("RefusesASchemaOlderThanItNeedsSayingWhichVersion", func(t *testing.T) {
		t.Parallel()
		_, err := pgconn.Open(t.Context(), pgconn.Options{
			URL: pgtest.EmptyURL(t), Service: "reaper", MinSchemaVersion: 1,
		})
		require.ErrorIs(t, err, migrate.ErrSchemaTooOld)
		require.ErrorContains(t, err, "needs version 1")
	})

	t.Run("RetriesAnUnreachableDatabaseUntilTheContextEnds", func(t *testing.T) {
		t.Parallel()
		logs := &proctest.Buffer{}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()

		_, err := pgconn.Open(ctx, pgconn.Options{
			URL:     "postgres://pulse:secret@" + closedPort(t) + "/pulse?sslmode=disable",
			Service: "reaper",
			Logger:  slog.New(slog.NewJSONHandler(logs, nil)),
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "database unreachable")
		require.NotContains(t, err.Error(), "secret")
		require.Contains(t, logs.String(), `"level":"WARN","msg":"database unreachable, retrying"`)
		require.NotContains(t, logs.String(), "secret")
	})

	t.Run("NamesTheVariableWithoutThePasswordForAnUnparseableURL", func(t *testing.T) {
		t.Parallel()
		for _, raw := range []string{
			"postgres://pulse:s3cr%3Dt@localhost:notaport/pulse",
			"postgres://pulse:s3cr%zzt@localhost/pulse", // net/url quotes the whole URL
			"postgres://pulse:s3cret@local host/pulse",
			"postgres://pulse@localhost:notaport/pulse?password=s3cr%3Dt",
			"host=localhost port=notaport password=s3cr%3Dt",
		} {
			_, err := pgconn.Open(t.Context(), pgconn.Options{URL: raw, Service: "reaper"})
			require.Error(t, err, raw)
			require.True(t, strings.HasPrefix(err.Error(), "config: PULSE_DATABASE_URL: "), err.Error())
			require.NotContains(t, err.Error(), "s3cr", raw)
		}
	})
}

func TestReadinessCheck(t *testing.T) {
	t.Parallel()

	t.Run("PassesOnAMigratedDatabase", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		require.NoError(t, pgconn.ReadinessCheck(pool, 1)(t.Context()))
	})

	t.Run("FailsWhenTheSchemaIsTooOld", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.Pool(t)
		check := pgconn.ReadinessCheck(pool, 1_000_000)
		require.ErrorIs(t, check(t.Context()), migrate.ErrSchemaTooOld)
	})

	t.Run("FailsWhenTheDatabaseIsUnreachable", func(t *testing.T) {
		t.Parallel()
		pool, err := pgconn.Open(t.Context(), pgconn.Options{URL: pgtest.URL(t), MinSchemaVersion: 1})
		require.NoError(t, err)
		pool.Close()
		require.ErrorContains(t, pgconn.ReadinessCheck(pool, 1)(t.Context()), "ping database")
	})
}
