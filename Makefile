# Two entry points: `make demo` and `make test`. Each sets itself up on a fresh machine.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# `make` alone is `make demo`.
.DEFAULT_GOAL := demo

.PHONY: demo test lint typecheck unit fuzz protocol-check protocol bench node-test test-editors vscode-screenshots screenshots clean

# compactd needs Python 3.11 or newer: said before anything is installed. A venv that could not
# be made whole (Debian without python3-venv: no pip in it) is removed, so the next run starts
# over instead of failing on it.
$(BIN)/python:
	@command -v $(PY) >/dev/null || { echo "compactd needs Python 3.11 or newer, and there is" \
		"no $(PY) on PATH: name one, e.g. make $(or $(MAKECMDGOALS),demo) PY=python3.12" >&2; exit 1; }
	@$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || { \
		echo "compactd needs Python 3.11 or newer, and $(PY) is $$($(PY) --version 2>&1):" \
			"name another, e.g. make $(or $(MAKECMDGOALS),demo) PY=python3.12" >&2; exit 1; }
	@$(PY) -m venv $(VENV) || { rm -rf $(VENV); exit 1; }

# Two steps of one venv. `make demo` installs what running compactd needs, and nothing else;
# `make test` adds the development tools (the `dev` extra: pytest, mypy, ruff, ...). pip speaks
# only to report an error (-qq): the demo's output is the demo's. compactd is installed editable,
# with the Python client its build carries (clients/python/compactd_client, see pyproject.toml),
# so the CLI, the tests and examples/agent.py run the checkout's code.
PIP := $(BIN)/python -m pip --quiet --quiet --disable-pip-version-check
RUNTIME := $(VENV)/.runtime

$(RUNTIME): $(BIN)/python pyproject.toml clients/python/pyproject.toml
	@echo "installing compactd and the packages it runs on into $(VENV)" >&2
	@$(PIP) install -e .
	@touch $@

$(STAMP): $(RUNTIME)
	@echo "installing the development tools into $(VENV)" >&2
	@$(PIP) install -e '.[dev]'
	@touch $@

# The demo, then where to go from it (the command by its full path: it is not on PATH).
demo: $(RUNTIME)
	@$(BIN)/compactd demo
	@echo
	@echo "next:"
	@echo "  - where your latest Claude Code session stands: in the folder you run claude in,"
	@echo "      $(abspath $(BIN))/compactd status"
	@echo "  - compactd on your PATH: pipx install .  (or: uv tool install .)"
	@echo "  - the rest (Claude Code, VS Code, the protocol): README.md"

lint: $(STAMP)
	$(BIN)/ruff check compactd tests clients/python examples
	$(BIN)/ruff format --check compactd examples
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy --strict compactd clients/python/compactd_client examples/agent.py

protocol-check: $(STAMP)
	$(BIN)/python -m compactd.protocol_gen --check

protocol: $(STAMP)
	$(BIN)/python -m compactd.protocol_gen

# The suite on every core (pytest-xdist; CI has two): a worker takes the next test when it is
# done, so a slow one does not hold back the others. PYTHONDONTWRITEBYTECODE is cleared for the
# run when the environment sets it: the run starts some 350 Python processes (daemons, CLIs), and
# each would compile compactd's modules again, and every worker would rewrite the asserts of
# every test module again (seconds each), instead of reading the caches the first one wrote.
PYTEST_WORKERS ?= auto
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

unit: $(STAMP)
	$(PYTEST) -q -n $(PYTEST_WORKERS) --dist worksteal

# The fuzz and kill tests in their full form: the counts the default run scales down to stay
# well inside each test's timeout (same checks, about 4x the cases). Minutes, not seconds.
fuzz: $(STAMP)
	FUZZ_EXAMPLES=210 FUZZ_SCHEMA_EXAMPLES=80 FUZZ_MUTATION_EXAMPLES=120 CANCEL_TRIALS=100 \
		KILL_TRIALS=50 $(PYTEST) -q --timeout=900 \
		tests/e2e/test_fuzz.py tests/e2e/test_durability.py

# The TypeScript client package, then the VS Code extension built on it, against the real daemon.
node-test: $(STAMP)
	$(MAKE) -C clients/typescript test PYTHON=$(abspath $(BIN)/python)
	$(MAKE) -C clients/vscode test PYTHON=$(abspath $(BIN)/python)

# The extension in a real VS Code (code-server, driven by Playwright with Debian's chromium) and
# the daemon under Neovim's LSP client. tests/editors/setup.sh installs what they need (apt-get,
# npm) and keeps code-server under EDITORS_CACHE, so only the first run pays for it. When it
# cannot install something, the tests fail and say what is missing.
EDITORS_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/compactd-editors
CODE_SERVER_VERSION := 4.100.3
# The Claude Code CLI tests/editors/test_claude_code.py resumes compactd's sessions in.
CLAUDE_CODE_VERSION := 2.1.332
# The Codex CLI tests/editors/test_codex.py runs against the emulator's Responses API.
CODEX_VERSION := 0.171.0
# The Gemini CLI tests/editors/test_gemini.py checks docs/gemini.md's facts on (Node >= 20).
GEMINI_CLI_VERSION := 0.61.0

EDITOR_TESTS ?= tests/editors
# Two test files at a time, each on a worker of its own (a file's tests share its editor or
# emulator): they mostly wait on the programs they drive, so two fit on CI's two cores, and the
# tests give those programs minutes, not seconds.
EDITOR_WORKERS ?= 2

test-editors: $(STAMP)
	-tests/editors/setup.sh "$(EDITORS_CACHE)" $(CODE_SERVER_VERSION) $(CLAUDE_CODE_VERSION) \
		$(CODEX_VERSION) $(GEMINI_CLI_VERSION)
	$(MAKE) -C clients/vscode package
	CODE_SERVER=$(EDITORS_CACHE)/code-server-$(CODE_SERVER_VERSION)/node_modules/.bin/code-server \
	CLAUDE_CODE=$(EDITORS_CACHE)/claude-code-$(CLAUDE_CODE_VERSION)/node_modules/.bin/claude \
	CODEX=$(EDITORS_CACHE)/codex-$(CODEX_VERSION)/node_modules/.bin/codex \
	GEMINI_CLI=$(EDITORS_CACHE)/gemini-cli-$(GEMINI_CLI_VERSION)/node_modules/.bin/gemini \
		$(BIN)/python -m pytest -q -rs -n $(EDITOR_WORKERS) --dist loadfile $(EDITOR_TESTS)

# The real-editor tests again, this time copying the shots the VS Code extension's README shows
# into clients/vscode/media/ (a plain `make test-editors` leaves the checkout as it was).
vscode-screenshots: $(STAMP)
	COMPACTD_VSCODE_MEDIA=1 $(MAKE) test-editors EDITOR_TESTS=tests/editors/test_vscode.py

test: lint typecheck protocol-check unit node-test test-editors

# The terminal screenshots the README shows: each report run in a 100x40 tmux pane, captured with
# its colours and saved as SVG in docs/screenshots/.
screenshots: $(STAMP)
	@command -v tmux >/dev/null || (apt-get update -q && apt-get install -y -q tmux)
	$(BIN)/python docs/screenshots/capture.py

bench: $(STAMP)
	@for b in tests/bench/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV)
