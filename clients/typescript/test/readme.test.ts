/**
 * The README's example, as a new user would run it: extracted from the ```ts block, compiled with
 * `tsc --strict` against the built package (linked as `node_modules/@compactd/client`), and run
 * with node, the `compactd` on PATH being the repository's daemon.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { it } from "node:test";

import { PACKAGE_DIR, PYTHON, tempDir } from "./helpers";

/** The first ```ts block of the README. */
export function readmeExample(): string {
  const readme = fs.readFileSync(path.join(PACKAGE_DIR, "README.md"), "utf8");
  const match = /```ts\n([\s\S]*?)```/.exec(readme);
  assert.ok(match, "the README has no ```ts block");
  return match[1]!;
}

it("runs the README's example against the real daemon", () => {
  const project = tempDir("readme");
  try {
    fs.mkdirSync(path.join(project, "node_modules", "@compactd"), { recursive: true });
    fs.symlinkSync(PACKAGE_DIR, path.join(project, "node_modules", "@compactd", "client"));
    fs.writeFileSync(path.join(project, "example.ts"), readmeExample());
    const tsc = path.join(PACKAGE_DIR, "node_modules", ".bin", "tsc");
    execFileSync(tsc, ["--strict", "--target", "es2022", "--module", "node16", "--types", "node", "--typeRoots", path.join(PACKAGE_DIR, "node_modules", "@types"), "example.ts"], {
      cwd: project,
      encoding: "utf8",
    });
    const output = execFileSync(process.execPath, ["example.js"], {
      cwd: project,
      encoding: "utf8",
      // `compactd` resolves to the daemon beside the test interpreter; its sessions go to the
      // temporary project, not the user's data dir.
      env: { ...process.env, PATH: `${path.dirname(PYTHON)}${path.delimiter}${process.env["PATH"]}`, XDG_DATA_HOME: project },
    });
    const [tokens, compacted] = output.trim().split("\n");
    assert.match(tokens ?? "", /^\d+ tokens, 100% left$/);
    assert.equal(compacted, "compacted: false (belowThreshold)");
  } finally {
    fs.rmSync(project, { recursive: true, force: true });
  }
});
