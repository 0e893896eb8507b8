# Two commands matter: `make demo` and `make test`. Both build .venv when it is missing or
# older than pyproject.toml / constraints.txt, with the pinned versions from constraints.txt.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest install-check fuzz bench soak demo lock clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,all]'
	# The import names for mypy (mypy.ini says why): .venv/src/cordstream/{domain,shell}.
	mkdir -p $(VENV)/src/cordstream
	ln -sfn ../../../domain $(VENV)/src/cordstream/domain
	ln -sfn ../../../shell $(VENV)/src/cordstream/shell
	touch $(STAMP)

test: lint typecheck pytest install-check

lint: $(STAMP)
	$(BIN)/ruff check domain shell tests bench examples
	$(BIN)/ruff format --check domain shell tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict

pytest: $(STAMP)
	$(BIN)/pytest

# The install a user does: build the wheel (with the declared setuptools floor, and as pip
# does), install it into a fresh venv apart from the repo, import, run, type-check a bot, and
# do it again beside a bot with its own `domain` and `shell` modules (tests/install/check.py).
install-check: $(STAMP)
	$(BIN)/python -m tests.install.check

# The property tests with 10x the examples (about 20 minutes on 2 cores).
fuzz: $(STAMP)
	CORDSTREAM_FUZZ_SCALE=$${CORDSTREAM_FUZZ_SCALE:-10} $(BIN)/pytest -q tests/test_machine_properties.py tests/test_segments_properties.py tests/test_totality.py

bench: $(STAMP)
	$(BIN)/python -m bench

# 5,000 randomized streams under faults through the real shell and the emulator (ARGS=...
# passes options, e.g. ARGS="--streams 20000 --seed 3"); a short soak runs inside `make test`.
soak: $(STAMP)
	$(BIN)/python -m bench.soak $(ARGS)

demo: $(STAMP)
	$(BIN)/cordstream demo $(ARGS)

lock: $(STAMP)
	{ echo '# Exact versions `make` installs (pip -c). Regenerate with `make lock` after changing pyproject.toml.'; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed '/^-e /d'; } > constraints.txt

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
