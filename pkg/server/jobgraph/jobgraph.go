// Package jobgraph turns the depends_on of a submit's jobs into their
// edges (ADR-0047): it resolves each parent — an existing job's id, or
// "$n", the n-th job (from 0) of the same call — refuses a graph with a
// cycle before anything is written (Kahn's algorithm), and names the
// workflow the call's jobs belong to. Whether an outside parent exists is
// the store's to check, in the submit's transaction.
package jobgraph

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/pulsequeue/pulse/pkg/pulsetype"
	"github.com/pulsequeue/pulse/pkg/server/apierr"
)

// Ref is one depends_on entry as submitted.
type Ref struct {
	// Job is a job id, or "$n".
	Job             string
	OnParentFailure pulsetype.ParentFailurePolicy // "": cancel
}

// Has reports whether any job of a call names a parent.
func Has(refs [][]Ref) bool {
	for _, r := range refs {
		if len(r) > 0 {
			return true
		}
	}
	return false
}

// Build sets jobs[i].DependsOn from refs[i] and, when the call has any
// dependency, every job's WorkflowID to the first job's id: a graph
// submitted in one call is one workflow. prefix(i) is how errors name job
// i ("jobs[3]", or "" for a single job's bare fields). It returns an
// InvalidArgument naming the field: a malformed or out-of-range
// reference, a job naming itself or a parent twice, too many parents, or
// the jobs that form a cycle.
func Build(jobs []pulsetype.NewJob, refs [][]Ref, prefix func(i int) string) error {
	if !Has(refs) {
		return nil
	}
	field := func(i, k int) string {
		f := fmt.Sprintf("depends_on[%d]", k)
		if p := prefix(i); p != "" {
			f = p + "." + f
		}
		return f
	}
	// in[i]: the jobs of the call job i depends on.
	in := make([][]int, len(jobs))
	for i := range jobs {
		if i >= len(refs) {
			break
		}
		if n := len(refs[i]); n > pulsetype.MaxDependsOn {
			name := "depends_on"
			if p := prefix(i); p != "" {
				name = p + "." + name
			}
			return apierr.Invalid(name, "has %d parents; the limit is %d (a larger fan-in is a graph of fan-ins)", n, pulsetype.MaxDependsOn)
		}
		seen := make(map[uuid.UUID]bool, len(refs[i]))
		deps := make([]pulsetype.Dependency, 0, len(refs[i]))
		for k, r := range refs[i] {
			policy := r.OnParentFailure
			if policy == "" {
				policy = pulsetype.OnParentFailureCancel
			}
			if !policy.Valid() {
				return apierr.Invalid(field(i, k)+".on_parent_failure", "%q is not a policy: cancel or run", string(policy))
			}
			var parent uuid.UUID
			if n, ok := strings.CutPrefix(r.Job, "$"); ok {
				at, err := strconv.Atoi(n)
				if err != nil || at < 0 || at >= len(jobs) || strconv.Itoa(at) != n {
					return apierr.Invalid(field(i, k), "%q is not a job of this call: \"$n\" names the n-th job, $0..$%d", r.Job, len(jobs)-1)
				}
				if at == i {
					return apierr.Invalid(field(i, k), "%q is the job itself", r.Job)
				}
				in[i] = append(in[i], at)
				parent = jobs[at].ID
			} else {
				id, err := uuid.Parse(r.Job)
				if err != nil || len(r.Job) != 36 {
					return apierr.Invalid(field(i, k), "%q is neither a job id nor \"$n\"", r.Job)
				}
				if id == jobs[i].ID {
					return apierr.Invalid(field(i, k), "%q is the job itself", r.Job)
				}
				if at := slices.IndexFunc(jobs, func(j pulsetype.NewJob) bool { return j.ID == id }); at >= 0 {
					in[i] = append(in[i], at)
				}
				parent = id
			}
			if seen[parent] {
				return apierr.Invalid(field(i, k), "names job %s a second time", parent)
			}
			seen[parent] = true
			deps = append(deps, pulsetype.Dependency{Parent: parent, OnParentFailure: policy})
		}
		jobs[i].DependsOn = deps
	}
	if cycle := Cycle(in); cycle != nil {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = "$" + strconv.Itoa(i)
		}
		return apierr.Invalid("depends_on", "the jobs %s are on a cycle or wait for one; a graph must be acyclic", strings.Join(names, ", "))
	}
	for i := range jobs {
		jobs[i].WorkflowID = jobs[0].ID
	}
	return nil
}

// Cycle returns the jobs left on a cycle of the graph whose job i depends
// on in[i] (Kahn's algorithm: the jobs no topological order reaches), in
// index order; nil when the graph is acyclic. O(jobs + edges).
func Cycle(in [][]int) []int {
	n := len(in)
	out := make([][]int, n)
	indeg := make([]int, n)
	for child, parents := range in {
		for _, p := range parents {
			out[p] = append(out[p], child)
			indeg[child]++
		}
	}
	queue := make([]int, 0, n)
	for i := range n {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for k := 0; k < len(queue); k++ {
		for _, c := range out[queue[k]] {
			if indeg[c]--; indeg[c] == 0 {
				queue = append(queue, c)
			}
		}
	}
	if len(queue) == n {
		return nil
	}
	var left []int
	for i := range n {
		if indeg[i] > 0 {
			left = append(left, i)
		}
	}
	return left
}
