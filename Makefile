# Everything a fresh machine needs: `make demo` (the main job) and `make test` (the checks).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench docs clean

$(STAMP): pyproject.toml .ci/install-postgres.sh .ci/install-chromium.sh .ci/install-azurite.sh .ci/install-ffmpeg.sh
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev,spark]"
	bash .ci/install-postgres.sh
	bash .ci/install-chromium.sh
	bash .ci/install-ffmpeg.sh
	bash .ci/install-azurite.sh
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/conch demo --warehouse demo-warehouse

lint: $(STAMP)
	$(BIN)/ruff format --check src tests bench
	$(BIN)/ruff check src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider -n 2 --dist loadgroup

test: lint typecheck unit

bench: $(STAMP)
	$(BIN)/pip install -q -e ".[bench]"
	$(BIN)/python -m bench

docs: $(STAMP)
	$(BIN)/pdoc -o docs/api conch conch.expr.syntax conch.api.delete_where conch.model.progress conch.apps.previews conch.apps.ui

clean:
	rm -rf $(VENV) docs/api demo-warehouse .pytest_cache .mypy_cache .ruff_cache
