package httpapi_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A schedule created without a priority fires jobs at a job's default, 5;
// an explicit 0 stays 0; an update that leaves it out goes back to 5.
func TestSchedulePriorityDefaultsLikeAJob(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t)
	type withPriority struct {
		ID       string `json:"id"`
		Priority *int32 `json:"priority"`
	}
	create := func(body string) withPriority {
		t.Helper()
		r := b.do(t, http.MethodPost, "/v1/schedules", body)
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		var sc withPriority
		r.decode(t, &sc)
		require.NotNil(t, sc.Priority)
		return sc
	}
	unset := create(`{"name":"p-unset","topic":"t","kind":"every","expression":"1h"}`)
	require.EqualValues(t, 5, *unset.Priority)
	zero := create(`{"name":"p-zero","topic":"t","kind":"every","expression":"1h","priority":0}`)
	require.EqualValues(t, 0, *zero.Priority)
	nine := create(`{"name":"p-nine","topic":"t","kind":"every","expression":"1h","priority":9}`)
	require.EqualValues(t, 9, *nine.Priority)

	r := b.do(t, http.MethodPut, "/v1/schedules/"+nine.ID, `{"name":"p-nine","topic":"t","kind":"every","expression":"1h"}`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var updated withPriority
	r.decode(t, &updated)
	require.EqualValues(t, 5, *updated.Priority)

	for _, bad := range []string{`11`, `-1`, `"5"`, `1e1000000`, `5.5`} {
		r := b.do(t, http.MethodPost, "/v1/schedules", `{"name":"p-bad","topic":"t","kind":"every","expression":"1h","priority":`+bad+`}`)
		requireError(t, r, http.StatusBadRequest, "invalid_argument", "priority")
	}
}
