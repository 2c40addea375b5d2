"""``compactd mcp``: the MCP tools on stdio and, for a Claude Code session whose user chose a
summarizer, compactd's summary prepared in the background beside them.

The tools are ``compactd.mcp_server``'s (docs/recall.md#mcp-tools). When ``COMPACTD_SUMMARIZER``
chooses a model, the same process follows the Claude Code session and prepares summaries for the
plugin's ``session.compact`` (``compactd.server.claude_preparer``,
docs/claude-code.md#prepared-in-the-background); its modules are imported only then, so that the
tools alone start as fast as before.

Claude Code stops its MCP servers with SIGINT, then SIGTERM when that fails (Observed (2.1.332):
"SIGINT failed, sending SIGTERM" after 100 ms). Either signal ends this process at once: the
preparation closes its session (briefly), and the process exits without waiting for the thread
that reads stdin, which no cancellation can interrupt.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping
from typing import Final

import anyio

from compactd.mcp_server import McpConfig, build_server
from compactd.services.claude_choice import summarizer_choice

__all__ = ["serve"]

# How long the preparation has to close its session when the process is told to stop.
_CLOSE_S: Final = 3.0


def serve(config: McpConfig, env: Mapping[str, str]) -> int:
    """Serve until Claude Code closes stdin or signals the process."""
    server = build_server(config)
    prepares = summarizer_choice(env).prepares

    async def main() -> None:
        preparing = anyio.CancelScope()
        prepared = anyio.Event()

        async def prepare() -> None:
            try:
                with preparing:
                    if prepares:
                        from compactd.server.claude_preparer import prepare as run

                        await run(config.data_dir, config.cwd, env)
            finally:
                prepared.set()

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    preparing.cancel()
                    with anyio.move_on_after(_CLOSE_S):
                        await prepared.wait()
                    logging.shutdown()
                    os._exit(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal)
            tg.start_soon(prepare)
            await server.run_stdio_async()
            # stdin closed: Claude Code is gone.
            preparing.cancel()
            with anyio.move_on_after(_CLOSE_S):
                await prepared.wait()
            tg.cancel_scope.cancel()

    anyio.run(main)
    return 0
