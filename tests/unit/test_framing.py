"""The frame reader: every byte sequence is either a message or an answered rejection."""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactd import protocol as p
from compactd.framing import FrameError, FrameReader


class Chunks:
    """A byte source that hands out the given chunks, then end of input."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    async def read(self, n: int) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if len(chunk) > n:
            self.chunks.insert(0, chunk[n:])
            chunk = chunk[:n]
        return chunk


def frame(body: bytes | str | dict[str, Any]) -> bytes:
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(i: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tokens/status", "params": {"sessionId": "s"}}


def read_all(chunks: list[bytes], limit: int = 1 << 20) -> tuple[list[Any], list[FrameError]]:
    got: list[Any] = []
    errors: list[FrameError] = []
    reader = FrameReader(Chunks(chunks), got.append, errors.append, lambda: limit)
    anyio.run(reader.run)
    return got, errors


def test_good_frames_back_to_back_and_split_anywhere() -> None:
    stream = b"".join(frame(request(i)) for i in range(5))
    for step in (1, 3, 7, 64, len(stream)):
        got, errors = read_all([stream[i : i + step] for i in range(0, len(stream), step)])
        assert [m["id"] for m in got] == [0, 1, 2, 3, 4]
        assert errors == []


@pytest.mark.parametrize(
    "bad",
    [
        b'{"jsonrpc": "2.0", "id": 7, "method": "x", "params": {"a": "\xff\xfe"}}',
        b'{"jsonrpc": "2.0", "id": 7, "method": "x", "params": {"\xc0\xaf": 1}}',
        b'{"jsonrpc": "2.0", "id": 7, "method": "x", "params": {"a": "\xed\xa0\x80"}}',
    ],
)
def test_invalid_utf8_is_a_parse_error_that_keeps_the_id(bad: bytes) -> None:
    got, errors = read_all([frame(bad), frame(request(8))])
    assert [e.code for e in errors] == [p.ErrorCode.PARSE_ERROR]
    assert errors[0].msg_id == 7
    assert "UTF-8" in errors[0].message
    assert [m["id"] for m in got] == [8]


def test_a_huge_length_is_answered_at_once_and_the_next_frame_is_found() -> None:
    stream = b"Content-Length: 999999999999999999\r\n\r\n" + frame(request(1))
    got, errors = read_all([stream], limit=1000)
    assert [e.code for e in errors] == [p.ErrorCode.FRAME_TOO_LARGE]
    assert [m["id"] for m in got] == [1]


def test_an_honest_oversized_body_is_skipped() -> None:
    big = frame(
        {"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": "Content-Length: 5" + "x" * 200}}
    )
    got, errors = read_all([big + frame(request(2))], limit=120)
    assert [e.code for e in errors] == [p.ErrorCode.FRAME_TOO_LARGE]
    assert [m["id"] for m in got] == [2]


def test_a_length_too_long_still_delivers_both_messages() -> None:
    first = json.dumps(request(1)).encode()
    second = frame(request(2))
    stream = b"Content-Length: %d\r\n\r\n" % (len(first) + 10) + first + second + frame(request(3))
    got, errors = read_all([stream])
    assert [m["id"] for m in got] == [1, 2, 3]
    assert errors == []


def test_a_length_too_short_costs_only_that_frame() -> None:
    first = json.dumps(request(1)).encode()
    stream = b"Content-Length: %d\r\n\r\n" % (len(first) - 5) + first + frame(request(2))
    got, errors = read_all([stream])
    assert [m["id"] for m in got] == [2]
    assert len(errors) == 1 and errors[0].code == p.ErrorCode.PARSE_ERROR


def test_a_body_without_header_is_answered_with_its_id() -> None:
    got, errors = read_all([json.dumps(request(5)).encode() + b"\r\n", frame(request(6))])
    assert [(e.code, e.msg_id) for e in errors] == [(p.ErrorCode.PARSE_ERROR, 5)]
    assert [m["id"] for m in got] == [6]


def test_garbage_sent_in_pieces_is_answered_each_time() -> None:
    pieces = [
        b"\x00\x01\x02\r\n\r\n",
        b"Content-Length: -1\r\n\r\n",
        b"\xff" * 100 + b"\r\n",
        b"ab\n",
    ]
    got, errors = read_all([*pieces, frame(request(1))])
    assert len(errors) == len(pieces)
    assert all(e.msg_id is None for e in errors)
    assert [m["id"] for m in got] == [1]


def test_batches_are_answered_item_by_item() -> None:
    batch = json.dumps([request(1), request(2), {"jsonrpc": "2.0", "method": "n"}])
    got, errors = read_all([frame(batch)])
    assert got == []
    assert [e.msg_id for e in errors] == [1, 2, None]
    assert {e.code for e in errors} == {p.ErrorCode.INVALID_REQUEST}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.integers(0, 400), st.sampled_from(["flip", "cut", "insert", "len"])),
        max_size=4,
    ),
    st.integers(1, 200),
)
def test_mutated_streams_never_raise_and_later_frames_get_through(
    mutations: list[tuple[int, str]], step: int
) -> None:
    stream = bytearray(b"".join(frame(request(i)) for i in range(4)))
    for at, how in mutations:
        at %= len(stream)
        if how == "flip":
            stream[at] ^= 0xFF
        elif how == "cut":
            del stream[at : at + 7]
        elif how == "insert":
            stream[at:at] = b"\xc0\xaf\r\n"
        else:
            stream[at:at] = b"Content-Length: 12\r\n\r\n"
    tail = frame(request(99))
    data = bytes(stream) + b"\r\n" + tail + tail
    got, errors = read_all([data[i : i + step] for i in range(0, len(data), step)])
    assert 99 in [m.get("id") for m in got if isinstance(m, dict)]
    assert all(isinstance(e, FrameError) for e in errors)


# -- split reads after a bad frame (issue 26) ------------------------------------------------------


def _body(i: int, rng: random.Random) -> bytes:
    """A valid request of varied shape and size (the text may look like header names)."""
    words = ["Content", "Length", "ab", "x: y", "Conte", "nt-Length: 5", "\\r\\n", "é", "ok"]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 12)))
    params = {"sessionId": f"s{i}", "text": text} if rng.random() < 0.8 else {}
    return json.dumps(
        {"jsonrpc": "2.0", "id": i, "method": "tokens/status", "params": params}
    ).encode()


def _bad_then_valid(rng: random.Random) -> tuple[str, bytes, int]:
    """A bad frame (or several) followed by a valid request; the valid request's id."""
    first = _body(1, rng)
    valid = frame(_body(2, rng))
    kind = rng.choice(["long", "short", "bare", "garbage", "batch", "json", "utf8", "header"])
    if kind == "long":  # a length that lies long, by a little or by more than the next frame
        lie = rng.choice([1, 2, 5, 10, 17, 40, len(valid) + 7])
        bad = b"Content-Length: %d\r\n\r\n" % (len(first) + lie) + first
    elif kind == "short":
        lie = rng.randint(1, min(30, len(first) - 1))
        bad = b"Content-Length: %d\r\n\r\n" % (len(first) - lie) + first
    elif kind == "bare":  # a message sent without its header
        bad = first + rng.choice([b"", b"\r\n", b"\n\n"])
    elif kind == "garbage":
        bad = rng.choice([b"hello world", b"ab: cd\r\n\r\n", b"\x00\xff\xfe", b"Conte", b"}}"])
    elif kind == "batch":
        bad = frame(b"[" + first + b"," + _body(3, rng) + b"]")
    elif kind == "json":
        bad = frame(first[: rng.randint(1, len(first) - 1)])
    elif kind == "utf8":
        bad = frame(first.replace(b"tokens", b"t\xffkens"))
    else:  # a header block with a bad line
        bad = b"Content-Length: %d\r\nX bad\r\n\r\n" % len(first) + first
    return kind, bad + valid, 2


