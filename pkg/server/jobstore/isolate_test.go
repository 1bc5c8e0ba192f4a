package jobstore_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/server/jobstore"
	"github.com/pulsequeue/pulse/pkg/server/pgtest"
)

// TestIsolate runs a real statement that Postgres refuses for some members
// (a value that does not cast to int) and shows every good member succeeds
// while each bad one fails alone with Postgres's own error.
func TestIsolate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	exec := func(items []string) ([]int, error) {
		rows, err := pool.Query(t.Context(), `SELECT v::int FROM unnest($1::text[]) AS t(v)`, items)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, rows.Err()
	}

	t.Run("HappyPathIsOneStatement", func(t *testing.T) {
		calls := 0
		res, errs := jobstore.Isolate([]string{"1", "2", "3"}, func(b []string) ([]int, error) { calls++; return exec(b) })
		require.Nil(t, errs)
		require.Equal(t, []int{1, 2, 3}, res)
		require.Equal(t, 1, calls)
	})

	t.Run("OnlyTheCulpritsFail", func(t *testing.T) {
		items := make([]string, 37)
		for i := range items {
			items[i] = strconv.Itoa(i)
		}
		items[5], items[30] = "five", "x"
		res, errs := jobstore.Isolate(items, exec)
		require.Len(t, errs, len(items))
		for i := range items {
			if i == 5 || i == 30 {
				require.Error(t, errs[i])
				require.True(t, jobstore.IsDataError(errs[i]))
				require.Contains(t, errs[i].Error(), items[i])
				continue
			}
			require.NoError(t, errs[i], "member %d", i)
			require.Equal(t, i, res[i])
		}
	})

	t.Run("NonDataErrorsAreNotSplit", func(t *testing.T) {
		calls := 0
		_, errs := jobstore.Isolate([]string{"1", "2"}, func([]string) ([]int, error) {
			calls++
			return nil, context.DeadlineExceeded
		})
		require.Equal(t, 1, calls)
		require.ErrorIs(t, errs[0], context.DeadlineExceeded)
		require.ErrorIs(t, errs[1], context.DeadlineExceeded)
	})
}
