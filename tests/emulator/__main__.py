"""Run the emulator as a process: ``python -m tests.emulator --port N``.

Prints its base URL on stdout, serves until SIGINT/SIGTERM, then prints the
cost summary as JSON on stderr.  With a command after ``--`` it serves only
while that command runs, with ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``
(and, for Gemini CLI, ``GOOGLE_GEMINI_BASE_URL`` and ``GEMINI_API_KEY``)
pointing the command at it, prints nothing on stdout, and exits with the
command's status.  ``--replies FILE`` (a JSON list of ``reply_from_dict``
items) answers an agent's own requests in order (Gemini's main requests too); summarization requests
(``request_kind``) always get the derived summary, and ``--latency
KIND=SECONDS`` delays every reply of a kind.  A running instance can be driven over HTTP via
``/_emulator/{health,cost,requests}`` (GET) and ``/_emulator/{reset,script,
advance_time,context_window}`` (POST, JSON bodies).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from .script import Reply, reply_from_dict, request_kind
from .server import Emulator, RecordedRequest, ScriptItem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.emulator", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--context-window", type=int, default=200_000)
    parser.add_argument("--min-cache-tokens", type=int, default=1024)
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any)")
    parser.add_argument("--replies", type=Path, help="JSON list of replies to the agent's requests")
    parser.add_argument(
        "--latency", action="append", default=[], metavar="KIND=SECONDS", help="e.g. summary=2"
    )
    parser.add_argument("command", nargs="*", help="a command to run against the emulator")
    args = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    emu = Emulator(
        port=args.port,
        context_window=args.context_window,
        min_cacheable_tokens=args.min_cache_tokens,
        api_key=args.api_key,
    )
    for spec in args.latency:
        kind, _, seconds = spec.partition("=")
        emu.set_latency(kind, float(seconds))
    if args.replies is not None:
        replies = deque(reply_from_dict(r) for r in json.loads(args.replies.read_text()))

        def answer(rec: RecordedRequest) -> ScriptItem:
            if replies and request_kind(rec.body) == "main":
                return replies.popleft()
            return Reply()

        emu.set_default(answer)

        def answer_gemini(rec: RecordedRequest) -> ScriptItem:
            return replies.popleft() if replies else Reply()

        emu.gemini.set_default(answer_gemini)
    emu.start()
    if args.command:
        env = {**os.environ, "ANTHROPIC_BASE_URL": emu.base_url}
        env["ANTHROPIC_API_KEY"] = args.api_key or "test"
        env["GOOGLE_GEMINI_BASE_URL"] = emu.base_url
        env["GEMINI_API_KEY"] = args.api_key or "test"
        try:
            return subprocess.run(args.command, env=env, check=False).returncode
        finally:
            emu.stop()
    print(emu.base_url, flush=True)
    try:
        while not done.wait(0.2):
            pass
    finally:
        emu.stop()
        print(json.dumps(emu.cost_summary().as_dict()), file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
