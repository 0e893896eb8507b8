# Two commands matter: `make demo` and `make test`. Both build .venv when it is missing or
# older than pyproject.toml / constraints.txt, with the pinned versions from constraints.txt.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest install-check fuzz mutate bench soak demo lock clean redis-server

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev,all]'
	# The import names for mypy (mypy.ini says why): .venv/src/cordstream/{domain,shell}, and
	# the top-level package's own files.
	mkdir -p $(VENV)/src/cordstream
	ln -sfn ../../../domain $(VENV)/src/cordstream/domain
	ln -sfn ../../../shell $(VENV)/src/cordstream/shell
	ln -sfn ../../../cordstream/__init__.py ../../../cordstream/__main__.py $(VENV)/src/cordstream/
	touch $(STAMP)

test: lint typecheck pytest install-check

lint: $(STAMP)
	$(BIN)/ruff check cordstream domain shell tests bench examples
	$(BIN)/ruff format --check cordstream domain shell tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict

pytest: $(STAMP) redis-server
	$(BIN)/pytest

# The shared stop registry's tests (SPEC N) run a real redis-server on 127.0.0.1: Debian's
# package, installed here when the machine has none (as root, or through sudo).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
redis-server:
	@command -v redis-server >/dev/null || { \
	  echo "installing Debian's redis-server for the tests of SPEC N"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null \
	  || { $(SUDO) apt-get update -q >/dev/null \
	       && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >/dev/null; }; }

# The install a user does: build the wheel (with the declared setuptools floor, and as pip
# does), install it into a fresh venv apart from the repo, import, run, type-check a bot, and
# do it again beside a bot with its own `domain` and `shell` modules (tests/install/check.py).
install-check: $(STAMP)
	$(BIN)/python -m tests.install.check

# The property tests with 10x the examples (about 20 minutes on 2 cores).
fuzz: $(STAMP)
	CORDSTREAM_FUZZ_SCALE=$${CORDSTREAM_FUZZ_SCALE:-10} $(BIN)/pytest -q tests/domain/test_machine_properties.py tests/domain/test_segments_properties.py tests/domain/test_totality.py

# Mutation testing of domain/ (tests/mutation/run.py says how): mutmut on a seeded sample of
# N mutants (default 60; SEED= draws another), with Hypothesis's example database off. Prints
# the score, the outcomes, the time and each surviving mutant's diff; exits 1 below MIN percent
# (default 95). Slow (about 15 minutes for 60 mutants on 2 cores), so not part of `make test`.
mutate: $(STAMP)
	$(BIN)/python -m tests.mutation.run --sample $(or $(N),60) --seed $(or $(SEED),0) \
	  --min $(or $(MIN),95) --max-children $(or $(JOBS),2)

bench: $(STAMP) redis-server
	$(BIN)/python -m bench

# The soak (tests/soak/ says how): 5,000 randomized streams under faults through the real
# shell, discord.py and the emulator, 8 at once; 1,000 more under Discord's real rate limits,
# 250 at once; then 1,000 concurrent 3-line answers at the 50/s global limit, each of which
# must arrive whole; then 500 into slash commands' interactions through a bot on the
# emulator's gateway, 20 at once. Faults include hanging provider cleanups, providers that
# swallow or convert cordstream's cancellation, callers that cancel (also during a global 429
# wait) or time out, and stops racing follow-ups. ARGS=... passes options, e.g.
# ARGS="--streams 20000 --seed 3"; a short soak runs inside `make test`.
soak: $(STAMP)
	$(BIN)/python -m tests.soak $(ARGS)

# ARGS=--cluster: the bot of several processes (examples/cluster), with a real redis-server.
CLUSTER := $(filter --cluster,$(ARGS))
demo: $(STAMP) $(if $(CLUSTER),redis-server)
	$(if $(CLUSTER),$(BIN)/python -m examples.cluster $(filter-out --cluster,$(ARGS)),$(BIN)/cordstream demo $(ARGS))

lock: $(STAMP)
	{ echo '# Exact versions `make` installs (pip -c). Regenerate with `make lock` after changing pyproject.toml.'; \
	  $(BIN)/python -m pip freeze --exclude-editable | sed '/^-e /d'; } > constraints.txt

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis .mutate
