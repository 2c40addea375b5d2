"""Run the emulator as a process: ``python -m tests.emulator --port N``.

Prints its base URL on stdout, serves until SIGINT/SIGTERM, then prints the
cost summary as JSON on stderr.  A running instance can be driven over HTTP via
``/_emulator/{health,cost,requests}`` (GET) and ``/_emulator/{reset,script,
advance_time,context_window}`` (POST, JSON bodies).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from .server import Emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.emulator", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--context-window", type=int, default=200_000)
    parser.add_argument("--min-cache-tokens", type=int, default=1024)
    parser.add_argument("--api-key", default=None, help="accept only this key (default: any)")
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
    emu.start()
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
