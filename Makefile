SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
export DJANGO_SETTINGS_MODULE ?= gpufleet.settings

.PHONY: setup database demo test lint bench

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

setup: $(VENV)/.installed

database: setup
	$(PY) manage.py ensure_database
	$(PY) manage.py migrate --no-input

demo: database
	$(PY) manage.py seed_fleet --topology default
	$(PY) manage.py ensure_operator
	$(PY) manage.py runserver 127.0.0.1:8000

test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: setup
	@for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
