package pgconn

import (
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// poolCollector exports a pool's statistics at scrape time, so a dashboard
// can show pool saturation: acquired near max, and acquires that had to
// wait for a connection.
type poolCollector struct {
	pool        *pgxpool.Pool
	conns       *prometheus.Desc
	maxConns    *prometheus.Desc
	acquires    *prometheus.Desc
	emptyWaits  *prometheus.Desc
	waitSeconds *prometheus.Desc
}

// RegisterPoolMetrics registers pulse_db_pool_* metrics for pool on reg.
func RegisterPoolMetrics(reg prometheus.Registerer, pool *pgxpool.Pool) {
	reg.MustRegister(&poolCollector{
		pool: pool,
		conns: prometheus.NewDesc("pulse_db_pool_conns",
			"Connections in the Postgres pool, by state (acquired, idle, constructing).", []string{"state"}, nil),
		maxConns: prometheus.NewDesc("pulse_db_pool_max_conns",
			"The pool's size limit (PULSE_DB_MAX_CONNS).", nil, nil),
		acquires: prometheus.NewDesc("pulse_db_pool_acquires_total",
			"Connections acquired from the pool.", nil, nil),
		emptyWaits: prometheus.NewDesc("pulse_db_pool_empty_acquires_total",
			"Acquires that found no idle connection and had to wait or connect.", nil, nil),
		waitSeconds: prometheus.NewDesc("pulse_db_pool_acquire_wait_seconds_total",
			"Time spent waiting for a connection when none was idle.", nil, nil),
	})
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.conns, c.maxConns, c.acquires, c.emptyWaits, c.waitSeconds} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.AcquiredConns()), "acquired")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.IdleConns()), "idle")
	ch <- prometheus.MustNewConstMetric(c.conns, prometheus.GaugeValue, float64(s.ConstructingConns()), "constructing")
	ch <- prometheus.MustNewConstMetric(c.maxConns, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(c.acquires, prometheus.CounterValue, float64(s.AcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.emptyWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(c.waitSeconds, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
}
