# The course's commands. Everything runs from .venv, created on first use.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-requirements
export PYTHONPATH := $(CURDIR)
export NO_PROXY := 127.0.0.1,localhost
export no_proxy := 127.0.0.1,localhost

.PHONY: run test lab bench lint install helpers

install: $(STAMP)

$(STAMP): requirements.txt scripts/install_system_packages.sh
	scripts/install_system_packages.sh
	test -x $(PYTHON) || python3 -m venv $(VENV)
	$(PYTHON) -m pip install --quiet --upgrade pip
	$(PYTHON) -m pip install --quiet -r requirements.txt
	touch $@

## make run: execute every notebook on the local backend into runs/<timestamp>/
run: $(STAMP)
	$(PYTHON) scripts/run_notebooks.py

## make test: the whole test suite (what CI runs): tests/, then every notebook under nbval
test: $(STAMP)
	$(PYTHON) -m pytest tests --nbval-lax notebooks

## make lab: JupyterLab on notebooks/, with the .venv kernel
lab: $(STAMP)
	$(PYTHON) -m jupyter lab --notebook-dir=notebooks

## make bench: speed measurements (ratios, side by side in one run)
bench: $(STAMP)
	@for b in bench/[a-z]*.py; do echo "== $$b"; $(PYTHON) -m bench.$$(basename $$b .py) || exit 1; done

## make helpers: rebuild helpers/{scoring,serving,training,pipelined}.py from the notebooks' `# @save` cells
helpers: $(STAMP)
	$(PYTHON) scripts/export_helpers.py

lint: $(STAMP)
	$(VENV)/bin/ruff check helpers local_stack tests bench scripts notebooks
	$(VENV)/bin/ruff format --check helpers local_stack tests bench scripts notebooks
