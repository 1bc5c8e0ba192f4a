package pulsetype

import (
	"fmt"
	"strings"
)

// Status is a job's lifecycle state, as stored in jobs.status.
type Status string

// The statuses of the transition table (migrations/, docs/architecture.md).
const (
	StatusPending      Status = "PENDING"
	StatusRunning      Status = "RUNNING"
	StatusRetrying     Status = "RETRYING"
	StatusCompleted    Status = "COMPLETED"
	StatusDeadLettered Status = "DEAD_LETTERED"
	StatusCanceled     Status = "CANCELED"
)

// Statuses lists every status in lifecycle order.
var Statuses = []Status{StatusPending, StatusRunning, StatusRetrying, StatusCompleted, StatusDeadLettered, StatusCanceled}

// String is the status's name, as stored: "PENDING", "DEAD_LETTERED".
func (s Status) String() string { return string(s) }

// Terminal reports whether s is an end state (the job has finished_at).
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusDeadLettered || s == StatusCanceled
}

// Valid reports whether s is a known status.
func (s Status) Valid() bool {
	for _, v := range Statuses {
		if s == v {
			return true
		}
	}
	return false
}

// ParseStatus reads a status name case-insensitively ("dead_lettered",
// "COMPLETED"); anything else is an error that lists the names.
func ParseStatus(name string) (Status, error) {
	s := Status(strings.ToUpper(strings.TrimSpace(name)))
	if !s.Valid() {
		names := make([]string, len(Statuses))
		for i, v := range Statuses {
			names[i] = string(v)
		}
		return "", fmt.Errorf("pulsetype: unknown job status %q; want one of %s", name, strings.Join(names, ", "))
	}
	return s, nil
}
