package pulse

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

var errTest = errors.New("boom")

// SetResult keeps JSON as given, encodes anything else, refuses what is
// not JSON or is over the cap, and the completion carries it; a failure
// carries none.
func TestSetResult(t *testing.T) {
	t.Parallel()
	j := &Job{ID: "j1", Attempt: 1}
	require.NoError(t, j.SetResult(json.RawMessage(`{"b": 1, "a": 2}`)))
	require.Equal(t, `{"b": 1, "a": 2}`, string(j.result), "raw JSON is kept byte for byte")
	require.NoError(t, j.SetResult(map[string]int{"n": 3}))
	require.Equal(t, `{"n":3}`, string(j.result), "a later call replaces an earlier one")

	require.ErrorContains(t, j.SetResult([]byte(`{"a":`)), "not valid JSON")
	require.ErrorContains(t, j.SetResult([]byte("\"\xff\"")), "not valid JSON")
	require.ErrorContains(t, j.SetResult(make(chan int)), "encode result")
	require.ErrorContains(t, j.SetResult(strings.Repeat("x", pulsetype.MaxResultBytes)), "the limit is")
	require.Equal(t, `{"n":3}`, string(j.result), "a refused result leaves the last one")

	e := &executor{}
	require.Equal(t, `{"n":3}`, string(e.result(j, nil).GetResult()))
	require.Empty(t, e.result(j, Permanent(errTest)).GetResult())
	require.Empty(t, e.result(j, errTest).GetResult())
}

// A report batch stops before its results pass MaxReportBatchBytes, but
// always takes at least one.
func TestBatchLenBoundsBytes(t *testing.T) {
	t.Parallel()
	big := make([]byte, pulsetype.MaxResultBytes)
	q := make([]pendingResult, 5)
	for i := range q {
		q[i] = pendingResult{result: &pulsev1.JobResult{Result: big}}
	}
	require.Equal(t, pulsetype.MaxReportBatchBytes/pulsetype.MaxResultBytes, batchLen(q, 100))
	require.Equal(t, 1, batchLen(q, 1))
	small := []pendingResult{{result: &pulsev1.JobResult{}}, {result: &pulsev1.JobResult{}}}
	require.Equal(t, 2, batchLen(small, 100))
	require.Zero(t, batchLen(nil, 100))
}
