# floodgate's build. `make test` is the check to run while working (a few
# minutes); `make check` is everything CI proves; `make bench` is the
# comparison a user reads before choosing floodgate.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COUNT       ?= 6
BENCHTIME   ?= 100ms
FUZZTIME    ?= 60s
RESULTS     ?= results

# Every module in the repository: the core and the modules that keep their
# dependencies out of its go.mod.
MODULES := . bench grpclimit redislimit httplimit/conformance prommetrics otelmetrics examples

.PHONY: test check full lint quick race memory chaos go-min stress fuzz bench bench-full test-arm64

# Lint, then every package's tests in every module under the race
# detector, in their quick form (FLOODGATE_QUICK=1, see
# internal/testmain): the fuzz targets' seed corpora, the stress suite on
# every algorithm and twin with demand at least twice the supply, and
# redislimit against a real redis-server and a 6-node Redis Cluster, which
# its tests start themselves (Debian's redis-server package; without it
# they skip, unless FLOODGATE_REQUIRE_REDIS=1, as in CI); then the heap
# tests without the race detector. 3½ to 4½ minutes on 2 cores with a
# warm build cache.
test: lint quick memory

# Everything CI proves: `make full` on this machine, then the other
# platforms (test-arm64). About 25 minutes on 2 cores. .ci/run runs it.
check: full test-arm64

# The full proof on this platform: lint; every test in its full form
# under the race detector; the lock-free packages and the stress suite
# again with the chaos tag, which widens the window between each load and
# its CAS and makes the stress tests prove that CASes lost; and a vet and
# build with the oldest Go that go.mod claims. The workflow's test jobs
# run it on amd64 and on a real arm64 runner.
full: lint race memory chaos go-min

lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet -tags chaos ./...  # the chaos build's files; the loop vets the rest
	@set -e; for m in $(MODULES); do echo "lint $$m"; (cd $$m && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...); done

quick:
	@set -e; for m in $(MODULES); do echo "quick tests: $$m"; (cd $$m && FLOODGATE_QUICK=1 $(GO) test -race -count=1 -timeout 15m ./...); done

race:
	@set -e; for m in $(MODULES); do echo "tests: $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 30m ./...); done

# The tests that weigh the heap skip themselves under the race detector,
# whose own allocations make a heap figure meaningless: they run here,
# without it.
memory:
	$(GO) test -count=1 -run 'Memory|HeapBound' . ./httplimit

chaos:
	$(GO) test -race -count=1 -timeout 30m -tags chaos ./atomicbucket ./atomicwindow ./shardedlog ./stress .

# The platforms users deploy on, from this amd64 machine. arm64: every
# package's tests in every module, the fuzz seeds and the stress suite
# (its -short form), as GOARCH=arm64 binaries run by qemu-user (Debian's
# qemu-user-static), then the sliding log's packages again on the
# LDAXP/STLXP loop instead of LSE's CASPAL. 386: the same tests, run
# natively, which checks that every 64-bit atomic is aligned on a 32-bit
# platform (where the kernel can run 386 binaries: a kernel built without
# IA32 emulation, as some VMs' are, gets every 386 test binary built and
# none run, and says so). windows/amd64: vet, and every test binary
# compiled and linked (-exec true runs none of them). No race detector
# under emulation.
EMU ?= qemu-aarch64-static
ARM64 = GOARCH=arm64 FLOODGATE_EMULATOR=$(EMU) $(GO) test -short -count=1 -timeout 30m -exec $(EMU)

test-arm64:
	GOARCH=arm64 $(GO) vet ./...
	$(ARM64) ./...
	FLOODGATE_ARM64_LLSC=1 $(ARM64) ./shardedlog ./stress .
	cd grpclimit && $(ARM64) ./...
	cd examples && $(ARM64) ./...
	cd redislimit && $(ARM64) ./...
	GOARCH=386 $(GO) vet ./...
	@if GOARCH=386 $(GO) test -count=1 -run '^$$' ./internal/clientip >/dev/null 2>&1; then \
	   GOARCH=386 $(GO) test -short -count=1 ./...; \
	 else \
	   echo "test-arm64: this kernel cannot run 386 binaries (no IA32 emulation; qemu-i386 cannot run Go's): building every 386 test binary instead"; \
	   GOARCH=386 $(GO) test -count=1 -exec true ./...; \
	 fi
	GOOS=windows $(GO) vet ./...
	GOOS=windows $(GO) test -count=1 -exec true ./...

