SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Compiled modules (and pytest's rewritten tests) are kept between runs: every test process, and
# every bmcsim, agent and CLI process the tests start, would otherwise compile them all again.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: prerequisites setup database demo test check lint bench soak

# The Debian packages (installed when missing, as root), then PostgreSQL and Redis running.
prerequisites:
	@bin/install-prerequisites

# The virtualenv, with the running system's pins and the tests' (requirements-dev.txt).
$(VENV)/.installed: requirements.txt requirements-dev.txt client/pyproject.toml client/requirements.txt | prerequisites
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet pip==26.3
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The tests' OpenID provider (tests/support/oidc_provider, on Node): its packages, from its lock file.
OIDC_PROVIDER := tests/support/oidc_provider
$(OIDC_PROVIDER)/node_modules/.package-lock.json: $(OIDC_PROVIDER)/package.json $(OIDC_PROVIDER)/package-lock.json | prerequisites
	npm ci --prefix $(OIDC_PROVIDER) --no-audit --no-fund

setup: prerequisites $(VENV)/.installed $(OIDC_PROVIDER)/node_modules/.package-lock.json

database: setup
	$(PY) manage.py ensure_database
	$(PY) manage.py migrate --no-input
	$(PY) manage.py grant_public_role && mkdir -p var && $(PY) manage.py export_signing_keys var/public-jwks.json
	$(PY) manage.py collectstatic --no-input -v0

# The whole system on this machine: bmcsim's fleet enrolled, then every Procfile process.
demo: database
	mkdir -p var
	$(PY) manage.py ensure_metrics_ca var/metrics-ca
	@echo "== starting bmcsim once to enrol its fleet, trust its vendors, list its images and set the firmware baseline to its newest releases (its state persists in var/bmcsim)"
	$(PY) -m bmcsim > var/bmcsim-seed.log 2>&1 & pid=$$!; \
	  $(PY) manage.py seed_fleet --wait 60 \
	  && $(PY) manage.py import_trust_anchors http://127.0.0.1:8100/bmcsim/v1/roots \
	  && $(PY) manage.py import_reference_values http://127.0.0.1:8100/bmcsim/v1/reference-values \
	  && $(PY) manage.py import_gpu_rims http://127.0.0.1:8100/bmcsim/v1/gpu-rims \
	  && $(PY) manage.py import_images http://127.0.0.1:8100/bmcsim/v1/images \
	  && $(PY) manage.py set_firmware_baseline deploy/firmware-baseline.json \
	       --releases http://127.0.0.1:8100/bmcsim/v1/firmware-releases \
	  && $(PY) manage.py add_address_pool p1 127.100.1.0/24 --ssh-port 2222 \
	  && $(PY) manage.py add_address_pool p2 127.100.2.0/24 --ssh-port 2222; \
	  status=$$?; kill $$pid; wait $$pid; exit $$status
	$(PY) manage.py ensure_operator
	umask 077 && DJANGO_SETTINGS_MODULE=gpufleet.settings $(PY) -c 'from django.conf import settings; print(settings.GPUFLEET_WEBHOOK_TOKEN)' > var/webhook-token
	umask 077 && DJANGO_SETTINGS_MODULE=gpufleet.settings $(PY) -c 'from django.conf import settings; print(settings.GPUFLEET_PROMETHEUS_TOKEN)' > var/prometheus-token
	$(PY) manage.py create_tenant acme | tail -n 1 > var/acme.token
	@echo "== gpu-fleet: http://127.0.0.1:8000/admin/ (admin/admin), http://127.0.0.1:8000/healthz"
	@echo "== bmcsim http://127.0.0.1:8100, Prometheus http://127.0.0.1:9090, Alertmanager http://127.0.0.1:9093"
	@echo "== tenant acme's API token: $$(cat var/acme.token)   (Ctrl-C stops everything)"
	SIM_TIME_SCALE=$${SIM_TIME_SCALE:-1} $(VENV)/bin/honcho start

# The layers first (.importlinter: every contract kept) and the types (mypy.ini: no error), or no
# test runs; then every test, in two processes (the machines have 2 cores) that take each other's
# work at the end. An end-to-end test starts a whole control plane of its own and mostly waits on
# it, so the other process goes on meanwhile: 9 minutes for all, where the end-to-end tests one
# at a time after the rest took 15.
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/pytest -n 2 --dist worksteal --durations=25

# The inner loop: ruff, the layers, the types, and every test of none of the slow kinds that pytest.ini
# declares (end-to-end, browser, validators, fuzzing, scale, timing, soak), each property test on a tenth of
# its examples (tests/support/examples.py); `make test` runs the slow kinds too, and every example.
SLOW_KINDS := e2e or browser or validators or fuzzing or scale or timing or soak
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	GPUFLEET_TEST_EXAMPLES_PERCENT=10 $(VENV)/bin/pytest -n 2 --dist worksteal -m "not ($(SLOW_KINDS))"

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff format --check .

# Every benchmark, each a module that prints its table (python -m bench.NAME runs one); a module
# whose name starts with _ is what they share, no bench. tests/test_benches.py runs each at a tiny size.
BENCHES := $(filter-out _%,$(basename $(notdir $(wildcard bench/*.py))))
bench: setup
	@for b in $(BENCHES); do echo "== bench.$$b"; $(PY) -m bench.$$b || exit 1; done

# The whole stack under churn, faults and process kills, then check_invariants (tests/soak.py).
DURATION ?= 600
soak: setup
	$(PY) -m tests.soak --duration $(DURATION)
