# The course's commands. Everything runs from .venv, created on first use.
VENV   := .venv
PYTHON := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-requirements
# How `make install` gets torch (see docs/install.md): TORCH=cpu takes the CPU build, from
# PyTorch's CPU wheel index on Linux; TORCH=cuda takes the package index's build (CUDA on Linux).
# WHEELS=folder installs from a folder made by `make wheelhouse`, with no network at all.
TORCH           ?= cpu
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
WHEELS          ?=
# `make wheelhouse`: the folder, and optionally a laptop platform other than this one
# (linux-x86_64, linux-aarch64, macos-arm64) and its Python version.
WHEELHOUSE      ?= wheelhouse
PLATFORM        ?=
PYTHON_VERSION  ?=
INSTALL := $(PYTHON) scripts/install.py --cpu-index $(TORCH_CPU_INDEX)
# Workers (pytest-xdist) per test target, each with its own session stack; 0 runs in one
# process. `make test` takes four on two cores: much of it waits (on stacks started, killed
# or hung on purpose, on sandbox timeouts), and four overlap those waits (on an idle two-core
# machine on 2026-12-04, 239 s against 334 s with two; CI, which runs it beside the rehearsal,
# passes TEST_WORKERS=2, see .ci/run). The notebook targets take two: their kernels train
# and sample, so two already use both cores. The one worker `make test` lost (a CPython
# 3.11.7 "AST constructor recursion depth mismatch" INTERNALERROR) is guarded in
# tests/ast_guard_support.py.
# --dist loadfile: one worker runs a whole file, so a module's fixtures are set up once and a
# notebook's nbval cells run in order in one kernel; the longest files go out first (conftest.py).
TEST_WORKERS          ?= 4
NOTEBOOK_TEST_WORKERS ?= 2
PYTEST = $(PYTHON) -m pytest -n $(1) --dist loadfile
export PYTHONPATH := $(CURDIR)
export NO_PROXY := 127.0.0.1,localhost
export no_proxy := 127.0.0.1,localhost
# Python may cache compiled modules (__pycache__/, ignored by git) even where the environment
# says not to: every pytest worker, stack and kernel otherwise compiles the course's modules
# and rewrites the tests' asserts again (collecting `make test`'s tests took 14 s of CPU per
# process without the cache, 11 s with it).
export PYTHONDONTWRITEBYTECODE :=

.PHONY: run sweep test test-notebooks test-long mutants rehearse-cloud lab bench lint install docs helpers solutions wheelhouse doctor stop clean clean-notebooks

# Refuse an older Python in one sentence, before a .venv is created with it. (doctor, stop
# and clean still run, so doctor can say what else to fix.)
ifeq ($(wildcard $(PYTHON)),)
ifneq ($(filter-out doctor stop clean,$(or $(MAKECMDGOALS),install)),)
ifneq ($(shell python3 -c 'import sys; print(sys.version_info >= (3, 11))' 2>/dev/null),True)
$(error The course needs Python 3.11 or newer as python3, but python3 here is $(or $(shell python3 --version 2>/dev/null),missing); install 3.11+ (make doctor says how) and run make again)
endif
endif
endif

## make install: .venv with the pinned packages and the course itself (editable)
install: $(STAMP)

$(PYTHON):
	python3 -m venv $(VENV)

$(STAMP): requirements.txt pyproject.toml scripts/install.py scripts/install_system_packages.sh | $(PYTHON)
	scripts/install_system_packages.sh
	$(INSTALL) install --torch $(TORCH) $(if $(WHEELS),--wheels $(WHEELS))
	touch $@

## make wheelhouse: every wheel `make install WHEELS=$(WHEELHOUSE)` needs, for offline installs
wheelhouse: | $(PYTHON)
	$(INSTALL) wheelhouse $(WHEELHOUSE) --torch $(TORCH) $(if $(PLATFORM),--platform $(PLATFORM)) $(if $(PYTHON_VERSION),--python-version $(PYTHON_VERSION))

## make run: execute every notebook on the local backend into runs/<timestamp>/
run: $(STAMP)
	$(PYTHON) scripts/run_notebooks.py

