package scenario

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PrintTopStatements writes the statements that took the most database time
// (pg_stat_statements must be preloaded), with the shared buffers each
// touched and the WAL bytes each wrote per row it returned or changed.
func PrintTopStatements(ctx context.Context, databaseURL string, w io.Writer) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `
		SELECT calls, rows, total_exec_time, mean_exec_time,
		       shared_blks_hit::float8 / greatest(rows, 1), wal_bytes::float8 / greatest(rows, 1), query
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 12`)
	if err != nil {
		return err
	}
	defer rows.Close()
	fmt.Fprintf(w, "%10s %10s %12s %10s %9s %9s  %s\n", "calls", "rows", "total_ms", "mean_ms", "hits/row", "wal/row", "query")
	for rows.Next() {
		var calls, n int64
		var total, mean, hits, wal float64
		var q string
		if err := rows.Scan(&calls, &n, &total, &mean, &hits, &wal, &q); err != nil {
			return err
		}
		q = strings.Join(strings.Fields(q), " ")
		if len(q) > 110 {
			q = q[:110]
		}
		fmt.Fprintf(w, "%10d %10d %12.0f %10.3f %9.1f %9.0f  %s\n", calls, n, total, mean, hits, wal, q)
	}
	return rows.Err()
}
