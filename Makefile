# floodgate's build. `make test` is the check to run while working (a few
# minutes); `make check` is everything CI proves; `make bench` is the
# comparison a user reads before choosing floodgate. CONTRIBUTING.md says
# what each target proves.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COUNT       ?= 6
BENCHTIME   ?= 100ms
FUZZTIME    ?= 60s
RESULTS     ?= results

# Every module in the repository, the core first: each folder with a
# go.mod. The core keeps its go.mod lean; every module beside it exists
# to keep a dependency tree out of it (see CONTRIBUTING.md).
MODULES := . $(filter-out .,$(patsubst %/,%,$(dir $(shell find . -name go.mod -not -path './.git/*' -not -path '*/testdata/*' | sort))))
# The modules users import, which must build with the oldest Go their
# go.mod names; the others are the benchmark harness, the examples and
# two test-only modules (storekit/outoftree: a Store built on storekit
# alone, outside the repository's import path, that passes storetest).
LIBRARIES := $(filter-out ./bench ./examples ./httplimit/conformance ./storekit/outoftree,$(MODULES))

# The exported surface of every library module, in api/ (one file a
# module, in the form of Go's own api/ files): `make api` rewrites the
# files, lint fails when the code and they differ, and `make api-count`
# prints the exported names per package and in total.
API = $(GO) run ./internal/cmd/apifile -go '$(GO)' -dir api

# Runs a command in every module: $(call each,MODULES,command).
each = @set -e; for m in $($(1)); do echo "== $$m"; (cd $$m && $(2)); done

.PHONY: test check check-host lint filesize api api-count test-quick test-full test-heap test-chaos oldest-go test-cross bench-smoke stress fuzz bench bench-full

# Lint, then every test of every module under the race detector in its
# quick form, then the heap tests without it. 5 minutes on 2 cores with
# warm caches, 11½ from empty build and module caches (a fresh machine).
test: lint test-quick test-heap

# Everything CI proves (.ci/run runs it): check-host, then the other
# platforms, then the benchmark pipeline in its quick form. 28–30 minutes on
# 2 cores.
check: check-host test-cross bench-smoke

# The full proof on the machine's own platform; the workflow runs it on
# amd64 and on a real arm64 runner.
check-host: lint test-full test-heap test-chaos oldest-go

# The file sizes, gofmt, the API files, then go vet and staticcheck in
# every module (and vet of the chaos build's files).
lint: filesize
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(API) $(LIBRARIES)
	$(GO) vet -tags chaos ./...
	$(call each,MODULES,$(GO) vet ./... && $(GO) run $(STATICCHECK) ./...)

api:
	$(API) -w $(LIBRARIES)

api-count:
	@$(API) -count $(LIBRARIES)

# No non-test, non-generated .go file of any module over 700 lines, each
# named (.ci/filesize): a file that grows past that is split by concern.
filesize:
	@.ci/filesize

# Every test of every module under -race, in the quick form that
# FLOODGATE_QUICK=1 gives the longest ones (fuzz seeds, stress at a
# twentieth of its attempts, a smaller flood).
test-quick:
	$(call each,MODULES,FLOODGATE_QUICK=1 $(GO) test -race -count=1 -timeout 15m ./...)

# Every test of every module under -race, in its full form.
test-full:
	$(call each,MODULES,$(GO) test -race -count=1 -timeout 30m ./...)

# The tests that weigh the heap skip themselves under the race detector,
# whose own allocations make a heap figure meaningless: they run here,
# without it.
test-heap:
	$(GO) test -count=1 -run 'Memory|HeapBound' . ./httplimit ./inflight
	cd redislimit && $(GO) test -count=1 -run 'Memory|HeapBound' .
	cd rls && $(GO) test -count=1 -run 'HeapBound|LoadCost' . ./internal/config ./cmd/floodgate-rls

# The lock-free packages and the stress suite with -tags chaos, which
# widens the window between each load and its CAS and makes the stress
# tests prove that CASes lost.
test-chaos:
	$(GO) test -race -count=1 -timeout 30m -tags chaos ./internal/bucket ./internal/window ./internal/shardlog ./atomicbucket ./atomicwindow ./shardedlog ./registry ./inflight ./stress .

# Every library module vetted and built with the oldest Go its go.mod
# names, which the go command fetches through the module proxy.
oldest-go:
	$(call each,LIBRARIES,GOTOOLCHAIN=go$$(awk '/^go /{print $$2}' go.mod) $(GO) vet ./... && GOTOOLCHAIN=go$$(awk '/^go /{print $$2}' go.mod) $(GO) build ./...)

