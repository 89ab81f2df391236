# Every target sets itself up: a fresh machine needs nothing but python3 and make.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEMO := demo
BENCH_DIR ?= $(HOME)/.cache/rmq-store-rebuild/bench

.PHONY: setup java jars chromium run test test-quick lint bench clean

setup: $(STAMP) java jars chromium

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $@

# Spark 4 needs Java 17+: install Debian's headless JRE when it is missing or too old.
java:
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then \
		echo "installing openjdk-17-jre-headless (found java: $${v:-none})"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq openjdk-17-jre-headless; \
	fi

# The report test renders report.html in headless Chromium (Debian's, no browser download), with fonts that show
# CJK and emoji message keys. When it cannot be installed the browser tests are skipped, saying why.
chromium:
	@if ! command -v chromium >/dev/null || ! fc-list 2>/dev/null | grep -q "Noto Sans CJK" \
		|| ! fc-list 2>/dev/null | grep -q "Noto Color Emoji"; then \
		echo "installing chromium, fonts-noto-cjk and fonts-noto-color-emoji"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		{ $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq \
			chromium fonts-noto-cjk fonts-noto-color-emoji; } \
		|| echo "could not install chromium: the browser tests (tests/test_report_html.py) will be skipped"; \
	fi

# Delta and S3A jars for spark.jars (jobs/jars.py): fetched once with Maven (Debian's, installed when missing and
# the cache is not complete), checked against conf/jars/jars.lock; offline once cached.
jars: $(STAMP) java
	@$(PY) -m jobs.jars --check >/dev/null || command -v mvn >/dev/null || { \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq maven; }
	$(PY) -m jobs.jars

# The main job end to end on the built-in demo store: generate once, rebuild, audit.
run: setup
	$(VENV)/bin/rmqstore demo --dir $(DEMO)

test: setup
	$(PY) -m pytest -q

# The quick subset: no real brokers, standalone cluster, S3 server or browser.
test-quick: setup
	$(PY) -m pytest -q -m "not broker and not cluster and not s3 and not browser"

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: setup
	$(PY) -m jobs.bench --dir $(BENCH_DIR) $(BENCH_ARGS)

clean:
	rm -rf $(DEMO) .pytest_cache
