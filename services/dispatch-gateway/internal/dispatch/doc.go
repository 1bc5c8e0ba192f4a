// Package dispatch is the gateway's data plane: the Registry of connected
// worker streams and their free slots, the one Dispatcher loop that claims
// for all of them, and the Listener that wakes it when jobs are inserted.
//
// One claim loop per gateway (not per worker) is what makes database load
// scale with gateways and work instead of with idle connections; claiming
// only for free slots is what keeps a job from sitting leased in a worker's
// memory waiting for a slot.
package dispatch
