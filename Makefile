# Every target sets itself up: a fresh machine needs nothing but python3 and make. Each setup step prints one
# line (what, how long); its whole output goes to build/logs/<step>.log, shown only when the step fails.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEMO := demo
BENCH_DIR ?= $(HOME)/.cache/rmq-store-rebuild/bench
DIST_PYTHON ?= python3
LOGS := build/logs
STEP := bash conf/step.sh
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_GET := $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q

.PHONY: base setup java jars cds chromium run test test-quick test-matrix broker-stores lint bench dist clean

# base: what the jobs need (make run); setup adds the browser the report test renders in (make test)
base: $(STAMP) java jars cds
setup: base chromium

$(STAMP): pyproject.toml
	@$(STEP) $(LOGS)/python.log "Python packages into $(VENV) (pip install -e '.[dev]')" sh -c '\
		{ test -x $(PY) || $(PYTHON) -m venv $(VENV); } \
		&& $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e ".[dev]"'
	@rm -f $(VENV)/.installed-* && touch $@

# Spark 4 needs Java 17+: install Debian's headless JRE when it is missing or too old.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
		$(STEP) $(LOGS)/java.log "Java 17 (apt-get install openjdk-17-jre-headless; found: $${v:-none})" \
			sh -c '$(APT_GET) openjdk-17-jre-headless'; \
	else echo "Java $$v: installed"; fi

# The report test renders report.html in headless Chromium (Debian's, no browser download), with fonts that show
# CJK and emoji message keys. When it cannot be installed the browser tests are skipped, saying why.
chromium:
	@if ! command -v chromium >/dev/null || ! fc-list 2>/dev/null | grep -q "Noto Sans CJK" \
		|| ! fc-list 2>/dev/null | grep -q "Noto Color Emoji"; then \
		$(STEP) $(LOGS)/chromium.log "Chromium and Noto fonts, for the report test (apt-get)" \
			sh -c '$(APT_GET) chromium fonts-noto-cjk fonts-noto-color-emoji' \
		|| echo "could not install chromium: the browser tests (tests/test_report_html.py) will be skipped"; \
	else echo "Chromium and Noto fonts: installed"; fi

# Delta and S3A jars for spark.jars (jobs/runtime/jars.py): fetched once with Maven (Debian's, installed when missing and
# the cache is not complete), checked against conf/jars/jars.lock; offline once cached.
jars: $(STAMP) java
	@$(PY) -m jobs.runtime.jars --check >/dev/null 2>&1 || command -v mvn >/dev/null \
		|| $(STEP) $(LOGS)/maven.log "Maven, to fetch the jars (apt-get install maven)" sh -c '$(APT_GET) maven'
	@$(STEP) $(LOGS)/jars.log "Delta and S3A jars (conf/jars/jars.lock)" $(PY) -m jobs.runtime.jars

# A class-data sharing archive of the local driver JVM (jobs/runtime/cds.py): dumped once per java and pyspark from one small
# rebuild, under ~/.cache/rmq-store-rebuild/cds; sessions of a local master map it when present. Optional: without
# it the driver loads its classes from the jars, as before.
cds: jars
	@$(PY) -m jobs.runtime.cds --check 2>/dev/null || $(STEP) $(LOGS)/cds.log "Class-data archive of the Spark driver (jobs/runtime/cds.py)" \
		$(PY) -m jobs.runtime.cds || echo "no class-data archive: the driver JVM loads its classes from the jars"

# The main job end to end (jobs/demo.py): a broken copy of the demo store audited, recovered, audited clean; then
# the healthy store rebuilt and audited. The demo store is generated once.
run: base
	@$(VENV)/bin/rmqstore demo --dir $(DEMO)

# Three pytest workers (pytest-xdist), each test file on one of them (its module fixtures, e.g. the standalone cluster,
# started once): the suite waits on JVM starts, brokers and subprocesses as much as it computes; on a 2-core machine
# a third file at a time still helped (the suite with the brokers' stores cached: 697 s with 2, 643 s with 3).
# TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# the log ends with the 20 slowest tests, so that the suite's time is seen where it goes
test: setup
	$(PYTEST) -m "not matrix" --durations=20

# Every release line's real-broker store (tests/test_release_matrix.py; a first run writes ~20 stores, 2-4 min each).
test-matrix: base
	$(PYTEST) -m matrix

# The real-broker stores and broker answers the suite reads, checked in (tests/broker/recorded/, MANIFEST.json says
# which release wrote each): the suite runs on the brokers alone (RMQSTORE_RECORDED=off), then what it used is packed
# and what it no longer uses dropped. Run it after changing the workload, the harness settings or a variant.
broker-stores: setup
	rm -f "$${RMQSTORE_CACHE:-$$HOME/.cache/rmq-store-rebuild}/used.txt"
	RMQSTORE_RECORDED=off $(PYTEST) -m "not matrix"
	$(PY) -m tests.broker.recorded

# The quick subset: no real brokers, standalone cluster, S3 server or browser.
test-quick: base
	$(PYTEST) -m "not broker and not cluster and not s3 and not browser"

# ruff; mypy on storelib, udfs and jobs (settings in pyproject.toml); the import contract: no cycle, no upward
# import across the layers (conf/import_contract.py)
lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) conf/import_contract.py

bench: base
	$(PY) -m bench --dir $(BENCH_DIR) $(BENCH_ARGS)

# One package to ship to a cluster (jobs/runtime/dist.py): the wheel, the executors' Python environment packed with venv-pack,
# the jars, and the spark-submit lines for YARN and Kubernetes. DIST_PYTHON: the Python the nodes run (3.11+).
dist: base
	@$(STEP) $(LOGS)/dist.log "dist/: the wheel, rmqstore-env.tar.gz (venv-pack) and jars/" \
		$(PY) -m jobs.runtime.dist --python $(DIST_PYTHON)
	@$(PY) -m jobs.runtime.dist --print-only

clean:
	rm -rf $(DEMO) dist .pytest_cache
