# spark-ivm: `make demo` runs the quickstart, `make test` runs every test. Both start from
# `make install`, which is idempotent: .venv/ at the root, the sbt launcher, the jar, an
# editable install of the Python package with its dev dependencies, and the Maven packages the
# jar needs at run time, and the driver JVM's class-data archive.
VENV      := .venv
PY        := $(VENV)/bin/python
PIP       := $(VENV)/bin/pip
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
JAR_NAME  := spark-ivm_2.13-$(VERSION).jar
JAR       := python/spark_ivm/jars/$(JAR_NAME)
SCALA_SRC := $(shell find scala -type f 2>/dev/null)
STAMP     := $(VENV)/.installed
PACKAGES  := $(VENV)/.packages
CLASS_DATA := $(VENV)/.class-data

.PHONY: install jar demo docs test lint lint-python fmt test-scala test-python test-cluster bench bench-fk bench-triangles \
	bench-auto bench-lag bench-lookups bench-reads bench-compile-cache bench-first-refresh compat-tpcds \
	compat-pg-ivm compat-fuzz clean

install: $(STAMP) $(JAR) $(PACKAGES) $(CLASS_DATA)

$(VENV)/bin/python:
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

# The jar first (order only): the package's build would otherwise build it, with pip's output hidden.
$(STAMP): $(VENV)/bin/python pyproject.toml | $(JAR)
	$(PIP) install --quiet -e '.[dev]'
	touch $(STAMP)

jar: $(JAR)

$(JAR): $(SCALA_SRC) build.sbt project/build.properties pyproject.toml
	build/sbt assembly
	mkdir -p python/spark_ivm/jars
	rm -f python/spark_ivm/jars/spark-ivm_2.13-*.jar
	cp target/scala-2.13/$(JAR_NAME) $(JAR)

# The Maven packages the jar and Delta need at run time, fetched once into Spark's Ivy cache:
# test suites that start their sessions side by side on a cold cache would race to fetch them.
# Spark prints Ivy's whole resolution report: kept in a log, shown if the fetch fails.
$(PACKAGES): $(STAMP) $(JAR)
	@echo "fetching the Maven packages the jar needs (log: $(VENV)/fetch-packages.log)"
	@$(PY) -c "from spark_ivm.session import fetch_packages; fetch_packages()" > $(VENV)/fetch-packages.log 2>&1 \
		|| (cat $(VENV)/fetch-packages.log; exit 1)
	touch $(PACKAGES)

# The driver JVM's class-data archive (spark_ivm.class_data), written by an application that runs
# what a refresh runs, so that the first application after the install starts from it too.
$(CLASS_DATA): $(PACKAGES)
	@echo "writing the driver's class-data archive (log: $(VENV)/class-data.log)"
	@$(PY) -c "from spark_ivm.class_data import build; print(build())" > $(VENV)/class-data.log 2>&1 \
		|| (cat $(VENV)/class-data.log; exit 1)
	touch $(CLASS_DATA)

demo: install
	$(PY) examples/quickstart.py

# docs/sql.md's tables of settings and errors, generated from their registries (IvmConf, the
# error conditions' JSON).
docs: install
	IVM_UPDATE_DOCS=1 build/sbt "testOnly io.sparkivm.conf.IvmConfSuite io.sparkivm.errors.IvmErrorsSuite"

# The three suites share nothing (each its own JVMs and warehouse), so they run side by side;
# each one's output is printed whole when it ends. The Python suite is the longest; the other
# two run at a lower CPU priority (BG) and take the cores it leaves idle (Linux's idle class
# instead gave the Python suite no measurable time back: 22.8 against 23.2 minutes). The Scala
# suite needs the build alone: on a fresh clone it starts once the jar is built, beside the
# rest of the install.
test:
	$(MAKE) -j3 --output-sync=target test-python test-scala test-cluster BG='nice -n 15'

