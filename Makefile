# floodgate's build. `make test` is everything CI checks; `make bench` is
# the comparison a user reads before choosing floodgate.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHSTAT   ?= golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
COUNT       ?= 6
BENCHTIME   ?= 300ms
FUZZTIME    ?= 60s
RESULTS     ?= results

.PHONY: test lint race chaos stress fuzz bench

# Lint, then every test under the race detector (the fuzz targets' seed
# corpora run as ordinary tests), then the lock-free packages and the
# stress suite again with the chaos tag, which widens the window between
# each load and its CAS and makes the stress tests prove that CASes lost.
test: lint race chaos

lint:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos ./...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./...

race:
	$(GO) test -race -count=1 ./...

chaos:
	$(GO) test -race -count=1 -tags chaos ./atomicbucket ./shardedlog ./stress .

# Minutes, not seconds: for a multi-core runner.
stress:
	$(GO) test -race -count=1 -tags chaos -timeout 60m ./stress -args -long
	$(GO) test -count=1 -timeout 60m ./stress -args -long

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./atomicbucket
	$(GO) test -run '^$$' -fuzz '^FuzzTwins$$' -fuzztime $(FUZZTIME) ./shardedlog
	$(GO) test -run '^$$' -fuzz '^FuzzLogTwins$$' -fuzztime $(FUZZTIME) ./shardedlog
	$(GO) test -run '^$$' -fuzz '^FuzzLimiterTwins$$' -fuzztime $(FUZZTIME) .

# Runs the whole suite COUNT times, one pass after another so that the
# implementations' samples interleave in time (on a shared, noisy machine
# that is what keeps their ratio fair), keeps the raw output with the
# machine's description under $(RESULTS)/, and prints benchstat with the
# implementations as columns.
BENCHCMD = $(GO) test -run '^$$' -bench . -benchmem -count 1 -benchtime $(BENCHTIME)

bench:
	@mkdir -p $(RESULTS)
	@{ echo "# command: make bench ($(COUNT) passes of: $(BENCHCMD) . ; and in bench/: $(BENCHCMD) .)"; \
	   echo "# date: $$(date -u +%Y-%m-%dT%H:%M:%SZ)"; \
	   echo "# machine: $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/ *$$//'), $$(nproc) cores, $$(free -g | awk '/Mem:/{print $$2}') GiB"; \
	   echo "# go: $$($(GO) version)"; } > $(RESULTS)/bench-raw.txt
	@for i in $$(seq $(COUNT)); do \
	   echo "pass $$i of $(COUNT)" >&2; \
	   $(BENCHCMD) . >> $(RESULTS)/bench-raw.txt || exit 1; \
	   (cd bench && $(BENCHCMD) .) >> $(RESULTS)/bench-raw.txt || exit 1; \
	 done
	$(GO) run $(BENCHSTAT) -col /impl $(RESULTS)/bench-raw.txt | tee $(RESULTS)/bench-benchstat.txt
