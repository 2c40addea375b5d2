"""``compactd mcp``: the MCP tools on stdio and, beside them, what the agents have the process do
for as long as their session lasts (for Claude Code's plugin, compactd's summary prepared in the
background: docs/claude-code.md#prepared-in-the-background).

The tools are ``compactd.mcp_server``'s (docs/recall.md#mcp-tools). The agents' work is asked of
the port (``port.mcp_companions``); an agent imports its modules only when it has work to do,
so that the tools alone start as fast as before.

Claude Code stops its MCP servers with SIGINT, then SIGTERM when that fails (Observed (2.1.332):
"SIGINT failed, sending SIGTERM" after 100 ms). Either signal ends this process at once: the
agents' work is cancelled (briefly: a preparation closes its session), and the process exits
without waiting for the thread that reads stdin, which no cancellation can interrupt.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import anyio

from compactd import port
from compactd.mcp_server import McpConfig, build_server, serve_stdio

__all__ = ["serve"]

log = logging.getLogger(__name__)

# How long the agents' work has to end when the process is told to stop.
_CLOSE_S: Final = 3.0


def serve(config: McpConfig, env: Mapping[str, str]) -> int:
    """Serve until the agent closes stdin or signals the process."""
    server = build_server(config)
    work = port.mcp_companions(config.data_dir, config.cwd, env)

    async def main() -> None:
        working = anyio.CancelScope()
        done = anyio.Event()

        async def companion(run: Callable[[], Awaitable[None]]) -> None:
            try:
                await run()
            except Exception:  # the tools go on whatever happens beside them
                log.exception("compactd mcp: the work beside the tools failed")

        async def companions() -> None:
            try:
                with working:
                    async with anyio.create_task_group() as tg:
                        for run in work:
                            tg.start_soon(companion, run)
            finally:
                done.set()

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    working.cancel()
                    with anyio.move_on_after(_CLOSE_S):
                        await done.wait()
                    logging.shutdown()
                    os._exit(0)

        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal)
            tg.start_soon(companions)
            await serve_stdio(server)
            # stdin closed: the agent is gone.
            working.cancel()
            with anyio.move_on_after(_CLOSE_S):
                await done.wait()
            tg.cancel_scope.cancel()

    anyio.run(main)
    return 0
