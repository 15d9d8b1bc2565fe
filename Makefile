# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-full plan bench clean docs docs-shots bench-table

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,ray,docs,playground,torch]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fibril-mjx run manifests/ahrs_turntable.yaml --worlds 256 --seed 0 --duration 10 --out out/demo --overwrite

plan: $(STAMP)
	$(VENV)/bin/fibril-mjx plan manifests/ahrs_turntable.yaml

test: $(STAMP)
	$(PY) tools/run_tests.py

# also the tests marked `full` (long statistical runs, e.g. a vibration-validation sweep)
test-full: $(STAMP)
	FIBRIL_MJX_TEST_FULL=1 $(PY) tools/run_tests.py

bench: $(STAMP)
	$(PY) bench/overhead.py

# rewrites the table of current figures in bench/README.md: reruns the fast benches at small
# sizes (tools/bench_table.py --list; full runs go in with --from BENCH=FILE)
bench-table: $(STAMP)
	$(PY) tools/bench_table.py

clean:
	rm -rf out .pytest_cache

# the documentation site (mkdocs.yml) into out/site/, warnings as errors, then every internal
# link of the built HTML checked; reference pages are generated from the code while building
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet
	$(PY) tools/check_docs_links.py out/site

# the home page and one tutorial rendered by headless Chromium (Debian: chromium) to
# out/docs-shots/*.png, to look at the site as a reader does
docs-shots: docs
	$(PY) tools/docs_shots.py --site out/site --out out/docs-shots
