package pgconn_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/pgconn"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

func TestPoolMetrics(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), pgtest.URL(t))
	require.NoError(t, err)
	defer pool.Close()
	reg := prometheus.NewRegistry()
	pgconn.RegisterPoolMetrics(reg, pool)

	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()

	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "/" + l.GetValue()
			}
			if g := m.GetGauge(); g != nil {
				got[key] = g.GetValue()
			}
			if c := m.GetCounter(); c != nil {
				got[key] = c.GetValue()
			}
		}
	}
	require.Equal(t, 1.0, got["pulse_db_pool_conns/acquired"], "the connection we hold")
	require.Equal(t, float64(pool.Config().MaxConns), got["pulse_db_pool_max_conns"])
	require.GreaterOrEqual(t, got["pulse_db_pool_acquires_total"], 1.0)
}