lint: lint-python
	build/sbt $(SCALA_LINT)

lint-python: install
	$(VENV)/bin/ruff check python tests examples benchmarks build_support
	$(VENV)/bin/mypy python/spark_ivm

# The Scala sources' layout (.scalafmt.conf); test-scala checks it in the same sbt run.
SCALA_LINT = scalafmtCheckAll scalafmtSbtCheck

fmt: install
	$(VENV)/bin/ruff check --select I --fix python tests examples benchmarks build_support
	build/sbt scalafmtAll scalafmtSbt

test-scala: $(JAR)
	$(BG) build/sbt $(SCALA_LINT) test

test-python: install lint-python
	$(VENV)/bin/pytest -q --durations=15 tests/python

test-cluster: install
	$(BG) $(VENV)/bin/pytest -q tests/cluster

# Other projects' queries as differential checks, outside make test (20-30 minutes each):
# TPC-DS's 99 (data and queries from DuckDB's TPC-DS extension) and pg_ivm's regression queries.
compat-tpcds: install
	$(PIP) install --quiet -e '.[dev,compat]'
	$(PY) tests/compat/tpcds_queries.py

compat-pg-ivm: install
	$(PY) tests/compat/pg_ivm_queries.py

# Random queries over random changes, three schemas, tables laid out as loaders write them
# (about 10 minutes each; FUZZ_ROUNDS).
FUZZ_ROUNDS ?= 5
compat-fuzz: install
	$(PY) tests/compat/fuzz_queries.py --rounds $(FUZZ_ROUNDS)
	$(PY) tests/compat/fuzz_queries.py --rounds $(FUZZ_ROUNDS) --schema star
	$(PY) tests/compat/fuzz_queries.py --rounds $(FUZZ_ROUNDS) --schema star-rely

bench: install
	$(PY) benchmarks/run.py q10 --sf 1 --rounds 3

# FK-pruned views against recomputation: 0.1% of the orders in and out at SF 1 (with the generic
# rule side by side), then a fixed 1,500 orders in and out as the data grows.
bench-fk: install
	$(PY) benchmarks/fk.py --sf 1 --rounds 2 --rely --views q10,q3,snowflake --modes generic,fk --out fk
	$(PY) benchmarks/fk.py --sf 1 --sf 3 --sf 10 --rounds 2 --rely --orders 1500 \
		--views q10,q3,snowflake --modes fk --out fk_scale

bench-triangles: install
	$(PY) benchmarks/triangles.py --edges 10000 --edges 100000 --edges 1000000 \
		--batch 100 --batch 1000 --rounds 1 --sweep 0.25,0.75 --sweep-max-edges 100000

# REFRESH POLICY AUTO against INCREMENTAL and FULL as the change grows from 0.01% to 50% of
# the orders (TPC-H Q10, SF 0.1); lag of a rate-limited TRIGGER ON UPDATE under a commit a second.
bench-auto: install
	$(PY) benchmarks/auto.py --sf 0.1 --out auto_sf01

# The quickstart's views with Spark's cache of compiled classes at 100 (Spark's default) and 2,000.
bench-compile-cache: install
	$(PY) benchmarks/compile_cache.py --rounds 6 --runs 2

# The first refreshes of an application, small refreshes' code interpreted against generated.
bench-first-refresh: install
	$(PY) benchmarks/first_refresh.py --rounds 3 --runs 2

# Reads right after a refresh: Delta's scan planning against the file lists the refresh left held.
bench-reads: install
	$(PY) benchmarks/reads.py --sf 0.01 --sf 0.1 --rounds 3

bench-lookups: install
	$(PY) benchmarks/lookups.py --sf 0.01 --sf 0.1 --sf 1 --requests 10 --updates 4

bench-lag: install
	$(PY) benchmarks/lag.py --minutes 10

clean:
	rm -rf target project/target project/project $(VENV) python/spark_ivm/jars/*.jar
