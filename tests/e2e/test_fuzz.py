"""Fuzzing the live daemon: over 10,000 generated frames and params (wrong types, huge strings,
deep nesting, unicode edge cases, hostile paths). Every request must be answered, the daemon
must survive, and requests it rejects must leave the data dir exactly as it was.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from compactd import protocol as p
from tests.wire import Wire, digest

# The counts of the default run keep every test of the suite well inside its timeout on a busy
# 2-core machine; ``make fuzz`` runs the full form (FUZZ_EXAMPLES=210: 10,500 invalid requests,
# FUZZ_SCHEMA_EXAMPLES=80, FUZZ_MUTATION_EXAMPLES=120) with the same checks.
BATCH = 50
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))  # 60 x 50 = 3,000 invalid requests


@pytest.fixture(scope="module")
def wire(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Wire, Path]]:
    tmp = tmp_path_factory.mktemp("fuzz")
    data = tmp / "data"
    w = Wire(data, tmp / "daemon.log")
    init = w.call(
        "initialize",
        {"processId": None, "capabilities": {}, "initializationOptions": {"dataDir": str(data)}},
    )
    assert "result" in init
    w.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
    opened = w.call(p.SESSION_OPEN, {"cwd": str(tmp), "model": "m", "sessionId": "victim"})
    assert "result" in opened
    appended = w.call(
        p.SESSION_APPEND,
        {
            "sessionId": "victim",
            "entries": [
                {"type": "user", "uuid": "u0", "message": {"role": "user", "content": "hi"}}
            ],
        },
    )
    assert appended["result"]["appended"] == 1
    yield w, data
    w.close()


# -- generators of requests that must all be rejected ---------------------------------------------

_unicode = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30
) | st.sampled_from(
    [
        "\u0000",
        "\ufeff",
        "\u202e",
        "😀" * 50,
        "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    ]
)
_hostile_ids = st.sampled_from(
    [
        "../victim",
        "..",
        ".",
        "/etc/passwd",
        "victim/../../x",
        "a\\b",
        "",
        " ",
        "victim\u0000",
        "-x",
        "x" * 200,
        "üñí",
        "CON",
    ]
)
_hostile_paths = st.sampled_from(
    [
        "../../etc/passwd",
        "/etc/shadow",
        "/dev/zero",
        "/proc/self/mem",
        "",
        "\u0000",
        "/",
        "~/../../root",
        "C:\\Windows\\system.ini",
        "/nonexistent/x.jsonl",
    ]
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    _unicode,
)
# Python's json recurses, so objects stay under its limit; deeper nesting is sent as raw bytes
# by test_deeply_nested_bodies below.
_deep = st.integers(50, 120).map(lambda n: json.loads("[" * n + "]" * n))
_huge = st.integers(10_000, 200_000).map(lambda n: "A" * n)
_junk = st.one_of(
    _scalars,
    _deep,
    _huge,
    st.lists(_scalars, max_size=5),
    st.dictionaries(_unicode, _scalars, max_size=5),
)

_session_methods = [m for m in p.REQUESTS if m not in (p.SESSION_OPEN, p.SESSION_LIST)]


@st.composite
def invalid_request(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.integers(0, 7))
    method = draw(st.sampled_from(_session_methods))
    if kind == 0:  # unknown session
        return method, {
            "sessionId": draw(st.text(alphabet="abcdefgh0123456789", min_size=1, max_size=12))
            + "-ghost"
        }
    if kind == 1:  # hostile session id
        return method, {"sessionId": draw(_hostile_ids)}
    if kind == 2:  # wrong type for sessionId
        return method, {
            "sessionId": draw(
                st.one_of(_deep, st.integers(), st.none(), st.lists(_scalars, max_size=2))
            )
        }
    if kind == 3:  # params not an object
        return method, draw(
            st.one_of(st.lists(_junk, max_size=3), _scalars.filter(lambda v: v is not None))
        )
    if kind == 4:  # unknown fields
        return method, {
            "sessionId": "victim",
            draw(_unicode.filter(lambda s: s not in ("sessionId",))) or "zz": draw(_junk),
        }
    if kind == 5:  # hostile transcript imports
        return p.SESSION_OPEN, {
            "cwd": draw(_unicode),
            "model": draw(_unicode),
            "transcriptPath": draw(_hostile_paths),
            "sessionId": draw(st.text(alphabet="abc", min_size=1, max_size=5)) + "-imp",
        }
    if kind == 6:  # appends with bad entries
        bad = draw(
            st.one_of(
                _scalars,
                _deep,
                st.just({"no": "type"}),
                st.just({"type": 5}),
                st.just({"type": "user", "uuid": 7}),
            )
        )
        return p.SESSION_APPEND, {
            "sessionId": "victim",
            "entries": [{"type": "user", "message": {"role": "user", "content": "ok"}}, bad],
        }
    # unknown method names
    return draw(
        st.sampled_from(
            ["session/", "compact", "tokens/statu", "\u202esession/open", "x" * 300, "$/weird"]
        )
    ), {"sessionId": "victim"}


@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(st.lists(invalid_request(), min_size=BATCH, max_size=BATCH))
def test_invalid_requests_are_all_answered_and_change_nothing(
    wire: tuple[Wire, Path], batch: list[tuple[str, Any]]
) -> None:
    w, data = wire
    before = digest(data)
    ids = []
    for method, params in batch:
        ids.append(w.next_id)
        w.send({"jsonrpc": "2.0", "id": w.next_id, "method": method, "params": params})
        w.next_id += 1
    w.flush()
    answers: dict[int, dict[str, Any]] = {}
    while len(answers) < len(ids):
        try:
            msg = w.recv()
        except AssertionError:
            missing = [
                (m, str(prm)[:120])
                for (m, prm), i in zip(batch, ids, strict=True)
                if i not in answers
            ]
            raise AssertionError(f"unanswered: {missing}") from None
        if msg.get("id") in ids:
            answers[msg["id"]] = msg
    for (method, params), msg_id in zip(batch, ids, strict=True):
        msg = answers[msg_id]
        assert "error" in msg, (method, str(params)[:200], msg)
        assert msg["error"]["message"], msg
        assert isinstance(msg["error"].get("code"), int)
    assert digest(data) == before
    status = w.call(p.TOKENS_STATUS, {"sessionId": "victim"})
    assert status["result"]["tokens"] > 0


@st.composite
def odd_but_valid_entry(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "type": draw(
            st.sampled_from(
                ["user", "assistant", "attachment", "progress", "system", "future-kind"]
            )
        ),
        "uuid": draw(st.uuids()).hex,
        "message": {
            "role": "user",
            "content": draw(
                st.one_of(
                    _unicode,
                    st.lists(
                        st.fixed_dictionaries({"type": st.just("text"), "text": _unicode}),
                        max_size=3,
                    ),
                )
            ),
        },
        draw(_unicode) or "k": draw(_junk),
    }


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(odd_but_valid_entry(), min_size=1, max_size=5))
def test_odd_but_valid_entries_are_accepted_and_stored_verbatim(
    wire: tuple[Wire, Path], entries: list[dict[str, Any]]
) -> None:
    w, data = wire
    for entry in entries:
        # Fresh uuids: appends are idempotent by uuid, and examples repeat generated values.
        entry["uuid"] = uuid.uuid4().hex
    res = w.call(p.SESSION_APPEND, {"sessionId": "victim", "entries": entries})
    assert res.get("result", {}).get("appended") == len(entries), res
    lines = (data / "sessions" / "victim" / "transcript.jsonl").read_bytes().splitlines()
    assert [json.loads(line) for line in lines[-len(entries) :]] == entries
    msgs = w.call(p.SESSION_MESSAGES, {"sessionId": "victim"})
    assert "result" in msgs


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deeply_nested_bodies(wire: tuple[Wire, Path], depth: int) -> None:
    w, data = wire
    before = digest(data)
    for params in (
        "[" * depth + "]" * depth,
        '{"sessionId": ' + "[" * depth + "]" * depth + "}",
        '{"sessionId": "victim", "x": ' + '{"a":' * depth + "1" + "}" * depth + "}",
    ):
        body = (
            '{"jsonrpc": "2.0", "id": 424242, "method": "tokens/status", "params": ' + params + "}"
        ).encode()
        w.send_body(body)
        w.flush()
        msg = w.recv()
        assert "error" in msg, msg
    assert digest(data) == before
    assert "result" in w.call(p.TOKENS_STATUS, {"sessionId": "victim"})


def test_garbage_bytes_then_still_serving(wire: tuple[Wire, Path]) -> None:
    w, _ = wire
    for chunk in [
        b"\x00\x01\x02\r\n\r\n",
        b"Content-Length: 99999999999999999999\r\n\r\n",
        b"Content-Length: -1\r\n\r\n",
        b"\xff" * 100 + b"\r\n",
        b"Content-Length: 3\r\n\r\n\xff\xfe\xfd",
    ]:
        w.stdin.write(chunk)
        w.flush()
        err = w.recv()
        assert err["id"] is None and "error" in err
    assert "result" in w.call(p.SESSION_LIST, {})
    assert sys.platform != "win32"


# -- schema-driven params: every method, params shaped as protocol/schema.json says ---------------

_SCHEMA = json.loads((Path(__file__).parents[2] / "protocol" / "schema.json").read_text())
SCHEMA_EXAMPLES = int(os.environ.get("FUZZ_SCHEMA_EXAMPLES", "30"))
SCHEMA_BATCH = 25


def _inlined(schema: Any, seen: tuple[str, ...] = ()) -> Any:
    """``schema`` with every ``$ref`` to ``$defs`` replaced by its definition. Given to
    hypothesis-jsonschema without the 50 ``$defs``, a schema is checked and merged in a
    fraction of the time (it validates the whole document at every step)."""
    if isinstance(schema, list):
        return [_inlined(v, seen) for v in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        assert name not in seen, f"recursive definition {name}: inline it differently"
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_inlined(_SCHEMA["$defs"][name], (*seen, name)), **_inlined(rest, seen)}
    return {k: _inlined(v, seen) for k, v in schema.items()}


def _params_for(method: str) -> st.SearchStrategy[Any]:
    generated = from_schema(_inlined(_SCHEMA["methods"][method]["params"]))
    # Half of them aimed at the live session, so that they reach its state.
    aimed = generated.map(lambda v: {**v, "sessionId": "victim"} if isinstance(v, dict) else v)
    return st.one_of(generated, aimed)


# One strategy per method, built once, when the module is imported. Building one from the
# schema costs far more than drawing from it; a flatmap rebuilt them on every draw, 93% of this
# test's time.
_schema_request = st.one_of(
    [st.tuples(st.just(m), _params_for(m)) for m in sorted(_SCHEMA["methods"])]
)


def _victim_transcript(data: Path) -> bytes:
    return (data / "sessions" / "victim" / "transcript.jsonl").read_bytes()


def _answer_to(w: Wire, msg_id: Any) -> dict[str, Any]:
    """The answer to ``msg_id``; any other answer arriving first is a stale or second one."""
    msg = w.answer()
    assert msg.get("id") == msg_id, f"expected the answer to {msg_id!r}, got {msg}"
    return msg


@settings(
    max_examples=SCHEMA_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(_schema_request, min_size=SCHEMA_BATCH, max_size=SCHEMA_BATCH))
def test_schema_shaped_params_are_answered_once_and_errors_change_nothing(
    wire: tuple[Wire, Path], requests: list[tuple[str, Any]]
) -> None:
    w, data = wire
    for method, params in requests:
        before = _victim_transcript(data)
        msg_id = w.next_id
        w.next_id += 1
        w.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        w.flush()
        msg = _answer_to(w, msg_id)
        if "error" in msg:
            assert isinstance(msg["error"]["data"]["code"], str)
            assert _victim_transcript(data) == before, (method, params, msg)


# -- byte-level mutations of valid frames ---------------------------------------------------------

MUTATION_EXAMPLES = int(os.environ.get("FUZZ_MUTATION_EXAMPLES", "40"))
MUTATION_BATCH = 50

_BAD_BYTES = [b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\\u12", b"\\", b"\x00", b'"', b"\r\n"]


def _mutate(rng: random.Random, body: bytes) -> bytes | list[bytes]:
    """One mutation of a frame's body, or of the frame itself (a list of raw frames)."""
    kind = rng.randrange(9)
    if kind == 0:  # bytes that are not UTF-8 (or break an escape) inside a string
        quotes = [i for i, c in enumerate(body) if c == ord('"')]
        at = rng.choice(quotes) + 1 if quotes else rng.randrange(len(body))
        return body[:at] + rng.choice(_BAD_BYTES) + body[at:]
    if kind == 1:  # a number nobody can hold
        return body.replace(b'"id": ', b'"x": 1e999999, "id": ', 1)
    if kind == 2:  # deep nesting
        depth = rng.choice([150, 1_000, 50_000])
        return body.replace(
            b'"params": ', b'"params": ' + b"[" * depth + b"]" * depth + b', "p": ', 1
        )
    if kind == 3:  # a batch
        return b"[" + body + b", " + body + b"]"
    if kind == 4:  # the same id twice in a row
        return [_frame(body), _frame(body)]
    if kind == 5:  # a Content-Length that lies
        delta = rng.choice([-7, -1, 1, 9, 400])
        return [b"Content-Length: %d\r\n\r\n" % max(0, len(body) + delta) + body]
    if kind == 6:  # random byte flips
        out = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)
    if kind == 7:  # cut short
        return body[: rng.randrange(1, len(body))]
    return body  # unchanged


