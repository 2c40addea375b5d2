"""The Claude Code plugin shipped with compactd, and the one variable that chooses its summarizer
(docs/claude-code.md#the-plugin, docs/claude-code.md#which-summarizer)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from compactd import __version__
from compactd.agents.claude_code.cli import PLUGIN_CALL, _parser
from compactd.agents.claude_code.services.choice import summarizer_choice
from compactd.agents.claude_code.services.plugin import plugin_folder
from compactd.agents.claude_code.services.settings import HOOK_TIMEOUT_S
from tests.conftest import ROOT

PLUGIN = plugin_folder()


def _json(path: Path) -> dict[str, object]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def test_the_plugin_is_the_one_in_the_package() -> None:
    assert PLUGIN == ROOT / "compactd" / "agents" / "claude_code" / "plugin"
    manifest = _json(PLUGIN / ".claude-plugin" / "plugin.json")
    assert manifest["name"] == "compactd" and manifest["version"] == __version__


def test_the_folder_and_the_repository_are_marketplaces_of_it() -> None:
    own = _json(PLUGIN / ".claude-plugin" / "marketplace.json")
    repo = _json(ROOT / ".claude-plugin" / "marketplace.json")
    for market, root in ((own, PLUGIN), (repo, ROOT)):
        assert market["name"] == "compactd"
        (entry,) = market["plugins"]  # type: ignore[misc]
        assert entry["name"] == "compactd"
        assert (root / entry["source"]).resolve() == PLUGIN.resolve()


def test_hooks_module_and_server_run_compactd_through_the_plugins_script() -> None:
    hooks = _json(PLUGIN / "hooks" / "hooks.json")
    assert hooks["modules"] == ["./register.js"]
    events = hooks["hooks"]
    assert isinstance(events, dict)
    # The settings install's events, less PreCompact: the module steers Claude Code's summary.
    assert set(events) == {"SessionStart", "PostCompact", "UserPromptSubmit"}
    for groups in events.values():
        for group in groups:
            for hook in group["hooks"]:
                assert hook["command"] == "sh"
                assert hook["args"] == ["${CLAUDE_PLUGIN_ROOT}/bin/compactd", "claude-code", "hook"]
                # As long as the settings install gives a hook: past the hook's own deadline.
                assert hook["timeout"] == HOOK_TIMEOUT_S
    server = _json(PLUGIN / ".mcp.json")["mcpServers"]["compactd"]  # type: ignore[index]
    assert server["args"] == ["${CLAUDE_PLUGIN_ROOT}/bin/compactd", "mcp"]
    assert server["alwaysLoad"] is True
    script = (PLUGIN / "bin" / "compactd").read_text()
    assert "${COMPACTD_COMMAND:-compactd}" in script
    module = (PLUGIN / "hooks" / "register.js").read_text()
    assert '"session-compact"' in module and 'on("session.compact"' in module
    assert "skip" in module  # passed on only when compactd answers it (blocking asked for)


def test_no_file_of_the_plugin_names_a_path_of_one_machine() -> None:
    for path in PLUGIN.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not re.search(r"(?<![\w$}])/(home|root|tmp|usr|Users|opt)/", text), path


@pytest.mark.parametrize(
    ("env", "name", "prepares", "problem"),
    [
        ({}, "none", False, None),
        ({"COMPACTD_SUMMARIZER": "offline"}, "offline", False, None),
        ({"COMPACTD_SUMMARIZER": "anthropic"}, "none", False, "ANTHROPIC_API_KEY"),
        ({"COMPACTD_SUMMARIZER": "Anthropic", "ANTHROPIC_API_KEY": "k"}, "anthropic", True, None),
        (
            {"COMPACTD_SUMMARIZER": "anthropic", "ANTHROPIC_AUTH_TOKEN": "t"},
            "anthropic",
            True,
            None,
        ),
        ({"COMPACTD_SUMMARIZER": "openai"}, "none", False, "OPENAI_BASE_URL"),
        (
            {"COMPACTD_SUMMARIZER": "openai", "OPENAI_BASE_URL": "http://localhost:11434/v1"},
            "openai",
            True,
            None,
        ),
        ({"COMPACTD_SUMMARIZER": "gpt"}, "none", False, "not one of"),
    ],
)
def test_the_summarizer_is_one_variable(
    env: dict[str, str], name: str, prepares: bool, problem: str | None
) -> None:
    choice = summarizer_choice(env)
    assert choice.name == name and choice.prepares is prepares
    assert (choice.problem is None) if problem is None else (problem in (choice.problem or ""))


def test_the_summarizer_takes_claude_codes_address_and_the_model_named() -> None:
    choice = summarizer_choice(
        {
            "COMPACTD_SUMMARIZER": "anthropic",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "COMPACTD_SUMMARIZER_MODEL": "claude-haiku-4-5",
        }
    )
    assert choice.options == {
        "provider": "anthropic",
        "offlineFallback": False,
        "baseUrl": "http://127.0.0.1:9",
        "model": "claude-haiku-4-5",
    }


def test_the_plugins_call_is_read_as_the_parser_reads_it() -> None:
    """``compactd claude-code session-compact`` with no flag skips building the parsers."""
    assert vars(_parser().parse_args(["session-compact"])) == vars(PLUGIN_CALL)
