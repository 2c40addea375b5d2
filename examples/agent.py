"""A small coding agent whose context window compactd manages: the loop an IDE client runs.

Before each request to the model it asks compactd whether to compact (``compact/auto``), sends
what compactd says the model sees (``session/messages``) with the system prompt and tools it
declared when it opened the session (``cacheSafeParams``, which let a summary share the main
loop's prompt cache), then appends the model's reply and the tool results, with the usage the
API reported, and reports that usage (``cache/afterResponse``). Two tools, in the working
directory: ``read_file`` and ``run`` (a shell command).

    python examples/agent.py [--context-window N] [--data-dir DIR] [--synchronous] PROMPT...

The model is the Anthropic API with ``ANTHROPIC_API_KEY`` (``ANTHROPIC_BASE_URL`` points it
elsewhere, e.g. at the tests' emulator); the daemon it spawns reads the same variables for its
summaries. ``Agent`` is imported by ``tests/bench/bench_wait.py``, which replays transcripts
through this loop.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anthropic
from compactd_client import Client, default_command
from compactd_client import protocol as p

MODEL = "claude-sonnet-4-6"
SYSTEM = "You are a coding agent in {cwd}. Look with your tools before you answer; be brief."


def tool(name: str, description: str, arg: str) -> dict[str, Any]:
    """A tool definition for the Messages API, with one required string argument."""
    schema = {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    return {"name": name, "description": description, "input_schema": schema}


TOOLS = [
    tool("read_file", "Read a text file (a path relative to the project).", "path"),
    tool("run", "Run a shell command in the project; returns its output.", "command"),
]
ToolRunner = Callable[[str, dict[str, Any]], Awaitable[str]]


async def run_tool(name: str, args: dict[str, Any]) -> str:
    """Carry out one tool call in the current directory; a failure is reported, not raised."""
    try:
        if name == "read_file":
            return await asyncio.to_thread(Path(args["path"]).read_text, errors="replace")
        if name == "run":
            shell = functools.partial(subprocess.run, shell=True, capture_output=True, text=True)
            done = await asyncio.to_thread(shell, args["command"], timeout=120)
            return f"{done.stdout}{done.stderr}(exit status {done.returncode})"
        return f"error: no tool named {name}"
    except (OSError, KeyError, subprocess.TimeoutExpired) as exc:
        return f"error: {exc}"


def with_cache_marker(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mark the end of the conversation for the prompt cache: the next request reads it, and so
    does a summary, which compactd sends with the same system prompt, tools and messages."""
    last = messages[-1]
    content = last["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return [*messages[:-1], {**last, "content": blocks}]


@dataclass
class Agent:
    daemon: Client
    api: anthropic.AsyncAnthropic
    cwd: str
    model: str = MODEL
    context_window: int | None = None
    max_tokens: int = 4096
    system: str = ""
    tools: list[dict[str, Any]] = field(default_factory=lambda: TOOLS)
    tool_runner: ToolRunner = run_tool
    session_id: str = ""
    last_uuid: str | None = None
    # Each compaction compact/auto made: (seconds the agent waited for it, its result).
    compactions: list[tuple[float, p.AutoResult]] = field(default_factory=list)
    # The tokens left before the blocking limit when compact/auto last said the summary was
    # still being prepared in the background (the agent went on); None since it did not.
    preparing: int | None = None

    async def open(self) -> None:
        self.system = self.system or SYSTEM.format(cwd=self.cwd)
        opened = await self.daemon.open_session(
            cwd=self.cwd,
            model=self.model,
            context_window=self.context_window,
            max_output_tokens=self.max_tokens,
            cache_safe_params=p.CacheSafeParams(system=self.system, tools=self.tools),
        )
        self.session_id = opened.session_id

    def line(self, kind: str, message: dict[str, Any]) -> dict[str, Any]:
        """One transcript line, in the shape Claude Code writes, chained to the previous one."""
        uid = str(uuid.uuid4())
        stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        line = {"type": kind, "uuid": uid, "parentUuid": self.last_uuid, "timestamp": stamp}
        self.last_uuid = uid
        return {**line, "cwd": self.cwd, "message": message}

    async def turn(self, prompt: str) -> str:
        """Run one user turn to the model's final answer, calling tools on the way."""
        sid = self.session_id
        await self.daemon.append(sid, [self.line("user", {"role": "user", "content": prompt})])
        while True:
            # Compact now if the context needs it. (When a summary is being prepared in the
            # background and there is room left, compact/auto answers at once.)
            started = time.monotonic()
            auto = await self.daemon.compact_auto(sid)
            if auto.was_compacted:
                self.compactions.append((time.monotonic() - started, auto))
            elif auto.reason_code == "summaryPreparing":
                self.preparing = auto.tokens_left
            # This agent asked for no cache edits and no API context management (session/open,
            # initializationOptions.microcompact), so the view is plain messages.
            view = await self.daemon.messages(sid)
            reply = await self.api.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                system=self.system,
                tools=self.tools,  # type: ignore[arg-type]
                messages=with_cache_marker(view.messages),  # type: ignore[arg-type]
            )
            # The reply as a transcript line, with its usage: compactd counts from it.
            keep = {"id", "role", "model", "content", "usage"}
            lines = [self.line("assistant", reply.model_dump(include=keep, exclude_none=True))]
            results = []
            for block in reply.content:
                if block.type == "tool_use":
                    output = await self.tool_runner(block.name, dict(block.input))
                    results.append(
                        {"type": "tool_result", "tool_use_id": block.id, "content": output}
                    )
            if results:
                lines.append(self.line("user", {"role": "user", "content": results}))
            await self.daemon.append(sid, lines)
            await self.daemon.cache_after(sid, lines[0]["message"]["usage"])
            if not results:
                return "".join(block.text for block in reply.content if block.type == "text")


async def main() -> None:
    parser = argparse.ArgumentParser(description="A coding agent whose context compactd manages.")
    parser.add_argument("prompts", nargs="+", metavar="PROMPT", help="one user turn each")
    parser.add_argument("--context-window", type=int, help="a smaller window compacts sooner")
    parser.add_argument("--data-dir", help="where compactd keeps the session")
    parser.add_argument(
        "--synchronous", action="store_true", help="no summary prepared in the background"
    )
    args = parser.parse_args()
    # The daemon installed beside this interpreter, else the `compactd` on PATH.
    serve = default_command()
    if args.data_dir:
        serve += ["--data-dir", args.data_dir]
    options = {"backgroundCompaction": {"enabled": not args.synchronous}}
    async with (
        Client.spawn(serve, initialization_options=options) as daemon,
        anthropic.AsyncAnthropic() as api,
    ):
        agent = Agent(daemon, api, cwd=os.getcwd(), context_window=args.context_window)
        await agent.open()
        for prompt in args.prompts:
            print(f"> {prompt}", flush=True)
            done = len(agent.compactions)
            agent.preparing = None
            answer = await agent.turn(prompt)
            if agent.preparing is not None:
                left = agent.preparing
                print(f"[a summary is being prepared in the background; {left:,} tokens left]")
            for waited, auto in agent.compactions[done:]:
                # A summary (full or session memory) has a result; clearing old tool results
                # (microcompact) has its own.
                before, after = (
                    (auto.result.pre_compact_tokens, auto.result.post_compact_tokens)
                    if auto.result is not None
                    else (auto.micro.pre_tokens, auto.micro.post_tokens)  # type: ignore[union-attr]
                )
                print(f"[{auto.mechanism}: {before:,} -> {after:,} tokens, waited {waited:.1f} s]")
            print(answer)


if __name__ == "__main__":
    asyncio.run(main())