def _frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


@settings(
    max_examples=MUTATION_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@given(st.integers(0, 2**32))
def test_mutated_frames_never_stop_the_daemon_nor_answer_twice(
    wire: tuple[Wire, Path], seed: int
) -> None:
    w, data = wire
    rng = random.Random(seed)
    before = _victim_transcript(data)
    ids: list[int] = []
    appends: dict[int, list[str]] = {}
    payload = bytearray()
    for _ in range(MUTATION_BATCH):
        msg_id = w.next_id
        w.next_id += 1
        ids.append(msg_id)
        method = rng.choice([p.TOKENS_STATUS, p.SESSION_MESSAGES, p.SESSION_LIST, p.SESSION_APPEND])
        params: dict[str, Any] = {"sessionId": "victim"}
        if method == p.SESSION_LIST:
            params = {}
        elif method == p.SESSION_APPEND:
            uid = uuid.uuid4().hex
            params["entries"] = [
                {"type": "user", "uuid": uid, "message": {"role": "user", "content": "fuzz ✓"}}
            ]
            appends[msg_id] = [uid]
        body = json.dumps(
            {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params},
            ensure_ascii=False,
        ).encode()
        mutated = _mutate(rng, body)
        frames = mutated if isinstance(mutated, list) else [_frame(mutated)]
        payload += b"".join(frames)
    # An empty append queues behind every append before it on the session's lock.
    sentinel = w.next_id
    w.next_id += 1
    payload += _frame(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": sentinel,
                "method": p.SESSION_APPEND,
                "params": {"sessionId": "victim", "entries": []},
            }
        ).encode()
    )

    def write() -> None:
        # In a thread: answers are read meanwhile, as a client does, so that neither side
        # blocks on a full pipe.
        w.stdin.write(payload)
        w.flush()

    writer = threading.Thread(target=write)
    writer.start()
    answered: dict[Any, int] = {}
    appended = 0
    while True:
        msg = w.answer(wait=30)
        answered[msg.get("id")] = answered.get(msg.get("id"), 0) + 1
        result = msg.get("result")
        if msg.get("id") in appends and isinstance(result, dict):
            appended += result.get("appended", 0)
        if msg.get("id") == sentinel:
            break
    writer.join()
    for msg in w.drain(quiet=0.3):  # answers of reads that finished after the sentinel
        if "id" in msg and "method" not in msg:
            answered[msg.get("id")] = answered.get(msg.get("id"), 0) + 1
    # A frame sent twice with one id may be answered twice; any other id at most once.
    twice = {i for i, n in answered.items() if n > 1 and i is not None}
    assert twice <= set(ids), twice
    assert w.proc.poll() is None
    # The transcript grew by exactly what the answers say was appended, and nothing else.
    after = _victim_transcript(data)
    assert after.startswith(before)
    assert len(after[len(before) :].splitlines()) == appended


