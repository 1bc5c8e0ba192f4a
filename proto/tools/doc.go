// Package tools pins the code generators (buf, protoc-gen-go,
// protoc-gen-go-grpc) in their own module so they never leak into the
// product modules' dependency graphs. Run them with `make generate`.
package tools
