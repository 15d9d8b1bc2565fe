# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-full plan bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fibril-mjx run manifests/ahrs_turntable.yaml --worlds 256 --seed 0 --duration 10 --out out/demo --overwrite

plan: $(STAMP)
	$(VENV)/bin/fibril-mjx plan manifests/ahrs_turntable.yaml

test: $(STAMP)
	$(PY) tools/run_tests.py

# also the long negative controls (tests marked `full`, e.g. one validate run per perturbation)
test-full: $(STAMP)
	FIBRIL_MJX_TEST_FULL=1 $(PY) tools/run_tests.py

bench: $(STAMP)
	$(PY) bench/overhead.py

clean:
	rm -rf out .pytest_cache
