# turnstream developer targets. Every target calls the venv's tools directly, so
# nothing needs activating. `make test` is the README's test command (all lanes).
VENV   ?= .venv
PYTHON ?= python3.11
BIN    := $(VENV)/bin

.PHONY: install native jars jaeger broker-up broker-down broker-status topics check fmt \
        test test-unit test-kafka test-generic demo smoke bench bench-peers \
        cluster-up cluster-down cluster-status test-cluster test-secure

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

install: $(BIN)/python  ## venv + editable install with dev, analytics, gateway and otel extras
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[dev,analytics,gateway,otel]"

native:  ## rebuild the codec's C fast path in place (make install builds it too)
	$(BIN)/python hatch_build.py

jars:  ## fetch the Kafka broker jars from Maven Central (skipped when cached)
	$(BIN)/turnstream broker jars

jaeger:  ## build Jaeger (the tracing tests' OTLP receiver) from the Go module proxy into ~/.cache/turnstream (skipped when cached)
	bash infra/jaeger/build.sh

broker-up:  ## start (or reuse) the local KRaft broker on 127.0.0.1:19092
	$(BIN)/turnstream broker up

broker-down:  ## stop the local broker
	$(BIN)/turnstream broker down

broker-status:
	$(BIN)/turnstream broker status

topics:  ## create/validate the topics of infra/topics.yaml
	$(BIN)/turnstream topics apply

fmt:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

check:  ## formatting, lint, types, import contracts (pyproject's [tool.importlinter])
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

test:  ## all lanes: unit + kafka (the kafka fixture starts/reuses the local broker)
	$(BIN)/pytest tests

test-unit:  ## the broker-free lane
	$(BIN)/pytest tests -m "not kafka"

test-kafka:
	$(BIN)/pytest tests -m kafka

# The Kafka contract tests: event sequences, transactions per turn, restore, state offsets.
GENERIC_KAFKA_TESTS := tests/integration/test_kafka_sequences.py \
  tests/integration/test_kafka_transactions.py tests/integration/test_restore_kafka.py \
  tests/integration/test_state_offsets.py

test-generic:  ## the unit lane + the Kafka contract tests with every codec accelerator off (TURNSTREAM_CODEC=generic)
	TURNSTREAM_CODEC=generic $(BIN)/pytest tests/unit $(GENERIC_KAFKA_TESTS)

test-secure:  ## the secured lane (~2 min): its own SASL_SSL + SCRAM + ACL broker on 127.0.0.1:19492; not in `make test`
	$(BIN)/pytest tests/secure -m secure

cluster-up:  ## start (or reuse) the local 3-node KRaft cluster on 127.0.0.1:29192-29194
	$(BIN)/turnstream broker up --nodes 3

cluster-down:  ## stop every node of the local cluster
	$(BIN)/turnstream broker down --nodes 3

cluster-status:
	$(BIN)/turnstream broker status --nodes 3

test-cluster:  ## the cluster lane (~3.5 min): 3 brokers, kill -9 under load; not in `make test`
	$(BIN)/pytest tests/cluster -m cluster -s

demo:  ## the main job: the end-to-end turnstream demo
	(test -x $(BIN)/turnstream || $(MAKE) --no-print-directory install) && $(BIN)/turnstream demo $(DEMO_ARGS)

smoke:  ## Kafka only: broker up, topics apply, one transactional round trip
	$(BIN)/turnstream smoke

bench:  ## every benchmark side by side on the local broker (4-7 min); BENCH_ARGS=--quick for ~1 min
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

.PHONY: test-interop
test-interop:  ## Java + Go readers/writers vs schemas/bundled/ and a real actor run (needs mvn, Go >= 1.26; reuses a running broker)
	PYTHONPATH=services $(BIN)/python -m turnstream.wire.bundle --check --schemas schemas
	@command -v go >/dev/null || { echo "test-interop needs Go >= 1.26 on PATH" >&2; exit 1; }
	mvn -q -B -f examples/java/pom.xml package
	cd examples/go && go build -o bin/ ./cmd/...
	TURNSTREAM_INTEROP=1 $(BIN)/pytest tests/interop

# The peer frameworks get their own venv, never the main one (faust-streaming, the
# analytics extra, pins shared dependencies). `make bench` runs the peer section in
# it once it exists. PEERS_ARGS=--quick for a smoke run; --postgres-temp (or
# PEERS_POSTGRES_DSN=...) adds LangGraph + Postgres.
PEERS_VENV ?= .venv-peers

bench-peers:  ## bench/peers/: the same agent workload on turnstream, LangGraph, OpenAI Agents SDK
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -c "import langgraph, agents" 2>/dev/null || \
	  $(PEERS_VENV)/bin/python -m pip install --quiet -e ".[peers]"
	$(PEERS_VENV)/bin/python bench/peers/peers_bench.py $(PEERS_ARGS)
