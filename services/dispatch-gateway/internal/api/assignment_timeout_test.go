package api_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
)

// A job's timeout rides its assignment, so the worker's SDK can put the
// deadline on the handler's context; a job without one carries none.
func TestAssignmentCarriesTheJobsTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	timed := pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 9, MaxAttempts: 3, Timeout: 90 * time.Second}
	plain := pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "t", Args: []byte(`{}`), Priority: 1, MaxAttempts: 3}
	_, err := b.store.Insert(t.Context(), []pulsetype.NewJob{timed, plain})
	require.NoError(t, err)

	stream, _ := open(t, b, "w-timeout", 2)
	got := recvJobs(t, stream, 2)
	byID := map[string]time.Duration{}
	for _, a := range got {
		byID[a.GetJobId()] = a.GetTimeout().AsDuration()
		if a.GetJobId() == plain.ID.String() {
			require.Nil(t, a.GetTimeout())
		}
	}
	require.Equal(t, 90*time.Second, byID[timed.ID.String()])
}