# -- the new doors: the recall index, the MCP server's frames, Claude Code's settings ------------
#
# The recall index damaged page by page (docs/recall.md#damage), malformed MCP frames
# (docs/recall.md#mcp-tools), and settings of every JSON shape at the keys install reads and
# writes (docs/claude-code.md#install). The default run samples; `make fuzz` takes every page.

VIEWER = (
    Path(__file__).resolve().parents[1]
    / "data/transcripts/d-kimuson__claude-code-viewer__fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl"
)
ALL_PAGES = EXAMPLES >= 200  # the full form (make fuzz) damages every page in turn
SAMPLED_PAGES = 24


def test_the_index_damaged_page_by_page_answers_as_before(tmp_path: Path) -> None:
    from compactd.core.recall_words import parse_query
    from compactd.services.recall_index import RecallIndex, index_path, use_index
    from compactd.services.safe_io import Deadline
    from tests.helpers import damage_page, index_pages

    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(VIEWER.read_bytes())
    data = tmp_path / "data"
    queries = ["claude code viewer", "npm run build", "typescript error", "-", "session.jsonl"]

    def answers() -> list[list[tuple[str | None, str, list[str | None]]]]:
        def work(index: RecallIndex) -> list[list[tuple[str | None, str, list[str | None]]]]:
            return [
                [
                    (f.entry.uuid, f.entry.text, [r.entry.uuid for r in f.revisions])
                    for f in index.search(parse_query(q), 5).found
                ]
                for q in queries
            ]

        found, coverage = use_index(data, transcript, work, deadline=Deadline(120))
        assert coverage.complete
        return found

    expected = answers()
    index = index_path(data, transcript)
    pages = index_pages(index)
    good = index.read_bytes()
    rng = random.Random(4)
    chosen = (
        range(pages)
        if ALL_PAGES
        else sorted({0, 1, pages - 1, *rng.sample(range(pages), min(SAMPLED_PAGES, pages))})
    )
    tried = 0
    for page in chosen:
        damage_page(index, page, seed=3)
        assert answers() == expected, page
        tried += 1
        # The next page is damaged in the index as it was built first.
        for stale in index.parent.glob(index.name + "-*"):
            stale.unlink()
        index.write_bytes(good)
    assert tried == len(chosen) and tried >= min(pages, SAMPLED_PAGES)


