# Every Go module in this repository: the core and the nested integration modules.
MODULES := $(patsubst %/go.mod,%,$(wildcard go.mod */go.mod */*/go.mod))
MODULES := $(patsubst go.mod,.,$(MODULES))
GO ?= go
BENCHTIME ?= 1s
COUNT ?= 1

.PHONY: test fmt-check vet race norace bench bench-hot tidy-check peers work modules-check trace

## test: go.work up to date, gofmt check, go vet and race-enabled tests in every module,
## the gateway's tests again without the race detector (norace), then every nested module
## built alone against the versions it requires.
test: work fmt-check vet race norace modules-check

## work: (re)write go.work — every module found by git (nested ones included, so a new
## module joins by itself), each required version replaced by its directory. Commit it.
work:
	@cd internal/tools && GOWORK=off $(GO) run ./cmd/modcheck -root ../.. -work

## modules-check: each nested module builds with GOWORK=off against the core's required
## version (and its siblings'), served from a file-based module proxy made from this
## tree; fails on replace directives or placeholder versions of our modules. RELEASING.md.
modules-check:
	@cd internal/tools && $(GO) run ./cmd/modcheck -root ../..

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	@set -e; for m in $(MODULES); do echo "== go vet ($$m)"; (cd $$m && $(GO) vet ./...); done
	@echo "== go vet, 32-bit (.)"; GOARCH=386 CGO_ENABLED=0 $(GO) vet ./...

race:
	@set -e; for m in $(MODULES); do echo "== go test -race ($$m)"; (cd $$m && $(GO) test -race -count=1 ./...); done

## norace: the gateway's packages without the race detector, the only build in which
## examples/gateway/internal/rawio issues raw system calls (under -race they are plain
## ones, so that the detector sees the kernel's ordering).
norace:
	@echo "== go test, no -race (examples/gateway/...)"; cd examples && $(GO) test -count=1 ./gateway/...

## bench: every benchmark (COUNT=6 BENCHTIME=300ms for benchstat input). The
## million-binding benchmarks of affinity fill a table per op, so they run once each.
BIG_BENCH := BackendDown1M|DeleteList1M|MemoryPerBinding|MemoryPerSession
bench:
	@set -e; for m in $(MODULES); do echo "== go test -bench ($$m)"; (cd $$m && $(GO) test -run '^$$' -bench . -skip '$(BIG_BENCH)' -benchmem -count=$(COUNT) -benchtime=$(BENCHTIME) ./...); done
	@echo "== go test -bench '$(BIG_BENCH)' (affinity, 1 op each)"
	@$(GO) test -run '^$$' -bench '$(BIG_BENCH)' -benchmem -count=$(COUNT) -benchtime=1x ./affinity/
	@echo "== go test -bench MemoryPerSession (examples/gateway: 200,000 sessions per op, 1 op each)"
	@cd examples && $(GO) test -run '^$$' -bench MemoryPerSession -count=$(COUNT) -benchtime=1x ./gateway/

## peers: the example gateway against HAProxy and nginx (consistent hashing on
## X-Session-ID) over the same simulators on loopback; installs both with apt-get when
## missing. Takes a few minutes; not part of `make test` or CI. PEERS_ARGS go to peer-bench.
peers:
	@bash bench/peers/run.sh $(PEERS_ARGS)

## trace: download the Mooncake FAST'25 conversation trace that tracereplay and its tests
## read, to TRACE (default: next to the repository, never inside it), and check its
## SHA-256 (a present file with the right checksum is left alone). Needs curl and
## access to raw.githubusercontent.com.
TRACE ?= ../shared/traces/mooncake_conversation_trace.jsonl
TRACE_URL := https://raw.githubusercontent.com/kvcache-ai/Mooncake/3b5a594133958449a1feaf1c9e0fc1b553e34a28/FAST25-release/traces/conversation_trace.jsonl
TRACE_SHA256 := b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df
trace:
	@if [ -f "$(TRACE)" ] && echo "$(TRACE_SHA256)  $(TRACE)" | sha256sum -c --status; then \
		echo "trace: $(TRACE) present, sha256 ok"; exit 0; fi; \
	mkdir -p "$$(dirname "$(TRACE)")" && tmp="$(TRACE).part" && \
	echo "trace: downloading $(TRACE_URL)" && \
	if curl -fL --retry 3 -o "$$tmp" "$(TRACE_URL)" && echo "$(TRACE_SHA256)  $$tmp" | sha256sum -c --status; then \
		mv "$$tmp" "$(TRACE)" && echo "trace: $(TRACE) (sha256 ok)"; \
	else rm -f "$$tmp"; echo "trace: download failed or sha256 mismatch (want $(TRACE_SHA256))" >&2; exit 1; fi

## bench-hot: the hot paths beside their baselines in the same binaries (go-rendezvous
## for hrw; a map under a sync.Mutex writing a timestamp for hits; map insert + hrw.Pick
## for misses; a SelectBackend hit for Acquire+Done), COUNT interleaved rounds into
## bench-hot.txt, for benchstat (COUNT=6 BENCHTIME=300ms; see the README's Benchmarks
## section).
HOT_HRW := Rendezvous|Pick$$|PickWeighted
HOT_AFF := BaselineMutexMap|Hit/coarseclock|Miss/(fresh|baseline)|LeaseHit/mode=(select|acquire-off|acquire-on)/
bench-hot:
	@set -e; d=$$(mktemp -d); trap 'rm -rf $$d' EXIT; \
	$(GO) test -c -o $$d/hrw.test ./hrw; $(GO) test -c -o $$d/affinity.test ./affinity; \
	for r in $$(seq $(COUNT)); do \
		$$d/hrw.test -test.run '^$$' -test.bench '$(HOT_HRW)' -test.benchmem -test.benchtime $(BENCHTIME); \
		$$d/affinity.test -test.run '^$$' -test.bench '$(HOT_AFF)' -test.benchmem -test.benchtime $(BENCHTIME); \
	done | tee bench-hot.txt
