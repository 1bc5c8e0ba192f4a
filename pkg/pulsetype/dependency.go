package pulsetype

import "github.com/google/uuid"

// ParentFailurePolicy is what becomes of a job when one of its parents
// (a job it depends on) ends DEAD_LETTERED or CANCELED (ADR-0047).
type ParentFailurePolicy string

const (
	// OnParentFailureCancel cancels the child, and so on down the graph:
	// the default.
	OnParentFailureCancel ParentFailurePolicy = "cancel"
	// OnParentFailureRun runs the child once every parent is finished,
	// whatever their outcome.
	OnParentFailureRun ParentFailurePolicy = "run"
)

// Valid reports whether p is a known policy.
func (p ParentFailurePolicy) Valid() bool {
	return p == OnParentFailureCancel || p == OnParentFailureRun
}

// MaxDependsOn bounds the parents one job names in one submit: a fan-in
// beyond it is a graph of fan-ins.
const MaxDependsOn = 10000

// Dependency is one edge of NewJob.DependsOn: the parent's id and the
// child's policy when that parent fails.
type Dependency struct {
	Parent          uuid.UUID
	OnParentFailure ParentFailurePolicy
}
