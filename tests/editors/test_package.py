"""What `npm run package` builds: a vsix with the extension's code, its runtime dependencies,
the manifest (with repository and licence), README and LICENSE, and nothing else (no sources,
tests, source maps or editor settings such as .vscode/launch.json)."""

from __future__ import annotations

import json
import zipfile

import pytest

from tests.editors.test_vscode import VSIX


def test_the_vsix_holds_only_what_runs() -> None:
    if not VSIX.exists():
        pytest.fail(f"{VSIX} is missing: build it with `make -C clients/vscode package`")
    with zipfile.ZipFile(VSIX) as vsix:
        names = vsix.namelist()
        manifest = json.loads(vsix.read("extension/package.json"))
    files = [n.removeprefix("extension/") for n in names if n.startswith("extension/")]
    assert "out/src/extension.js" in files and "LICENSE.txt" in files and "readme.md" in files
    assert manifest["repository"]["url"].startswith("https://") and manifest["license"] == "MIT"
    assert "package" in manifest["scripts"]
    # Runtime dependencies only, and of them only code and licences.
    deps = {
        n.split("/")[1] if not n.split("/")[1].startswith("@") else "/".join(n.split("/")[1:3])
        for n in files
        if n.startswith("node_modules/")
    }
    # @compactd/client: the protocol client the extension is built on (clients/typescript).
    expected = {"@compactd/client", "vscode-jsonrpc", "which", "isexe", "@vscode/python-extension"}
    assert deps == expected, deps
    stray = [
        n
        for n in files
        if n.startswith((".vscode/", "src/", "test/", "out/test/", "media/"))
        or n.endswith((".map", ".ts", ".vsix"))
        or n in ("tsconfig.json", "Makefile", "package-lock.json")
    ]
    assert stray == [], stray