# The platforms users deploy on, from this amd64 machine, for every
# module: arm64 (the tests' -short form as GOARCH=arm64 binaries under
# qemu-user, Debian's qemu-user-static; then the sliding log's packages
# again on the LDAXP/STLXP loop instead of LSE's CASPAL); 386 (the same
# tests run natively, which checks that every 64-bit atomic is aligned on
# a 32-bit platform; a kernel without IA32 emulation, as some VMs' are,
# gets every 386 test binary built and none run, and says so); and
# windows/amd64 (vet, and every test binary compiled and linked). No race
# detector under emulation.
EMU   ?= qemu-aarch64-static
ARM64 = GOARCH=arm64 FLOODGATE_EMULATOR=$(EMU) $(GO) test -short -count=1 -timeout 30m -exec $(EMU)

test-cross:
	$(call each,MODULES,GOARCH=arm64 $(GO) vet ./... && $(ARM64) ./...)
	FLOODGATE_ARM64_LLSC=1 $(ARM64) ./internal/shardlog ./shardedlog ./stress .
	@if GOARCH=386 $(GO) test -count=1 -run '^$$' ./internal/clientip >/dev/null 2>&1; then \
	   echo "386: tests run natively"; run386="-short"; \
	 else \
	   echo "386: this kernel cannot run 386 binaries (no IA32 emulation; qemu-i386 cannot run Go's): building every 386 test binary instead"; run386="-exec true"; \
	 fi; \
	 set -e; for m in $(MODULES); do echo "$$m: 386"; (cd $$m && GOARCH=386 $(GO) vet ./... && GOARCH=386 $(GO) test -count=1 $$run386 ./...); done
	$(call each,MODULES,GOOS=windows $(GO) vet ./... && GOOS=windows $(GO) test -count=1 -exec true ./...)

# The whole of `make bench` and of `make bench-full` in their quick form
# (one pass, one iteration of every benchmark, each into a temporary
# folder): a harness that fails its own run fails here, before it lands.
bench-smoke:
	cd bench && FLOODGATE_BENCH_PIPELINE=1 $(GO) test -count=1 -run '^TestBenchPipeline$$' -timeout 30m .

# Minutes, not seconds: for a multi-core runner.
stress:
	$(GO) test -race -count=1 -tags chaos -timeout 60m ./stress -args -long
	$(GO) test -count=1 -timeout 60m ./stress -args -long

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./internal/bucket
	$(GO) test -run '^$$' -fuzz '^FuzzReserveTwins$$' -fuzztime $(FUZZTIME) ./internal/bucket
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./internal/window
	$(GO) test -run '^$$' -fuzz '^FuzzLogTwins$$' -fuzztime $(FUZZTIME) ./internal/shardlog
	$(GO) test -run '^$$' -fuzz '^FuzzLimiterTwins$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./inflight
	$(GO) test -run '^$$' -fuzz '^FuzzMachine$$' -fuzztime $(FUZZTIME) ./storekit

# `make bench` and `make bench-full` run bench/run.sh: the harness built
# once and run COUNT times, one pass after another, so that every
# implementation's samples interleave in time; the raw output with the
# machine's description, benchstat's comparison and cmd/report's summary
# and charts go to a folder. A failing benchmark (only a limiter that
# admits past its rule fails one) stops no pass, and the run then exits 1.
#
# `make bench` runs the benchmarks of the headline tables (SET=headline:
# BenchmarkAllow, Keys, Middleware, Redis and RLS, cut by the harness's
# -headline to one hot key and 1K to 1M keys beside the per-key peers,
# the middleware in process and on Redis, Redis beside redis_rate,
# floodgate-rls beside envoyproxy/ratelimit) into $(RESULTS)/, in under
# 6 minutes on 2 cores; its summary lists the tables it leaves out.
# `make bench-full` runs every benchmark of every family (SET=full) into
# $(RESULTS_FULL)/, in some 27 minutes on 2 cores: BenchmarkIdle leaves
# floodgate-rls idle for 10 s in each of its two scenarios whatever
# BENCHTIME says, BenchmarkXDS's load runs 20 s a service,
# BenchmarkRLS profiles each service for a second a scenario, and
# BenchmarkInFlightRedis's renewals hold their slots 4 s. On a quiet
# many-core machine, `make bench-full COUNT=10 BENCHTIME=1s
# GOROUTINES=1,2,4,8,16,64` is the long run. BENCHES (a -test.bench
# pattern) narrows either to some families: `make bench-full
# BENCHES='^BenchmarkCharge$$'`.
GOROUTINES   ?= 1,4,64
BENCHES      ?=
RESULTS_FULL ?= $(RESULTS)/full
bench-env = GO='$(GO)' BENCHSTAT='$(BENCHSTAT)' COUNT='$(COUNT)' BENCHTIME='$(BENCHTIME)' GOROUTINES='$(GOROUTINES)' BENCHES='$(BENCHES)'

bench:
	$(bench-env) SET=headline RESULTS='$(RESULTS)' MAKECMD='make bench' bench/run.sh

bench-full:
	$(bench-env) SET=full RESULTS='$(RESULTS_FULL)' MAKECMD='make bench-full' bench/run.sh
