"""The in-process harness (tests/inproc.py) answers as the real daemon over stdio does.

Most e2e tests run in process; this one holds the two side by side: the same requests, sent to
a spawned daemon and to an in-process ``App`` on data dirs of their own, get the same results
and the same errors (JSON-RPC number, ``data.code``, message), once the data dir's path is
taken out of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from compactd_client import Client, RpcError

from compactd import protocol as p
from tests.conftest import SpawnDaemon
from tests.helpers import CWD, MODEL, assistant, user
from tests.inproc import InProc

OPTIONS = {"summarizer": {"offline": True}}

# (method, params): good and bad requests, in order; "S" is the session both open.
SCRIPT: list[tuple[str, Any]] = [
    (p.SESSION_OPEN, {"cwd": CWD, "model": MODEL, "sessionId": "S", "contextWindow": 60_000}),
    (
        p.SESSION_APPEND,
        {
            "sessionId": "S",
            "entries": [
                user("write the parser " + "word " * 400, uuid="u1"),
                assistant("done " * 300, uuid="a1", msg_id="m1", model=MODEL, parentUuid="u1"),
                user("now the tests " + "word " * 400, uuid="u2", parentUuid="a1"),
            ],
        },
    ),
    (p.SESSION_APPEND, {"sessionId": "S", "entries": [user("again", uuid="u1")]}),
    (p.SESSION_MESSAGES, {"sessionId": "S"}),
    (p.TOKENS_STATUS, {"sessionId": "S"}),
    (p.TOKENS_BREAKDOWN, {"sessionId": "S"}),
    (p.SESSION_LIST, {}),
    (p.TOKENS_STATUS, {"sessionId": "nope"}),
    (p.TOKENS_STATUS, {"sessionId": "../S"}),
    (p.TOKENS_STATUS, {"sessionId": "S", "extra": 1}),
    (p.TOKENS_STATUS, ["S"]),
    (p.SESSION_APPEND, {"sessionId": "S", "entries": [{"type": 5}]}),
    (p.SESSION_OPEN, {"cwd": "relative/dir", "model": MODEL}),
    (p.COMPACT_UNDO, {"sessionId": "S"}),
    ("compact/everything", {}),
    (p.RECALL_SEARCH, {"sessionId": "S", "query": "parser"}),
    (p.SESSION_CLOSE, {"sessionId": "S"}),
]


async def _answers(client: Client, data_dir: Path) -> list[Any]:
    out: list[Any] = []
    for method, params in SCRIPT:
        try:
            answer: Any = {"result": await client.request(method, params)}
        except RpcError as err:
            answer = {"error": [err.number, err.code, err.message]}
        # The one thing that differs: where each keeps its data.
        out.append(json.loads(json.dumps(answer).replace(str(data_dir), "<data>")))
    return out


async def test_in_process_answers_as_the_daemon_over_stdio(
    spawn_daemon: SpawnDaemon, app_daemon: InProc, tmp_path: Path
) -> None:
    async with spawn_daemon(OPTIONS, tmp_path / "wire") as client:
        over_wire = await _answers(client, tmp_path / "wire")
    async with app_daemon(OPTIONS, tmp_path / "inproc") as client:
        in_process = await _answers(client, tmp_path / "inproc")
    assert len(over_wire) == len(SCRIPT)
    # Both kinds of answer are in the script, so the comparison covers both.
    assert any("error" in a for a in over_wire) and any("result" in a for a in over_wire)
    for (method, _), wire, inproc in zip(SCRIPT, over_wire, in_process, strict=True):
        assert inproc == wire, method
