// Package deploytest checks the deployment files against the code they
// deploy, without Docker or a cluster: docker-compose.yml (loaded with
// compose-spec's Go loader), deploy/docker/Dockerfile and its healthcheck
// probe, deploy/prometheus, deploy/grafana and deploy/k8s (built with
// kustomize and decoded strictly into the typed Kubernetes API).
//
// The source of truth for configuration is each binary's own -h output:
// the tests build every command and fail on any PULSE_* variable a
// deployment sets that the command does not read. It has no non-test code
// besides this comment; run it with `go test ./deploy/deploytest/...`.
package deploytest
