"""What leaves compactd (core/outbound.py): keys redacted by value and by shape, echoes bounded;
and reading what another program hands over without hanging (services/safe_io.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from compactd.core import outbound as o
from compactd.services.safe_io import (
    Deadline,
    InputError,
    NotRegularFile,
    is_regular_file,
    open_regular,
    read_input,
)


@pytest.fixture(autouse=True)
def _no_secrets() -> Iterator[None]:
    o.forget_secrets()
    yield
    o.forget_secrets()


@pytest.mark.parametrize(
    "text,kept",
    [
        ("invalid x-api-key: sk-ant-api03-AbCdEfGh1234567890_-xyz", "invalid x-api-key: "),
        ("Authorization: Bearer abcdefghijklmnop.qrs", "Authorization: Bearer "),
        ('{"api_key": "0123456789abcdef"}', '{"api_key": "'),
        ("apiKey=zzzzzzzzzzzz&x=1", "apiKey="),
        ("key AIzaSyA-1234567890abcdefghijklmnopqrstu in the URL", "key "),
        ("sk-proj-" + "a" * 40, ""),
        ("token ghp_" + "A" * 36, "token "),
        ("slack xoxb-123456789012-abcdef", "slack "),
        ("aws AKIAABCDEFGHIJKLMNOP here", "aws "),
    ],
)
def test_key_shapes_are_redacted(text: str, kept: str) -> None:
    out = o.redact(text)
    assert o.REDACTED in out and out.startswith(kept), out


@pytest.mark.parametrize(
    "text",
    ["a plain sentence", "sk-short", "uuid 11111111-aaaa-4bbb-8ccc-000000000001", "Bearer x"],
)
def test_other_text_is_left_alone(text: str) -> None:
    assert o.redact(text) == text


def test_known_secrets_by_value_escaped_and_in_bytes() -> None:
    secret = 'my"gateway\\key-123'
    o.remember_secret(secret)
    o.remember_secret("short")  # under MIN_SECRET_CHARS: not a key
    assert o.redact(f"it said {secret} twice {secret}") == "it said [redacted] twice [redacted]"
    frame = b'{"message": "my\\"gateway\\\\key-123"}'
    assert o.redact_bytes(frame) == b'{"message": "[redacted]"}'
    assert o.redact("short words") == "short words"
    env = {"ANTHROPIC_API_KEY": "a" * 20, "GEMINI_API_KEY": "g" * 20, "HOME": "/root"}
    assert sorted(o.secrets_from_env(env)) == ["a" * 20, "g" * 20]


def test_echoes_and_upstream_texts_are_bounded() -> None:
    long = "x" * 1_000_000
    shown = o.echo(long)
    assert len(shown) < o.ECHO_CHARS + 40 and "(1,000,000 characters)" in shown
    assert o.echo("recall:abc", quote=False) == "recall:abc"
    body = "error " + "y" * 5_000 + " sk-ant-" + "k" * 30
    cut = o.upstream(body)
    assert len(cut) < o.UPSTREAM_CHARS + 40 and "sk-ant-" not in cut
    # Redacted before it is cut: a key on the edge leaves nothing of itself.
    edge = "e" * (o.UPSTREAM_CHARS - 10) + " sk-ant-" + "k" * 40
    assert "kkkk" not in o.upstream(edge)


def test_only_regular_files_open_and_never_block(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    for path, what in ((fifo, "a FIFO"), (folder, "a directory"), (Path("/dev/zero"), "a device")):
        with pytest.raises(NotRegularFile) as refused:
            open_regular(path)
        assert refused.value.what.startswith(what) and not is_regular_file(path)
    regular = tmp_path / "f"
    regular.write_text("x")
    os.close(open_regular(regular))
    assert is_regular_file(regular) and not is_regular_file("a\x00b")
    with pytest.raises(OSError, match="NUL"):
        open_regular("a\x00b")


def test_read_input_ends_at_eof_at_a_whole_input_or_at_its_deadline() -> None:
    opened: list[int] = []

    def pipe(data: bytes, *, close: bool) -> int:
        read, write = os.pipe()
        os.write(write, data)
        opened.extend([read] if close else [read, write])  # the write end left open
        if close:
            os.close(write)
        return read

    def whole(data: bytes) -> bool:
        return data.endswith(b"}")

    try:
        assert read_input(Deadline(5), 100, whole, fd=pipe(b"{}", close=True)) == b"{}"
        assert read_input(Deadline(5), 100, whole, fd=pipe(b"{}", close=False)) == b"{}"
        with pytest.raises(InputError, match="not closed within"):
            read_input(Deadline(0.2), 100, whole, fd=pipe(b'{"a"', close=False))
        with pytest.raises(InputError, match="more than 10 bytes"):
            read_input(Deadline(5), 10, fd=pipe(b"x" * 20, close=True))
        opened.append(os.open("/dev/zero", os.O_RDONLY))
        with pytest.raises(InputError, match="binary"):
            read_input(Deadline(5), 10**6, fd=opened[-1])
    finally:
        for fd in opened:
            os.close(fd)
