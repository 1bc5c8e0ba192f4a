// Package metrics builds the Prometheus registry each pulse service exports
// on /metrics, and the gRPC server metrics the gRPC services share.
//
// Each service declares its own pulse_* metrics in one file and registers
// them on the registry returned by NewRegistry.
package metrics
