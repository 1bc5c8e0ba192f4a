// Package submit turns many concurrent single-job submits into few
// multi-row INSERTs. A single-row commit caps one client near a few
// thousand jobs a second; coalescing lets control-api take far more
// without adding latency when it is idle.
package submit
