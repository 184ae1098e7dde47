# pollworker: `make test` runs every test, including the real-Redis ones,
# of both Go modules: the library and binary (.) and the benchmarks (bench/,
# a module of its own so the library's go.mod carries only what the library
# and the binary need).
GO ?= go
# -count=1: integration/ tests a binary built from source the test cache does
# not track, so cached results could hide a regression. -vet=all: go test
# runs every vet check on what it compiles for the tests, so make test needs
# no separate `go vet` (which compiles every package again without -race:
# about 4 minutes of CPU from an empty cache); vet-untested vets the few
# packages without tests.
TESTFLAGS ?= -race -vet=all -count=1 -timeout 9m

.PHONY: test test-main test-bench vet-untested chart-check check fmt vet redis-server chromium build image demo chaos bench

# The two modules' tests run side by side (-j3): much of the tests' time is
# waiting on real timers and child processes. -O prints each one's output in
# one piece when it ends. deploy/'s tests lint and render the Helm chart and
# build the container image.
test: redis-server chromium fmt
	@$(MAKE) --no-print-directory -j3 -O test-main test-bench vet-untested

test-main:
	$(GO) test $(TESTFLAGS) ./...

test-bench:
	cd bench && $(GO) test $(TESTFLAGS) ./...

# go vet of the packages go test does not compile (no test files).
vet-untested:
	$(GO) vet $$($(GO) list -f '{{if not .TestGoFiles}}{{if not .XTestGoFiles}}{{.ImportPath}}{{end}}{{end}}' ./...)
	cd bench && $(GO) vet $$($(GO) list -f '{{if not .TestGoFiles}}{{if not .XTestGoFiles}}{{.ImportPath}}{{end}}{{end}}' ./...)

# The Helm chart alone, checked with Helm's own lint and template code
# (deploy/tools/chartcheck): the test make test runs with the others.
chart-check:
	$(GO) test -count=1 -run 'TestHelmChart' ./deploy/

check: fmt vet

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change: $$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

# redis-server is needed by the real-Redis tests: install it when missing
# (as root, from the system package manager), else say what to install.
redis-server:
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing redis-server with apt-get"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; \
	  else \
	    echo "redis-server is missing: install it (Debian/Ubuntu: sudo apt-get install redis-server) and run make test again"; exit 1; \
	  fi; \
	fi
	@redis-server --version

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(shell git rev-parse HEAD 2>/dev/null) -X main.date=$(shell date -u +%FT%TZ)

# chromium renders the status page in one test: install it when missing (as
# root), else that test is skipped with a message (and fails under CI=true).
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium with apt-get (for the status page test)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "chromium is missing: the status page test will be skipped (Debian/Ubuntu: sudo apt-get install chromium)"; \
	  fi; \
	fi

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/pollworker ./cmd/pollworker

# The container image, without a container engine: a multi-platform OCI
# image (linux/amd64, linux/arm64) FROM SCRATCH, written as an OCI layout
# archive by deploy/tools/imagebuild (go-containerregistry), stamped like
# `make build`. Load or push it with e.g. `skopeo copy
# oci-archive:bin/pollworker-image.tar docker://REGISTRY/pollworker:TAG`.
IMAGE_TAR ?= bin/pollworker-image.tar
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
image:
	@mkdir -p $(dir $(IMAGE_TAR))
	cd deploy/tools && $(GO) run ./imagebuild -C ../.. -o $(abspath $(IMAGE_TAR)) \
	  -platforms $(IMAGE_PLATFORMS) -ldflags "$(LDFLAGS)"

demo:
	$(GO) run ./cmd/pollworker demo

# The long chaos runs: TestChaos, 500 seeded fault iterations over every
# fault type of its fixed list (the Sentinel failover included, ~45 min),
# then TestChaosGenerated, 500 generated iterations of 6 steps each drawn
# from every kind of operator action, fault, planted bad data and load
# (~15 s each), each followed by a summary table. POLLWORKER_CHAOS_SEED
# reproduces a run; POLLWORKER_CHAOS_ITERATIONS, _STEPS and _KINDS (e.g.
# action,fault,-memory-pressure) narrow it; CHAOS_RUN picks the test(s).
CHAOS_RUN ?= TestChaos$$|TestChaosGenerated$$
chaos: redis-server
	POLLWORKER_CHAOS=long $(GO) test -count=1 -timeout 300m -run '$(CHAOS_RUN)' -v ./integration/

# Benchmarks against a real redis-server and the naive baseline (~6½ min;
# BENCHFLAGS=-quick for ~45 s), from the benchmark module bench/. Writes
# nothing unless -md/-json are given (paths relative to bench/).
bench: redis-server
	cd bench && $(GO) run ./cmd/pollbench $(BENCHFLAGS)
