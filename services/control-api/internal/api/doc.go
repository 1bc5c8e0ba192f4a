// Package api implements pulse.v1.ControlService: the producer and operator
// operations control-api serves over gRPC. The HTTP/JSON transport
// (package httpapi) calls the same methods, so both transports validate,
// store and answer alike.
package api