def _mcp_lines(rng: random.Random, count: int) -> tuple[list[bytes], set[Any]]:
    """``count`` lines for an MCP server, most of them malformed, each with an id of its own;
    and the ids that must be answered (every request whose id a JSON parser can read)."""
    base = {"jsonrpc": "2.0", "method": "tools/call",
            "params": {"name": "recall", "arguments": {"query": "notes", "limit": 2}}}  # fmt: skip
    lines: list[bytes] = []
    answered: set[Any] = set()
    for n in range(count):
        message: Any = json.loads(json.dumps({**base, "id": n}))
        kind = rng.randrange(10)
        if kind == 0:
            message["params"]["arguments"]["query"] = "a\ud800b"
        elif kind == 1:
            message["params"] = rng.choice([5, "x", [], None, True])
        elif kind == 2:
            message["method"] = rng.choice([7, None, [], ""])
        elif kind == 3:
            message["jsonrpc"] = rng.choice(["1.0", 2, None])
        elif kind == 4:
            message["params"]["arguments"] = rng.choice([[], "q", 3])
        elif kind == 5:
            message["params"]["arguments"]["limit"] = rng.choice(["two", 1e300, -1, [2]])
        elif kind == 6:
            message["params"]["name"] = "no-such-tool"
        text = json.dumps(message).encode()  # lone surrogates as \ud800 escapes
        if kind == 7:
            text = text[: rng.randrange(1, len(text))]  # cut short: not JSON
        elif kind == 8:
            at = rng.randrange(len(text))
            text = text[:at] + rng.choice(_BAD_BYTES).replace(b"\r\n", b" ") + text[at:]
        try:
            parsed = json.loads(text.decode("utf-8", "replace"))
        except ValueError:
            parsed = None
        if (
            isinstance(parsed, dict)
            and "method" in parsed
            and isinstance(parsed.get("id"), int)
            and not isinstance(parsed.get("id"), bool)
            and parsed["id"] == n
        ):
            answered.add(n)
        lines.append(text.replace(b"\n", b" "))
    return lines, answered


