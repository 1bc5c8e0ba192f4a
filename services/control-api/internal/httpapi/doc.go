// Package httpapi serves the ControlService operations as HTTP/JSON on a Go
// ServeMux. It only translates: bodies become pulse.v1 requests for the same
// api.ControlService methods gRPC calls, and apierr errors become statuses
// and a JSON error body naming the field.
//
//	POST /v1/jobs                  submit one job        → 201 (200 if duplicate) {"id","duplicate"}
//	POST /v1/jobs:batch            submit {"jobs":[...]} → 201 {"results":[{"id","duplicate"}]}
//	GET  /v1/jobs/{id}             one job
//	GET  /v1/jobs?topic=&status=&limit=&page_token=  → {"jobs":[...],"next_page_token":""}
//	POST /v1/jobs/{id}/cancel      → the job
//	POST /v1/jobs/{id}/retry       → the job
package httpapi
