# Strom — developer entry points. `make run` and `make test` are all a newcomer needs.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: install native zookeeper run broker test test-fast test-spark test-cluster lint typecheck bench clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev,spark]'
	touch $@

install: $(VENV)/.installed zookeeper native

## The C kernels of the Spark source and sink (strom/native/*.c), built once per source version;
## without a C compiler Strom falls back to pure Python.
native: $(VENV)/.installed
	@$(PY) -m strom.native >/dev/null

## Debian's ZooKeeper package (cluster tests, `strom cluster up`); installed only when missing.
zookeeper:
	@if [ -f /usr/share/java/zookeeper.jar ] || dpkg -s zookeeper >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ]; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper; \
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then \
		sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q zookeeper; \
	else \
		echo "hint: ZooKeeper is not installed; cluster tests need it: sudo apt-get install zookeeper"; \
	fi

## Single-node broker on 127.0.0.1:9092 (data in ./data), the demo pipeline and the web console on
## http://127.0.0.1:8080 (its URL is printed).
run: install
	$(PY) -m strom.cli.main demo

## The broker alone.
broker: install
	$(PY) -m strom.cli.main server start config/server.properties

## Tests run on TEST_WORKERS pytest-xdist workers (0: in one process); each test module stays on one
## worker, in order, so module-scoped brokers and clusters start once (docs/decisions/0030-fast-tests.md);
## modules start longest first, in the order tests/conftest.py gives them (docs/decisions/0051-test-order.md).
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## Every test (what CI runs), after the type check.
test: install typecheck
	$(PYTEST)

## Unit tests and single-broker integration tests: no cluster, no Spark, no browser, nothing marked slow.
test-fast: install
	$(PYTEST) -m "not slow and not cluster and not spark and not browser"

## ZooKeeper + several brokers: replication, fail-over, `strom cluster up`.
test-cluster: install
	$(PYTEST) -m cluster

test-spark: install
	$(PYTEST) -m spark

lint: install
	$(VENV)/bin/ruff check src tests bench pipelines

## mypy over the server packages (configured in pyproject.toml).
typecheck: install
	$(PY) -m mypy

bench: install
	$(PY) bench/bench_broker.py

clean:
	rm -rf data demo-output cluster-data
