"""Fuzzing the live daemon: over 10,000 generated frames and params (wrong types, huge strings,
deep nesting, unicode edge cases, hostile paths). Every request must be answered, the daemon
must survive, and requests it rejects must leave the data dir exactly as it was.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactd import protocol as p
from tests.wire import Wire, digest

BATCH = 50
EXAMPLES = int(
    os.environ.get("FUZZ_EXAMPLES", "210")
)  # 210 x 50 = 10,500 invalid requests, plus the valid-but-odd ones below


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
