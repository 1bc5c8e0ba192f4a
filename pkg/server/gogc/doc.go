// Package gogc gives pulse's hot-path services (dispatch-gateway,
// control-api) a garbage-collector target suited to them when the operator
// has not chosen one with GOGC.
package gogc
