package jobspec_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	pulsev1 "github.com/pulsequeue/pulse/pkg/pulsepb/v1"
	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobspec"
)

// A replace key and its mode reach the row; what Postgres cannot store, a
// key over the limit, an unknown mode, a mode without a key, and a replace
// key beside another deduplication are refused, naming the field.
func TestValidateReplace(t *testing.T) {
	t.Parallel()
	spec := func(key string, mode pulsev1.ReplaceMode) *pulsev1.JobSpec {
		return &pulsev1.JobSpec{Topic: "t", ReplaceKey: key, ReplaceMode: mode}
	}
	for mode, want := range map[pulsev1.ReplaceMode]pulsetype.ReplaceMode{
		pulsev1.ReplaceMode_REPLACE_MODE_UNSPECIFIED:         pulsetype.ReplaceArgsAndRunAt,
		pulsev1.ReplaceMode_REPLACE_MODE_REPLACE:             pulsetype.ReplaceArgsAndRunAt,
		pulsev1.ReplaceMode_REPLACE_MODE_KEEP_EARLIER_RUN_AT: pulsetype.ReplaceKeepEarlierRunAt,
		pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST:          pulsetype.ReplaceKeepFirst,
	} {
		job, err := jobspec.Validate("job", spec("user:42", mode), jobspec.Limits{})
		require.NoError(t, err)
		require.Equal(t, "user:42", job.ReplaceKey)
		require.Equal(t, want, job.ReplaceMode)
	}
	job, err := jobspec.Validate("job", spec(strings.Repeat("k", pulsetype.MaxReplaceKeyBytes), 0), jobspec.Limits{})
	require.NoError(t, err)
	require.Len(t, job.ReplaceKey, pulsetype.MaxReplaceKeyBytes)

	withIdem := spec("k", 0)
	withIdem.IdempotencyKey = "i"
	withUnique := spec("k", 0)
	withUnique.UniqueFor = durationpb.New(time.Hour)
	for _, c := range []struct {
		spec  *pulsev1.JobSpec
		field string
	}{
		{spec(strings.Repeat("k", pulsetype.MaxReplaceKeyBytes+1), 0), "job.replace_key"},
		{spec("a\x00b", 0), "job.replace_key"},
		{spec("a\xffb", 0), "job.replace_key"},
		{spec("k", pulsev1.ReplaceMode(99)), "job.replace_mode"},
		{spec("k", pulsev1.ReplaceMode(-1)), "job.replace_mode"},
		{spec("", pulsev1.ReplaceMode_REPLACE_MODE_KEEP_FIRST), "job.replace_mode"},
		{withIdem, "job.replace_key"},
		{withUnique, "job.replace_key"},
	} {
		_, err := jobspec.Validate("job", c.spec, jobspec.Limits{})
		require.ErrorIs(t, err, apierr.ErrInvalidArgument, "%+v", c.spec)
		require.Equal(t, c.field, apierr.FieldOf(err), "%+v", c.spec)
	}
}
