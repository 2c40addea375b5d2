/**
 * "Install into Claude Code for this workspace": the command line built from the daemon's, and a
 * real run of it with the repository's compactd in a temporary workspace, which must leave the
 * project's Claude Code settings with compactd's plugin enabled from its copy in the project
 * (docs/claude-code.md#install).
 */

import assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, it } from "node:test";

import { FakeVscode } from "./fake-vscode";
import { PYTHON, REPO_ROOT, daemonCommand, tempDir } from "./helpers";

const fake = new FakeVscode();
fake.install();
// Loaded after install() so its `import * as vscode` gets the stand-in.
// eslint-disable-next-line @typescript-eslint/no-require-imports
const { installCommand, runInstall } = require("../src/install") as typeof import("../src/install");

describe("install into Claude Code", () => {
  it("builds the install command from the daemon's", () => {
    assert.deepEqual(installCommand(["/bin/compactd", "serve"], "/w"), [
      "/bin/compactd",
      "claude-code",
      "install",
      "--scope",
      "project",
      "--project",
      "/w",
    ]);
    assert.deepEqual(installCommand([PYTHON, "-m", "compactd", "serve"], "/w").slice(0, 4), [PYTHON, "-m", "compactd", "claude-code"]);
  });

  it("installs compactd's plugin into the workspace, and says what changed", async () => {
    const workspace = tempDir("workspace");
    // No claude program on PATH here: install writes the keys Claude Code's plugin commands write.
    const bare = (process.env.PATH ?? "").split(path.delimiter).filter((d) => d && !fs.existsSync(path.join(d, "claude")));
    const env = { ...process.env, PATH: bare.join(path.delimiter), XDG_DATA_HOME: tempDir("data"), PYTHONPATH: REPO_ROOT };
    const outcome = await runInstall(installCommand(daemonCommand(), workspace), workspace, env);
    assert.ok(outcome.ok, outcome.output);
    assert.match(outcome.output, /changed: .*plugin compactd@compactd enabled/);
    const settings = JSON.parse(fs.readFileSync(path.join(workspace, ".claude", "settings.json"), "utf8"));
    assert.deepEqual(settings.enabledPlugins, { "compactd@compactd": true });
    assert.equal(settings.extraKnownMarketplaces.compactd.source.path, "./.claude/compactd-plugin");
    assert.ok(fs.existsSync(path.join(workspace, ".claude", "compactd-plugin", "hooks", "register.js")));
    const again = await runInstall(installCommand(daemonCommand(), workspace), workspace, env);
    assert.match(again.output, /nothing to change/);
  });

  it("reports a settings file it cannot parse, and changes nothing", async () => {
    const workspace = tempDir("workspace");
    fs.mkdirSync(path.join(workspace, ".claude"));
    fs.writeFileSync(path.join(workspace, ".claude", "settings.json"), "{ not json");
    const env = { ...process.env, XDG_DATA_HOME: tempDir("data"), PYTHONPATH: REPO_ROOT };
    const outcome = await runInstall(installCommand(daemonCommand(), workspace), workspace, env);
    assert.equal(outcome.ok, false);
    assert.match(outcome.output, /settings\.json is not valid JSON.*nothing was changed/);
    assert.equal(fs.existsSync(path.join(workspace, ".claude", "compactd-plugin")), false);
  });
});