# The oldest Go that go.mod claims, from its go line: the library and
# grpclimit and redislimit (which claim the same) are vetted and built with
# that toolchain, which the go command fetches through the module proxy.
# (bench/ needs Go 1.26, for x/time/rate v0.16.0; it is not a library.)
GO_MIN := go$(shell awk '/^go /{print $$2}' go.mod)

go-min:
	GOTOOLCHAIN=$(GO_MIN) $(GO) version
	GOTOOLCHAIN=$(GO_MIN) $(GO) vet ./... && GOTOOLCHAIN=$(GO_MIN) $(GO) build ./...
	cd grpclimit && GOTOOLCHAIN=$(GO_MIN) $(GO) vet ./... && GOTOOLCHAIN=$(GO_MIN) $(GO) build ./...
	cd redislimit && GOTOOLCHAIN=$(GO_MIN) $(GO) vet ./... && GOTOOLCHAIN=$(GO_MIN) $(GO) build ./...

# Minutes, not seconds: for a multi-core runner.
stress:
	$(GO) test -race -count=1 -tags chaos -timeout 60m ./stress -args -long
	$(GO) test -count=1 -timeout 60m ./stress -args -long

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./atomicbucket
	$(GO) test -run '^$$' -fuzz '^FuzzReserveTwins$$' -fuzztime $(FUZZTIME) ./atomicbucket
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./atomicwindow
	$(GO) test -run '^$$' -fuzz '^FuzzLogTwins$$' -fuzztime $(FUZZTIME) ./shardedlog
	$(GO) test -run '^$$' -fuzz '^FuzzLimiterTwins$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME) .

# `make bench` builds the harness in bench/ once and runs it COUNT times, one
# pass after another, so that every implementation's samples interleave in
# time: on a shared, noisy machine that is what keeps their ratios fair. It
# keeps the raw output with the machine's description under $(RESULTS)/,
# writes benchstat's comparison with the implementations as columns, and
# prints the summary (ratios, latency, bytes per key, throughput) that
# bench/cmd/report makes, with its SVG charts, from the raw output. A pass
# with a failing benchmark (only a limiter that admits past its rule
# fails one; denials are reported, see bench/allow_test.go) does not stop
# the run: every pass runs, results/ is written, and make bench then exits
# with an error that says so.
# `make bench-full` is the long run for a quiet many-core machine.
GOROUTINES ?= 1,4,64
BENCHES    ?= ^Benchmark(Allow|Keys|Latency|Goroutines|Paired|BytesPerKey|DependentLoad|ClockRead|Middleware|Redis)$$
BENCHARGS   = -test.run '^$$' -test.bench '$(BENCHES)' -test.benchmem -test.count 1 -test.benchtime $(BENCHTIME) -goroutines $(GOROUTINES)

bench:
	@mkdir -p $(RESULTS)
	cd bench && $(GO) test -c -o bench.test .
	@{ echo "# command: make bench COUNT=$(COUNT) BENCHTIME=$(BENCHTIME) GOROUTINES=$(GOROUTINES) ($(COUNT) passes of: cd bench && ./bench.test $(BENCHARGS))"; \
	   echo "# date: $$(date -u +%Y-%m-%dT%H:%M:%SZ)"; \
	   echo "# commit: $$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$$(git status --porcelain -- . ':!$(RESULTS)' 2>/dev/null | grep -q . && echo ' (with uncommitted changes)')"; \
	   echo "# machine: $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$$//'), $$(nproc) cores, $$(free -g | awk '/Mem:/{print $$2}') GiB"; \
	   echo "# go: $$($(GO) version)"; } > $(RESULTS)/bench-raw.txt
	@failed=0; for i in $$(seq $(COUNT)); do \
	   echo "pass $$i of $(COUNT)" >&2; \
	   (cd bench && ./bench.test $(BENCHARGS)) >> $(RESULTS)/bench-raw.txt || failed=$$((failed + 1)); \
	 done; \
	 $(GO) run $(BENCHSTAT) -col /impl $(RESULTS)/bench-raw.txt > $(RESULTS)/bench-benchstat.txt; \
	 (cd bench && $(GO) run ./cmd/report -in $(abspath $(RESULTS))/bench-raw.txt -out $(abspath $(RESULTS))) || exit 1; \
	 if [ $$failed -gt 0 ]; then \
	   echo "make bench: $$failed of $(COUNT) passes had a failing benchmark (--- FAIL in $(RESULTS)/bench-raw.txt); results/ was written all the same" >&2; exit 1; \
	 fi

bench-full:
	$(MAKE) bench COUNT=10 BENCHTIME=1s GOROUTINES=1,2,4,8,16,64 RESULTS=results/full
