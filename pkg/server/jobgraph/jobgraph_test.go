package jobgraph_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
	"github.com/pulsequeue/pulse/pkg/server/jobgraph"
)

func jobsOf(n int) []pulsetype.NewJob {
	out := make([]pulsetype.NewJob, n)
	for i := range out {
		out[i] = pulsetype.NewJob{ID: uuid.Must(uuid.NewV7()), Topic: "t"}
	}
	return out
}

func prefix(i int) string { return fmt.Sprintf("jobs[%d]", i) }

func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var ae *apierr.Error
	require.True(t, errors.As(err, &ae), "want an API error, got %v", err)
	require.Equal(t, field, ae.Field, ae.Error())
}

func TestBuildADiamond(t *testing.T) {
	jobs := jobsOf(4)
	outside := uuid.Must(uuid.NewV7())
	refs := [][]jobgraph.Ref{
		{{Job: outside.String()}},
		{{Job: "$0"}},
		{{Job: "$0", OnParentFailure: pulsetype.OnParentFailureRun}},
		{{Job: "$1"}, {Job: jobs[2].ID.String()}},
	}
	require.NoError(t, jobgraph.Build(jobs, refs, prefix))
	require.Equal(t, []pulsetype.Dependency{{Parent: outside, OnParentFailure: "cancel"}}, jobs[0].DependsOn)
	require.Equal(t, []pulsetype.Dependency{{Parent: jobs[0].ID, OnParentFailure: "run"}}, jobs[2].DependsOn)
	require.Equal(t, []pulsetype.Dependency{{Parent: jobs[1].ID, OnParentFailure: "cancel"}, {Parent: jobs[2].ID, OnParentFailure: "cancel"}}, jobs[3].DependsOn)
	for _, j := range jobs {
		require.Equal(t, jobs[0].ID, j.WorkflowID, "one call, one workflow")
	}
}

func TestBuildWithoutDependenciesChangesNothing(t *testing.T) {
	jobs := jobsOf(2)
	require.NoError(t, jobgraph.Build(jobs, make([][]jobgraph.Ref, 2), prefix))
	require.Equal(t, uuid.Nil, jobs[0].WorkflowID)
}

func TestBuildRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		refs  func(jobs []pulsetype.NewJob) [][]jobgraph.Ref
		field string
	}{
		"ARefPastTheCall":      {func([]pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{nil, {{Job: "$3"}}} }, "jobs[1].depends_on[0]"},
		"ANegativeRef":         {func([]pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{nil, {{Job: "$-1"}}} }, "jobs[1].depends_on[0]"},
		"ARefWithALeadingZero": {func([]pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{nil, {{Job: "$00"}}} }, "jobs[1].depends_on[0]"},
		"AHugeRef": {func([]pulsetype.NewJob) [][]jobgraph.Ref {
			return [][]jobgraph.Ref{nil, {{Job: "$99999999999999999999"}}}
		}, "jobs[1].depends_on[0]"},
		"Itself":     {func([]pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{nil, {{Job: "$1"}}} }, "jobs[1].depends_on[0]"},
		"ItselfById": {func(j []pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{{{Job: j[0].ID.String()}}} }, "jobs[0].depends_on[0]"},
		"NotAnId":    {func([]pulsetype.NewJob) [][]jobgraph.Ref { return [][]jobgraph.Ref{{{Job: "job-7\x00"}}} }, "jobs[0].depends_on[0]"},
		"AnIdInBraces": {func([]pulsetype.NewJob) [][]jobgraph.Ref {
			return [][]jobgraph.Ref{{{Job: "{" + uuid.NewString() + "}"}}}
		}, "jobs[0].depends_on[0]"},
		"TwiceTheSameParent": {func(j []pulsetype.NewJob) [][]jobgraph.Ref {
			return [][]jobgraph.Ref{nil, {{Job: "$0"}, {Job: j[0].ID.String()}}}
		}, "jobs[1].depends_on[1]"},
		"AnUnknownPolicy": {func([]pulsetype.NewJob) [][]jobgraph.Ref {
			return [][]jobgraph.Ref{nil, {{Job: "$0", OnParentFailure: "ignore"}}}
		}, "jobs[1].depends_on[0].on_parent_failure"},
		"ACycle": {func([]pulsetype.NewJob) [][]jobgraph.Ref {
			return [][]jobgraph.Ref{nil, {{Job: "$2"}}, {{Job: "$1"}}}
		}, "depends_on"},
		"TooManyParents": {func([]pulsetype.NewJob) [][]jobgraph.Ref {
			refs := make([]jobgraph.Ref, pulsetype.MaxDependsOn+1)
			for k := range refs {
				refs[k] = jobgraph.Ref{Job: uuid.NewString()}
			}
			return [][]jobgraph.Ref{refs}
		}, "jobs[0].depends_on"},
	} {
		t.Run(name, func(t *testing.T) {
			jobs := jobsOf(3)
			requireField(t, jobgraph.Build(jobs, tc.refs(jobs), prefix), tc.field)
		})
	}
}

func TestCycle(t *testing.T) {
	require.Nil(t, jobgraph.Cycle([][]int{nil, {0}, {0}, {1, 2}}), "a diamond")
	require.Equal(t, []int{1, 2, 3}, jobgraph.Cycle([][]int{nil, {0, 2}, {1}, {2}}), "1 <-> 2, and 3 below them")
	require.Equal(t, []int{0}, jobgraph.Cycle([][]int{{0}}))

	// A 10,000-job chain and fan-in: linear.
	const n = 10000
	in := make([][]int, n+1)
	for i := 1; i < n; i++ {
		in[i] = []int{i - 1}
	}
	for i := range n {
		in[n] = append(in[n], i)
	}
	require.Nil(t, jobgraph.Cycle(in))
}
