"""``protocol_gen --check`` fails when a generated client file drifts from the contract.

The files are rendered into a temporary copy of the repository's layout, so the check runs on
real output without touching the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactd import protocol_gen


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[Path, str]:
    """Every generated file written under ``tmp_path``, as ``render()`` makes it."""
    for name in ("SCHEMA_PATH", "TS_PATH", "TS_CLIENT_DIR", "PY_CLIENT_DIR"):
        moved = tmp_path / getattr(protocol_gen, name).relative_to(protocol_gen.ROOT)
        monkeypatch.setattr(protocol_gen, name, moved)
    monkeypatch.setattr(protocol_gen, "ROOT", tmp_path)
    rendered = protocol_gen.render()
    assert all(path.is_relative_to(tmp_path) for path in rendered)
    assert protocol_gen.main([]) == 0
    return rendered


@pytest.mark.parametrize(
    "name", ["protocol.ts", "methods.ts", "protocol.py", "_methods.py", "compactd.d.ts"]
)
def test_check_fails_when_a_generated_file_drifts(
    layout: dict[Path, str], name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert protocol_gen.main(["--check"]) == 0
    (path,) = [p for p in layout if p.name == name]
    path.write_text(layout[path].replace("ession", "essions", 1), encoding="utf-8")
    assert protocol_gen.main(["--check"]) == 1
    assert str(path.relative_to(protocol_gen.ROOT)) in capsys.readouterr().err


def test_the_generated_clients_cover_every_method(layout: dict[Path, str]) -> None:
    """Each request has a typed function in both clients and each notification a subscription."""
    by_name = {p.name: text for p, text in layout.items()}
    for method in protocol_gen.p.REQUESTS:
        assert f'this.request("{method}", params, options)' in by_name["methods.ts"], method
        assert f'self.call("{method}", params,' in by_name["_methods.py"], method
    for method in protocol_gen.p.NOTIFICATIONS:
        assert f'this.listen("{method}", listener)' in by_name["methods.ts"], method
        assert f'Subscription(self, "{method}",' in by_name["_methods.py"], method
