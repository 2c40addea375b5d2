"""The LSP lifecycle driven by pytest-lsp's standard client, as any LSP-speaking editor would."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest_lsp
from lsprotocol.types import ClientCapabilities, InitializeParams
from pytest_lsp import ClientServerConfig, LanguageClient

from compactd import protocol as p


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, "-m", "compactd", "serve"])
)
async def client(lsp_client: LanguageClient, tmp_path: Path) -> Any:
    params = InitializeParams(
        capabilities=ClientCapabilities(),
        initialization_options={"dataDir": str(tmp_path / "data")},
    )
    result = await lsp_client.initialize_session(params)
    lsp_client.init_result = result  # type: ignore[attr-defined]
    yield
    await lsp_client.shutdown_session()


async def test_lifecycle_and_a_request(client: LanguageClient, tmp_path: Path) -> None:
    result = client.init_result  # type: ignore[attr-defined]
    assert result.server_info.name == "compactd"
    assert p.SESSION_OPEN in result.capabilities.experimental["compactd"]["methods"]
    opened = await client.protocol.send_request_async(
        p.SESSION_OPEN, {"cwd": str(tmp_path), "model": "claude-haiku-4-5", "sessionId": "lsp-1"}
    )
    assert opened.sessionId == "lsp-1"
    assert opened.status.contextWindow == 200_000
    assert (tmp_path / "data" / "sessions" / "lsp-1" / "transcript.jsonl").is_file()
