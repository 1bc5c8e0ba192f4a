// Package sweep is the reaper's lease sweeper: the loop that finds RUNNING
// jobs whose worker stopped heartbeating and routes them through the normal
// retry path. Recovery is not a subsystem; it is the failure
// report the worker did not live to make.
//
// Each tick reaps in bounded batches until a batch comes back short, so a
// backlog of any size costs many short transactions rather than one long
// one. Any number of reapers may sweep at once: the statement skips rows
// another reaper holds and re-checks the lease, so each lapse is reaped once.
package sweep
