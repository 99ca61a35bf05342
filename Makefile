# Development tasks. `make` alone lists them; README.md, "Development".
# Everything runs from a fresh clone with Go and a C compiler (cgo, for
# SQLite); `make lint` installs the pinned staticcheck into GOPATH/bin.
# `make test` (scripts/test.sh) sets up what the suite needs: PostgreSQL's
# server (Debian's package when initdb is missing) and versitygw, started on
# loopback for the run. `make bench` needs PostgreSQL too:
# $SLUICE_TEST_POSTGRES, else the server binaries (README.md, "Development").

GO ?= go
# staticcheck, pinned: bump it on purpose, with the fixes it asks for.
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
FUZZTIME ?= 10s
BENCH ?= .
BENCHPKGS ?= ./splitter/ ./tracker/ ./internal/gen/corpus/ ./translate/

export CGO_ENABLED = 1

.DEFAULT_GOAL := help
.PHONY: help test test-race lint staticcheck bench fuzz

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  make %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

test: ## the whole suite: scripts/test.sh (starts PostgreSQL and versitygw on loopback, installing them if missing; then go test ./...)
	scripts/test.sh

test-race: ## go test -race ./..., in the main module and in sdktest/
	$(GO) test -race ./...
	cd sdktest && $(GO) test -race ./...

lint: staticcheck ## go vet and staticcheck over every package, the nested module sdktest/ too
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd sdktest && $(GO) vet ./... && $(STATICCHECK) ./...

staticcheck: ## go install the pinned staticcheck into GOPATH/bin unless it is there
	@$(STATICCHECK) -version 2>/dev/null | grep -q '($(STATICCHECK_VERSION:v%=%))' || \
		$(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

bench: ## go test -bench BENCH (default .) -benchmem over BENCHPKGS; BENCHMARKS.md has the end-to-end scripts
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem $(BENCHPKGS)

fuzz: ## every fuzz target for FUZZTIME each (default 10s), as CI runs them
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh
