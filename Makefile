# Tether's developer entry points. Every target needs only Go and the Go module
# proxy; the control plane and buf are built from source once and then cached.

GO      ?= go
# Every target builds and tests with this Go release, which the go command
# fetches once from the Go module proxy: the newest that govulncheck finds
# clean (go1.26.8's net/http, crypto/tls, crypto/x509 and html/template have
# known vulnerabilities the broker reaches). go.mod still asks only Go 1.26,
# so the SDK builds with what its users have.
export GOTOOLCHAIN := go1.27.3
BIN     := $(CURDIR)/bin
BUF     := $(BIN)/buf
# Tests start real etcd and kube-apiserver processes; 2 packages at a time keeps
# a 2-core machine responsive.
TESTFLAGS ?= -race -count=1 -timeout 30m -p 2

.PHONY: fuzz all build test check vet rules-check vulncheck fmt fmt-check proto proto-lint proto-check \
        proto-breaking proto-python proto-typescript typescript docs conformance controlplane test-binaries cluster node image demo chaos chaos-selftest bench bench-timers bench-scale bench-pushdown bench-failover bench-admission clean help

all: build

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | expand -t 18

build: ## compile everything and put the binaries in bin/
	$(GO) build ./...
	$(GO) build -o $(BIN)/ ./cmd/...

controlplane: ## build etcd and kube-apiserver into the cache (once per pinned version)
	$(GO) run ./test/cluster --build-only

test-binaries: ## build everything make test starts into the cache, with progress: the control plane, the one-node cluster's binaries, helm and jaeger (once per pinned version)
	$(GO) run ./test/cluster --node --build-only

cluster: ## run a local control plane in the foreground; kubeconfig in .dev/kubeconfig
	$(GO) run ./test/cluster --kubeconfig .dev/kubeconfig

node: ## run a one-node cluster in the foreground (root; kubelet, containerd, controllers; tether:dev imported); kubeconfig in .dev/kubeconfig
	$(GO) run ./test/cluster --node --kubeconfig .dev/kubeconfig

image: ## the image without Docker: the static binaries in an OCI image tarball, .dev/tether-image.tar (tether:dev), for ctr images import or kind load image-archive, and its SBOM (.dev/tether-image.spdx.json)
	$(GO) run ./test/image -o .dev/tether-image.tar -tag tether:dev

demo: ## the main job on the local control plane (see README)
	$(GO) run ./test/cluster --kubeconfig .dev/kubeconfig --demo

test: test-binaries ## unit and end-to-end tests against a real control plane, the fuzz targets for FUZZTIME inputs each, then a 2-minute chaos run
	$(GO) test $(TESTFLAGS) ./...
	$(MAKE) fuzz
	$(MAKE) chaos SEED=1 DURATION=2m

# Every decoder of untrusted input has a fuzz target; its corpus is in the
# package's testdata/fuzz and runs with the unit tests too. FUZZTIME is a count
# of inputs, not a duration, so that a loaded machine does the same work as an
# idle one (and go1.26's fuzz coordinator could report a bare "context deadline
# exceeded" at the end of a duration, golang/go#75804).
FUZZ_TARGETS = broker/informer:FuzzFromJSON broker/session:FuzzHello broker/dispatch:FuzzAckWrite broker/admission:FuzzDecodeReview broker/admission:FuzzCheckPatch
FUZZTIME ?= 5000x

fuzz: ## run each fuzz target for FUZZTIME inputs (default 5000x)
	@for t in $(FUZZ_TARGETS); do \
		echo "fuzz: $${t%%:*} $${t##*:} for $(FUZZTIME)"; \
		$(GO) test ./$${t%%:*} -run '^$$' -fuzz "^$${t##*:}$$" -fuzztime $(FUZZTIME) || exit 1; \
	done

check: vet fmt-check proto-lint proto-check proto-breaking rules-check vulncheck ## static checks that CI runs

vet:
	$(GO) vet ./...

rules-check: ## check the shipped alerting rules and run their unit tests with promtool (built once into the cache)
	$(GO) run ./test/promtool check rules deploy/helm/tether/files/alerts.yaml
	$(GO) run ./test/promtool test rules test/promtool/testdata/alerts_test.yaml

vulncheck: ## govulncheck over the module, against the database snapshot test/tools/vuln/go.mod pins (indexed once into the cache); VULNDB=https://vuln.go.dev for the live one
	$(GO) run ./test/vulncheck $(if $(VULNDB),-db $(VULNDB))

fmt: ## gofmt the tree
	gofmt -w $$(git ls-files '*.go')

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

$(BUF): proto/tools/go.mod proto/tools/go.sum
	$(GO) -C proto/tools build -o $(BUF) github.com/bufbuild/buf/cmd/buf

proto: $(BUF) ## regenerate the Go code from proto/
	cd proto && $(BUF) generate

docs: ## regenerate docs/reference/flags.md from the binaries' -help (a test keeps it current)
	$(GO) run ./test/flagdoc

proto-python: ## regenerate the Python SDK's stubs in sdk/python/tether/v1 (needs protobuf-compiler, protobuf-compiler-grpc)
	test/python/gen.sh

# The TypeScript SDK's dependencies, from its committed lockfile; npm ci
# writes node_modules/.package-lock.json, newer than the lockfile it read.
NPM    ?= npm
TS_SDK := sdk/typescript

$(TS_SDK)/node_modules/.package-lock.json: $(TS_SDK)/package-lock.json
	cd $(TS_SDK) && $(NPM) ci --no-audit --no-fund

proto-typescript: $(BUF) $(TS_SDK)/node_modules/.package-lock.json ## regenerate the TypeScript SDK's code in sdk/typescript/src/gen (protoc-gen-es, installed by npm ci)
	cd proto && $(BUF) generate --template buf.gen.typescript.yaml

typescript: $(TS_SDK)/node_modules/.package-lock.json ## build the TypeScript SDK with tsc into sdk/typescript/build and run its unit tests (node --test)
	cd $(TS_SDK) && $(NPM) test

proto-lint: $(BUF)
	cd proto && $(BUF) lint

proto-check: proto proto-typescript ## fail when the committed generated code (Go, TypeScript) is stale
	@if [ -n "$$(git status --porcelain -- proto $(TS_SDK)/src/gen)" ]; then \
		echo "generated code differs from what is committed; run 'make proto proto-typescript' and commit:"; \
		git status --porcelain -- proto $(TS_SDK)/src/gen; git --no-pager diff --stat -- proto $(TS_SDK)/src/gen; exit 1; fi

# The wire is guarded against the main branch: a field renumbered, retyped
# or removed, or an enum value reused, breaks SDKs already deployed. A
# checkout without a local main (a shallow CI clone) has nothing to compare.
proto-breaking: $(BUF) ## fail when proto/ breaks the wire of the main branch (buf breaking)
	@if git rev-parse -q --verify main >/dev/null; then \
		cd proto && $(BUF) breaking --against '../.git#branch=main,subdir=proto'; \
	else echo "proto-breaking: no local main branch to compare with; skipped"; fi

# The handler each SDK provides to the conformance kit's spec
# (test/conformance/README.md), as a command.
SDK ?= go
CONFORMANCE_go     = $(BIN)/conformance-go
CONFORMANCE_python = /usr/bin/python3 -I -B -u test/conformance/handlers/python/handler.py
CONFORMANCE_typescript = node test/conformance/handlers/typescript/handler.js

conformance: controlplane ## check an SDK's handler against docs/protocol.md, a line per rule and a JSON report (SDK=go|python|typescript)
	@case "$(SDK)" in go|python|typescript) ;; *) echo "conformance: SDK must be go, python or typescript, not $(SDK)"; exit 2 ;; esac
	@if [ "$(SDK)" = go ]; then $(GO) build -o $(BIN)/conformance-go ./test/conformance/handlers/go; fi
	@if [ "$(SDK)" = typescript ]; then $(MAKE) --no-print-directory $(TS_SDK)/node_modules/.package-lock.json && cd $(TS_SDK) && $(NPM) run build; fi
	$(GO) run ./test/conformance -- $(CONFORMANCE_$(SDK))

clean:
	rm -rf $(BIN) .dev

SEED ?= 1
DURATION ?= 10m
CHAOSFLAGS ?=

chaos: controlplane ## random faults against the real control plane, judged by a checker against the rules of docs/design.md (SEED=, DURATION=; docs/reliability.md)
	$(GO) run ./test/chaos/cmd/chaos -seed $(SEED) -duration $(DURATION) $(CHAOSFLAGS)

# Each deliberate breakage of broker/dispatch/breakage.go and the rule of
# the contract (docs/design.md) the checker must report broken for it.
BREAKAGES ?= keep-holds:3 skip-creates:6 skip-deletes:3 skip-strict:2 clobber:4 tick-deleting:5 panic:7

chaos-selftest: controlplane ## show the chaos checker catches each broken rule of the contract: one short run per deliberately broken broker build
	@for b in $(BREAKAGES); do \
		echo "chaos-selftest: -break $${b%%:*}, expecting rule $${b##*:}"; \
		$(GO) run ./test/chaos/cmd/chaos -seed $(SEED) -duration 60s -break $${b%%:*} -expect $${b##*:} || exit 1; \
	done

bench: ## create/delete benchmark: the broker with a Go and a Python handler vs a raw client-go controller, on the result, label and status workloads (docs/bench.md)
	$(GO) run ./test/bench -n 2000 -qps 1000 -burst 2000 -workloads result,label,status -handler go,python $(BENCHFLAGS)

bench-timers: ## timer benchmark: 10,000 objects with a timer at 1s and 10s (docs/bench.md)
	$(GO) run ./test/bench -timers $(BENCHFLAGS)

bench-scale: ## the broker at 1,000, 10,000 and 100,000 objects against raw, and 100,000 timers at 10s: one table (docs/bench.md, about an hour; -timeout 30m: the 100,000 holds take 10 to 15 minutes on 2 cores)
	$(GO) run ./test/bench -scale -qps 1000 -burst 2000 -timeout 30m $(BENCHFLAGS)

bench-pushdown: ## label pushdown: the broker caching the 1% of 10,000 Widgets a handler's label selector binds, against caching them all (docs/bench.md)
	$(GO) run ./test/bench -pushdown -qps 1000 -burst 2000 $(BENCHFLAGS)

bench-failover: ## failover at 10,000 objects: the leader stopped (SIGTERM, SIGKILL) to the first delivery, warm against cold followers (docs/bench.md)
	$(GO) run ./test/bench -failover -qps 1000 -burst 2000 $(BENCHFLAGS)

bench-admission: controlplane ## admission round trip through the broker vs the same API server without a webhook (docs/admission.md)
	$(GO) test -run '^$$' -bench AdmissionRoundTrip -benchtime 2000x -count 3 ./test/admission
