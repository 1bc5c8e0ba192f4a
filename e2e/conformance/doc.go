// Package conformance holds the worker-SDK conformance suite: it starts a
// real fleet (real binaries as processes, real Postgres), runs each SDK's
// conformance driver as a process against it and holds every SDK to the
// same contracts of the worker protocol, printing a contract × SDK table.
// The contract the drivers implement is docs/sdk-conformance.md; make
// sdk-test runs the suite.
package conformance