## make sweep: run notebook 04 once per combination of a grid, each run in runs/<name>/;
## the grid is sweeps/default.toml, and e.g. SWEEP="-p seed 0 1 2 --name seeds3" changes it
sweep: $(STAMP)
	$(PYTHON) -m sweeps.runner $(SWEEP)

## make test: the tests that run no notebook: tests/stack, tests/course and tests/repo (the
## `notebooks` and `long` markers are set by folder, in conftest.py)
test: $(STAMP)
	$(call PYTEST,$(TEST_WORKERS)) tests -m "not notebooks and not long" --durations=15

## make test-notebooks: tests/notebooks (each notebook run small, and its scenarios) and the
## core notebooks, 01 to 09, with their defaults under nbval (the optional 10's defaults run is
## tests/long's loophole study; here it runs solved and small, and `make rehearse-cloud` runs it)
test-notebooks: $(STAMP)
	$(call PYTEST,$(NOTEBOOK_TEST_WORKERS)) tests --nbval-lax notebooks -m notebooks --durations=15 \
		--ignore=notebooks/10_reward_hacking.ipynb

## make test-long: tests/long, every "Try this" exercise that runs a notebook at the settings
## its text states, the loophole study (notebook 10 at its defaults) and a sweep killed and run
## again (about half an hour; not in CI, run it before a workshop and after changing a
## notebook's exercises)
test-long: $(STAMP)
	$(call PYTEST,$(NOTEBOOK_TEST_WORKERS)) tests/long -m long --durations=15

## make mutants: mutation testing (mutmut) of the rules the course and the stack enforce, each
## mutant against the fast tests that reach it; FILES="helpers/runlog.py ..." runs only those
## files (scripts/mutants.py names them). Not in CI; its last result is in tests/README.md
mutants: $(STAMP)
	$(PYTHON) scripts/mutants.py $(FILES)

## make rehearse-cloud: every notebook with backend="cloud" and small parameters, the far end
## answered by the local stack (see scripts/rehearse_cloud.py), into runs/rehearse-cloud-<timestamp>/
rehearse-cloud: $(STAMP)
	$(PYTHON) scripts/rehearse_cloud.py

## make lab: JupyterLab on notebooks/, with the .venv kernel
lab: $(STAMP)
	$(PYTHON) -m jupyter lab --notebook-dir=notebooks

## make bench: speed measurements (ratios, side by side in one run)
bench: $(STAMP)
	@for b in bench/[a-z]*.py; do echo "== $$b"; $(PYTHON) -m bench.$$(basename $$b .py) || exit 1; done

## make docs: rewrite the parameters cells, check calls and parameter tables from
## helpers/notebook_parameters.py, where each parameter is declared once
docs: $(STAMP)
	$(PYTHON) scripts/make_docs.py

## make helpers: rebuild helpers/{scoring,serving,training,pipelined}.py from the notebooks' `# @save` cells
helpers: $(STAMP)
	$(PYTHON) scripts/export_helpers.py

## make solutions: the instructor's copies of the notebooks, each exercise solved, in solutions/
solutions: $(STAMP)
	$(PYTHON) scripts/make_solutions.py

## make lint: ruff on every Python file and notebook, the import contracts (lint-imports) and
## the type checker (mypy); their settings are in pyproject.toml
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

## make doctor: check this machine can run the course; one line per check, with its fix
doctor:
	@$(if $(wildcard $(PYTHON)),$(PYTHON),python3) scripts/doctor.py

## make stop: stop the local stack that every kernel shares (it also stops by itself after
## 30 minutes with no kernel and no request)
stop:
	@if [ -x $(PYTHON) ]; then $(PYTHON) -m local_stack stop; fi

## make clean: stop the local stack, then remove runs/ (executed notebooks, run folders,
## and the stack's checkpoints in runs/local-stack)
clean: stop
	rm -rf runs

## make clean-notebooks: store the notebooks as JupyterLab saves them, without outputs
clean-notebooks: $(STAMP)
	$(PYTHON) scripts/clean_notebooks.py