async def _read_split(data: bytes, at: int) -> list[Any]:
    got: list[Any] = []
    reader = FrameReader(Chunks([data[:at], data[at:]]), got.append, lambda err: None)
    await reader.run()
    return got


def test_every_split_after_a_bad_frame_keeps_the_valid_request() -> None:
    """Each two-frame sequence is read in two pieces split at every byte: the valid request
    comes out exactly once, and nothing comes out twice."""
    rng = random.Random(26)
    failures: list[tuple[str, int, bytes]] = []

    async def main() -> None:
        for _ in range(200):
            kind, data, valid_id = _bad_then_valid(rng)
            for at in range(1, len(data) + 1):
                ids = [m["id"] for m in await _read_split(data, at)]
                if ids.count(valid_id) != 1 or len(ids) != len(set(ids)):
                    failures.append((kind, at, data))

    anyio.run(main)
    assert not failures, f"{len(failures)} splits lost or repeated a request: {failures[:3]}"


@pytest.mark.parametrize(("text", "value"), [("1.5", 1.5), ("7.0", 7.0), ("1e3", 1000.0)])
def test_a_float_id_is_echoed(text: str, value: float) -> None:
    """LSP ids are integers or strings, so the request is refused, but with its own id; and a
    parse error whose id can still be read carries it too."""
    ok = f'{{"jsonrpc": "2.0", "id": {text}, "method": "tokens/status", "params": {{}}}}'
    broken = f'{{"jsonrpc": "2.0", "id": {text}, "method": "tokens/status", "params": {{'
    got, errors = read_all([frame(ok), frame(broken), frame(request(3))])
    assert [m["id"] for m in got] == [3]
    assert [(e.code, e.msg_id) for e in errors] == [
        (p.ErrorCode.INVALID_REQUEST, value),
        (p.ErrorCode.PARSE_ERROR, value),
    ]
    assert all(type(e.msg_id) is float for e in errors)
