# `make run`: install and start the gateway on its embedded Pulsar broker.
# `make test`: install everything the tests need and run them all.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
ARGS   ?=
# test processes (pytest-xdist): most tests wait on a gateway, a broker or a client, so two
# share a 2-core machine well; each test file runs whole in one of them (its fixtures shared)
TEST_JOBS ?= 2

.PHONY: run test unit fuzz stress lint parity-smoke bench bench-migration bench-cluster soak clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[compile]'
	touch $@

# the hot modules gateway/compiled_twins.py names, compiled with mypyc beside their sources
# (docs/compiled.md) again whenever one changes; where that fails (no C compiler or Python
# headers) the gateway runs them interpreted, the same code, slower
COMPILED_SUFFIX := _compiled
COMPILED_SOURCES := pulsar_gateway/storage/kafka/read_batches.py
$(VENV)/.compiled: $(VENV)/.installed $(COMPILED_SOURCES) scripts/compile_modules.py pulsar_gateway/gateway/compiled_twins.py
	$(BIN)/python scripts/compile_modules.py || echo "not compiled: the gateway runs those modules interpreted"
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $@

run: $(VENV)/.installed $(VENV)/.compiled
	@./scripts/install-system-packages clients || echo "kcat and amqp-tools not installed (apt failed); the gateway runs without them"
	$(BIN)/pulsar-gateway run $(ARGS)

test: $(VENV)/.installed-test $(VENV)/.compiled
	./scripts/install-system-packages
	$(MAKE) lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile $(ARGS)

# the unit suite alone (no broker, no clients), spread over every core by pytest-xdist:
# most of its time is hypothesis generating examples, which one core cannot hurry
unit: $(VENV)/.installed-test $(VENV)/.compiled
	$(BIN)/python -m pytest -q -p no:cacheprovider -n auto tests/unit $(ARGS)

# not part of `make test`: every property test with 50 times CI's examples (hypothesis'
# "deep" profile, harness/hypothesis_budget.py), to find the rare decoder bug before a random
# CI run does; tens of minutes over every core. ARGS=tests/unit/test_x.py for one module,
# FUZZ_SCALE=10 for 10 times CI's examples instead.
FUZZ_TESTS ?= tests/unit
FUZZ_SCALE ?= 50
fuzz: $(VENV)/.installed-test $(VENV)/.compiled
	HYPOTHESIS_PROFILE=deep FUZZ_SCALE=$(FUZZ_SCALE) $(BIN)/python -m pytest -q -p no:cacheprovider -n auto -m hypothesis --timeout 3600 \
		$(or $(ARGS),$(FUZZ_TESTS))

# style, the layers of docs/architecture.md (pyproject's [tool.importlinter]) and types
lint: $(VENV)/.installed-test
	$(BIN)/ruff check pulsar_gateway harness tests bench
	$(BIN)/ruff format --check pulsar_gateway harness tests bench
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy

# `.[parity]` alone in a fresh venv of its own, then the README's migrate and parity commands
# in it, a faithful copy passing and a damaged one failing (scripts/parity_smoke.py); an
# extra must work installed alone, not only beside the test extra. About 5 minutes.
PARITY_VENV ?= .venv-parity
parity-smoke:
	rm -rf $(PARITY_VENV)
	$(PYTHON) -m venv $(PARITY_VENV)
	$(PARITY_VENV)/bin/pip install -q --upgrade pip
	$(PARITY_VENV)/bin/pip install -q -e '.[parity]'
	$(PARITY_VENV)/bin/python scripts/parity_smoke.py

# the tests where races would show (ordering, counts, offsets, transactions, real clients),
# with a busy process per core beside them for the whole run: races hide on an idle machine
STRESS_TESTS = tests/differential tests/integration/test_produce_order.py \
	tests/integration/test_whole_batch_fetch.py tests/integration/test_offsets.py \
	tests/integration/test_kafka_transactions.py tests/integration/test_idempotent_producer.py \
	tests/integration/test_kafka_clients.py tests/integration/test_amqp_pika.py
stress: $(VENV)/.installed-test $(VENV)/.compiled
	./scripts/install-system-packages
	$(BIN)/python -m pytest -q -p no:cacheprovider --cpu-hogs $$(nproc) $(STRESS_TESTS) $(ARGS)

$(VENV)/.installed-bench: $(VENV)/.installed-test pyproject.toml
	$(BIN)/pip install -q -e '.[test,bench]'
	touch $@

# every comparison in one go (about 10 minutes): ratio tables, reports/bench/bench.{json,html}
# (one self-contained page with charts and flame graphs); ARGS="--quick" for a smoke run
bench: $(VENV)/.installed-bench $(VENV)/.compiled
	$(BIN)/python -m bench.suite $(ARGS)

# about 15 minutes: Kafka through 1, 2 and auto workers beside the single process, and
# kill -9 of a worker to the first stored produce (issue 12); reports/cluster-scaling.*
bench-cluster: $(VENV)/.installed-bench $(VENV)/.compiled
	$(BIN)/python -m bench.cluster_scaling $(ARGS)

# about half an hour: migrate and parity at 1M and 10M records
bench-migration: $(VENV)/.installed-test $(VENV)/.compiled
	$(BIN)/python -m bench.migration_parity $(ARGS)

# about 20 minutes, not part of `make test`: mixed Kafka and AMQP load while the embedded
# broker is killed and frozen and hostile clients misbehave (issue 10); exit 1 on failure;
# reports/soak/soak.{json,html}. ARGS="--minutes 2 --seed N" for a short or repeated run.
soak: $(VENV)/.installed-test $(VENV)/.compiled
	$(BIN)/python -m bench.soak $(ARGS)

clean:
	rm -rf $(VENV) $(PARITY_VENV) data
	find pulsar_gateway -name '*$(COMPILED_SUFFIX)*.so' -delete
