package pgconn_test

import (
	"context"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// withSpacedParam is withParam for a value with spaces, written as %20:
// pgx reads a + in a URL's query as a plus sign.
func withSpacedParam(t *testing.T, raw, key, value string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += url.QueryEscape(key) + "=" + url.PathEscape(value)
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

	t.Run("RunsAtReadCommittedWhateverTheDatabaseDefaultIs", func(t *testing.T) {
		t.Parallel()
		raw := pgtest.URLWithDefault(t, "default_transaction_isolation", "serializable")
		var plain string // a session that does not pin it gets the database's default
		require.NoError(t, pgxConnectShow(t, raw, "transaction_isolation", &plain))
		require.Equal(t, "serializable", plain)

		pool, err := pgconn.Open(t.Context(), pgconn.Options{URL: raw, Service: "reaper"})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		for range 3 { // every session of the pool, not only the first
			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck // read only
			var level string
			require.NoError(t, tx.QueryRow(t.Context(), `SHOW transaction_isolation`).Scan(&level))
			require.Equal(t, "read committed", level)
		}
	})

	t.Run("RefusesAURLAskingForAnotherIsolationNamingTheVariable", func(t *testing.T) {
		t.Parallel()
		for _, level := range []string{"serializable", "repeatable read"} {
			_, err := pgconn.Open(t.Context(), pgconn.Options{
				URL: withSpacedParam(t, pgtest.URL(t), "default_transaction_isolation", level), Service: "reaper",
			})
			require.Error(t, err, level)
			require.True(t, strings.HasPrefix(err.Error(), "config: PULSE_DATABASE_URL: "), err.Error())
			require.ErrorContains(t, err, "default_transaction_isolation="+level)
		}
		pool, err := pgconn.Open(t.Context(), pgconn.Options{
			URL: withSpacedParam(t, pgtest.URL(t), "default_transaction_isolation", "Read Committed"), Service: "reaper",
		})
		require.NoError(t, err, "asking for what pulse pins anyway is fine")
		pool.Close()
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

// pgxConnectShow reads one setting from a plain session at url, one that
// pulse did not open.
func pgxConnectShow(t *testing.T, url, setting string, dst *string) error {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	return conn.QueryRow(t.Context(), `SELECT current_setting($1)`, setting).Scan(dst)
}
