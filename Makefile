# pulse — make help lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
MODULES = $(shell go list -m -f '{{.Dir}}/...')

.PHONY: help
help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: dev
dev: ## run the whole fleet locally without Docker (throwaway Postgres, 1 gateway as compose runs it, demo producer + worker)
	@scripts/ensure-postgres.sh
	@sdk/python/scripts/ensure-deps.sh >/dev/null || echo "make dev: the Python demo worker will not run (see above)"
	@(cd sdk/typescript && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run --silent build) || echo "make dev: the TypeScript demo worker will not run (see above; it needs Node 20+ and npm)"
	go run ./deploy/localfleet/cmd/pulse-dev

.PHONY: test
test: ## every module's tests but e2e, -race, real Postgres (about 6 min on 2 cores; installs the server binaries if missing)
	scripts/test.sh

.PHONY: test-long
test-long: ## the long tier: e2e's real fleets, browsers and short chaos, and the tests -short leaves out (release, image build, make dev)
	scripts/test-long.sh

# FUZZTIME is how long make fuzz runs each fuzz target.
FUZZTIME ?= 30s

.PHONY: sdk-test
sdk-test: ## hold every worker SDK (Go, TypeScript, Python) to the conformance suite on real fleets (docs/sdk-conformance.md; runs npm ci)
	@scripts/ensure-postgres.sh
	PULSE_SDK_TEST=all go test -count=1 -timeout 20m -v -run '^TestConformance$$' ./e2e/conformance

.PHONY: sdk-python-test
sdk-python-test: ## the Python SDK's own tests, the protocol against a real fleet (sdk/python; installs Debian's python3-grpcio/-protobuf if missing)
	@scripts/ensure-postgres.sh
	sdk/python/scripts/test.sh

.PHONY: fuzz
fuzz: ## run every fuzz target of the repo for FUZZTIME each (default 30s), against real Postgres like make test
	@pkgs=$$(go list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' $(MODULES) | \
		while read -r pkg dir files; do \
			for f in $$files; do grep -q '^func Fuzz' "$$dir/$$f" && { echo "$$pkg"; break; }; done; \
		done); \
	failed=""; \
	for pkg in $$pkgs; do \
		for target in $$(go test -list '^Fuzz' "$$pkg" | grep '^Fuzz'); do \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			go test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) "$$pkg" || failed="$$failed $$pkg.$$target"; \
		done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz targets that failed (inputs saved under testdata/fuzz):$$failed"; exit 1; fi

.PHONY: build
build: ## build every service binary into bin/
	@mkdir -p bin
	@for s in control-api dispatch-gateway reaper scheduler; do go build -o bin/$$s ./services/$$s || exit 1; done

.PHONY: compose-test
compose-test: ## run docker-compose.yml for real: build the images, 3 gateways, jobs, pause, kill, scale, down -v (installs Docker if missing)
	scripts/compose-test.sh

.PHONY: bench
bench: ## run the end-to-end load test against a throwaway local fleet (see docs/benchmarks.md)
	@scripts/ensure-postgres.sh
	go run ./loadtest/cmd/pulse-load

.PHONY: schema
schema: ## regenerate migrations/schema.sql: apply the migrations to a throwaway Postgres, pg_dump --schema-only it
	go test -count=1 -run '^TestSchemaSQLMatchesMigrations$$' ./pkg/server/schemadump -update

.PHONY: generate
generate: ## regenerate protobuf code with buf (offline, local plugins): Go into pkg/pulsepb, TypeScript into sdk/typescript/src/gen
	cd proto/tools && GOWORK=off go tool buf lint .. && GOWORK=off go tool buf generate .. --template ../buf.gen.yaml
	@command -v npm >/dev/null 2>&1 || { echo "generate: npm is not on PATH; the TypeScript SDK's generator (protoc-gen-es) needs Node 20+ and npm" >&2; exit 1; }
	@[ -x sdk/typescript/node_modules/.bin/protoc-gen-es ] || (cd sdk/typescript && npm ci --no-audit --no-fund)
	cd proto/tools && GOWORK=off go tool buf generate .. --template ../buf.gen.typescript.yaml

.PHONY: lint
lint: ## go vet + gofmt check + golangci-lint (.golangci.yaml) + buf lint
	go vet $(MODULES)
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	scripts/lint.sh
	cd proto/tools && GOWORK=off go tool buf lint ..

.PHONY: tidy
tidy: ## go mod tidy every module on its own (GOWORK=off), pulse's modules served from this tree
	scripts/tidy.sh

.PHONY: check-outside
check-outside: ## go get the SDK and pulsetx, go install the CLI and services, from outside the repo, at the modules' version
	scripts/check-outside.sh

.PHONY: release
release: ## release every module at VERSION=vX.Y.Z: requirements, dist/ binaries + SHA256SUMS, images, commit, tags (DRY_RUN=1 to rehearse)
	scripts/release.sh

.PHONY: chaos
chaos: ## the long randomized chaos test (kill -9, SIGSTOP, Postgres crash, pauses; CHAOS_DURATION=5m, CHAOS_SEED to replay)
	PULSE_CHAOS_DURATION=$${CHAOS_DURATION:-5m} PULSE_CHAOS_SEED=$${CHAOS_SEED:-} go test -count=1 -timeout 30m -run '^TestChaos$$' -v ./e2e
