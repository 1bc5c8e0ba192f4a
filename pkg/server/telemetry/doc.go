// Package telemetry configures OpenTelemetry tracing for a pulse service
// from the standard OTEL_* environment variables, so operators set up
// tracing the same way for pulse as for anything else they run.
//
// With nothing configured tracing is off and silent; the W3C trace context
// and baggage propagators are installed either way, so a service passes
// trace context along even when it records no spans of its own.
package telemetry
