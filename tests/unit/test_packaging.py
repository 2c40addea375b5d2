"""compactd's build carries the Python client (pyproject.toml, ``[tool.setuptools.packages.find]``),
so what the client needs, compactd must ask for too; and the client stays a package of its own."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import ROOT


def _project(path: str) -> dict[str, object]:
    with (ROOT / path).open("rb") as fh:
        project = tomllib.load(fh)["project"]
    assert isinstance(project, dict)
    return project


def _names(requirements: object) -> set[str]:
    assert isinstance(requirements, list)
    return {re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() for r in requirements}


def test_compactd_asks_for_everything_the_client_it_carries_needs() -> None:
    daemon = _project("pyproject.toml")
    client = _project("clients/python/pyproject.toml")
    assert _names(client["dependencies"]) <= _names(daemon["dependencies"])
    # Carried, not depended on: no index has to find the client for compactd to install.
    assert "compactd-client" not in _names(daemon["dependencies"])
    assert client["name"] == "compactd-client"
    with (ROOT / "pyproject.toml").open("rb") as fh:
        find = tomllib.load(fh)["tool"]["setuptools"]["packages"]["find"]
    assert "clients/python" in find["where"] and "compactd_client" in find["include"]
