// Package jobstore holds every SQL statement that moves a job through its
// lifecycle: submit, claim, heartbeat, complete, fail, cancel, retry. Each is
// a guarded UPDATE (or INSERT) written once, here, so a reviewer can read all
// of them in one sitting. The schema's transition trigger is the backstop;
// these guards are the first line.
//
// Every statement takes a batch: the gateway claims for many workers at
// once, workers report many results per call, and control-api coalesces
// single submits into one multi-row INSERT.
package jobstore
