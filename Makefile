# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# CPU build of torch for the test environment; the GPU machine brings its own.
TORCH_SPEC ?= torch==2.13.0
# The package's extras a venv gets: the test tools, and scikit-learn for the examples' data (a variable:
# a comma written inside a $(call ...) would split its arguments).
EXTRAS := test,examples

.PHONY: venv lint test test-faults test-gpu demo bench clean

# Each long step says what it does and how long it took (a fresh set-up takes minutes).
STEP = @t0=$$(date +%s); echo "==> $(1)"; $(2) && echo "    done in $$(( $$(date +%s) - t0 )) s"

$(VENV)/.installed: pyproject.toml
	$(call STEP,creating $(VENV) with $(PYTHON),test -x $(PY) || $(PYTHON) -m venv $(VENV))
	$(call STEP,upgrading pip,$(PY) -m pip install --quiet --upgrade pip)
	$(call STEP,installing $(TORCH_SPEC) (CPU build: the longest step),$(PY) -m pip install --progress-bar on "$(TORCH_SPEC)")
	$(call STEP,installing actorwire with its test tools and scikit-learn for the examples into $(VENV),$(PY) -m pip install --quiet -e ".[$(EXTRAS)]")
	@touch $@
	@echo "==> ready: $(VENV)/bin/actorwire (or source $(VENV)/bin/activate)"

venv: $(VENV)/.installed

# ruff (a small rule set, in pyproject.toml) and mypy against a baseline that may only shrink.
lint: venv
	$(VENV)/bin/ruff check actors transport messages tests examples
	$(PY) .ci/typecheck.py

test: lint
	$(PY) -m pytest -m "not gpu and not multigpu and not faults" $(PYTEST_ARGS)

test-faults: venv
	$(PY) -m pytest -m faults tests/faults $(PYTEST_ARGS)

test-gpu: venv
	$(PY) -m pytest -m "gpu or multigpu" $(PYTEST_ARGS)

demo: venv
	$(VENV)/bin/actorwire demo

bench: venv
	$(VENV)/bin/actorwire bench codec

clean:
	rm -rf $(VENV) build dist *.egg-info