MCP_FRAME_LINES = 3 * EXAMPLES  # 180 by default, 630 in the full form


def test_malformed_mcp_frames_are_all_answered_once(tmp_path: Path) -> None:
    import subprocess

    from tests.helpers import CWD

    lines, must = _mcp_lines(random.Random(11), MCP_FRAME_LINES)
    transcript = tmp_path / "t.jsonl"
    transcript.write_bytes(VIEWER.read_bytes())
    init = {"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "fuzz", "version": "1"}}}  # fmt: skip
    server = subprocess.Popen(
        [sys.executable, "-m", "compactd", "mcp", "--data-dir", str(tmp_path / "data"),
         "--cwd", CWD, "--session", str(transcript)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    payload = b"".join(
        line + b"\n"
        for line in [
            json.dumps(init).encode(),
            b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
            *lines,
            b'{"jsonrpc": "2.0", "id": "last", "method": "ping"}',
        ]
    )
    writer = threading.Thread(target=lambda: (server.stdin.write(payload), server.stdin.flush()))
    writer.start()
    replies: dict[Any, int] = {}
    try:
        while not ({"init", "last", *must} <= set(replies)):
            raw = server.stdout.readline()
            assert raw, f"the server stopped; unanswered: {sorted(must - set(replies), key=str)}"
            reply = json.loads(raw)
            replies[reply.get("id")] = replies.get(reply.get("id"), 0) + 1
    finally:
        writer.join()
        server.stdin.close()
        server.wait(timeout=60)
    assert server.returncode == 0
    twice = {i for i, n in replies.items() if n > 1 and i is not None}
    assert twice == set(), twice
    assert set(replies) - {None} <= {"init", "last", *range(len(lines))}
    assert len(must) > len(lines) // 2  # most lines were requests with a readable id


SETTINGS_EXAMPLES = EXAMPLES  # 60 by default, 210 in the full form

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_KEY_PATHS = [
    ("hooks",), ("hooks", "SessionStart"), ("hooks", "SessionStart", 0),
    ("hooks", "SessionStart", 0, "hooks"), ("hooks", "SessionStart", 0, "hooks", 0),
    ("hooks", "SessionStart", 0, "hooks", 0, "command"), ("hooks", "Stop", 0, "matcher"),
    ("statusLine",), ("statusLine", "command"), ("enabledMcpjsonServers",),
    ("enabledMcpjsonServers", 0), ("mcpServers",), ("mcpServers", "compactd"),
    ("mcpServers", "compactd", "args"), ("mcpServers", "other"),
]  # fmt: skip


def _placed(path: tuple[Any, ...], value: Any) -> Any:
    """``value`` at ``path`` in an otherwise minimal settings object."""
    for key in reversed(path):
        value = [value] if isinstance(key, int) else {key: value}
    return value


@settings(max_examples=SETTINGS_EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(st.sampled_from(_KEY_PATHS), _json, st.sampled_from(["settings", "mcp"]))
def test_settings_of_every_shape_install_or_refuse_in_one_line(
    key_path: tuple[Any, ...], value: Any, where: str
) -> None:
    import tempfile

    from compactd.agents.claude_code.cli import main as claude_code

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        project = root / "project"
        (project / ".claude").mkdir(parents=True)
        settings_file = project / ".claude" / "settings.json"
        mcp_file = project / ".mcp.json"
        target = settings_file if where == "settings" else mcp_file
        target.write_text(json.dumps(_placed(key_path, value)))
        before = {p: p.read_bytes() for p in (settings_file, mcp_file) if p.exists()}
        env = {"HOME": str(root), "CLAUDE_CONFIG_DIR": str(root / ".claude")}
        argv = ["install", "--scope", "project", "--project", str(project),
                "--data-dir", str(root / "data")]  # fmt: skip
        with _environ(env), _captured() as (out, err):
            code = claude_code(argv)
        event("installed" if code == 0 else "refused")
        if code == 0:
            with _environ(env), _captured():
                assert claude_code(["uninstall", *argv[1:]]) == 0
            after = {p: p.read_bytes() for p in (settings_file, mcp_file) if p.exists()}
            assert after == before  # round trip, byte for byte
        else:
            assert code == 1 and out.getvalue() == ""
            line = err.getvalue()
            assert line.count("\n") == 1 and line.startswith(f"compactd: {target}: "), line
            assert "nothing was changed" in line
            after = {p: p.read_bytes() for p in (settings_file, mcp_file) if p.exists()}
            assert after == before


class _environ:
    """``os.environ`` with ``changes`` for the block (the CLI reads Claude Code's folder and
    the data dir from it)."""

    def __init__(self, changes: dict[str, str]) -> None:
        self._changes = changes
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> None:
        for key, value in self._changes.items():
            self._saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc: object) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class _captured:
    """stdout and stderr of the block, as two StringIO."""

    def __enter__(self) -> tuple[Any, Any]:
        import io

        self._saved = (sys.stdout, sys.stderr)
        self.out, self.err = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = self.out, self.err
        return self.out, self.err

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self._saved


def test_error_messages_are_bounded_whatever_they_quote(wire: tuple[Wire, Path]) -> None:
    from compactd.core.outbound import ERROR_CHARS

    w, data = wire
    before = digest(data)
    big = "z" * 1_000_000
    key = "sk-ant-api03-" + "W4r" * 30
    requests = [
        (p.RECALL_SEARCH, {"sessionId": big, "query": "x"}),
        (p.RECALL_SEARCH, {"sessionId": "victim", "query": "x", "limit": 10**6}),
        (p.TOKENS_STATUS, {"sessionId": "nope-" + big}),
        ("no/such/" + big, {}),
        (p.SESSION_APPEND, {"sessionId": f"{key}-{big}", "entries": []}),
    ]
    for method, params in requests:
        answer = w.call(method, params)
        message = answer["error"]["message"]
        assert len(message) <= ERROR_CHARS + 40, (method[:30], len(message))
        assert key not in json.dumps(answer)
    assert digest(data) == before
