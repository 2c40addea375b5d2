/**
 * Finding the daemon to start, the way extensions for Python tools do it (Microsoft's template
 * for them, ruff's extension): the `compactd.serverCommand` setting when it is set; otherwise the
 * `compactd` console script on PATH; otherwise the interpreter selected in the Python extension,
 * when compactd is installed there (`python -m compactd serve`). No VS Code import: the caller
 * passes the setting and a way to ask for the interpreter, so plain Node tests drive it.
 */

import { execFile } from "node:child_process";
import which from "which";

import { DEFAULT_SERVER_COMMAND, lastLine } from "./core";

/** Where a daemon command came from, in the order they are tried. */
export type ServerSource = "setting" | "PATH" | "Python interpreter";

export interface LocatedServer {
  /** argv that starts the daemon. */
  command: string[];
  source: ServerSource;
  /** What was found, for the output channel: the setting, the script's path, the interpreter. */
  detail: string;
}

export interface LocateInputs {
  /** The `compactd.serverCommand` setting; empty or undefined means "find it". */
  setting: readonly string[] | undefined;
  /** The PATH to search; default: this process's. */
  path?: string;
  /** Where the daemon will run: `python -m compactd` is tried from there too. */
  cwd?: string;
  /** The Python extension's interpreter for the workspace; undefined when there is none. */
  interpreter: () => Promise<string | undefined>;
  /** Receives one line per candidate tried and why it was or was not used. */
  log: (line: string) => void;
}

/**
 * How long `python -m compactd --version` may take. A cold interpreter importing compactd takes
 * well under a second; a slow network drive or a first-run bytecode compile takes longer.
 */
const PROBE_TIMEOUT_MS = 15_000;

/** The first daemon command that should work, or undefined when none was found. */
export async function locateServer(inputs: LocateInputs): Promise<LocatedServer | undefined> {
  const { log } = inputs;
  if (inputs.setting && inputs.setting.length > 0) {
    return { command: [...inputs.setting], source: "setting", detail: inputs.setting.join(" ") };
  }
  const [name, ...args] = DEFAULT_SERVER_COMMAND as [string, ...string[]];
  const script = await which(name, { nothrow: true, ...(inputs.path !== undefined ? { path: inputs.path } : {}) });
  if (script) {
    return { command: [script, ...args], source: "PATH", detail: script };
  }
  log(`'${name}' is not on PATH`);
  let python: string | undefined;
  try {
    python = await inputs.interpreter();
  } catch (err) {
    log(`could not ask the Python extension for its interpreter: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (!python) {
    log("no Python interpreter is selected in the Python extension (or it is not installed)");
    return undefined;
  }
  const probe = await compactdVersion(python, inputs.cwd);
  if (!probe.ok) {
    log(`the selected Python interpreter ${python} cannot run compactd: ${probe.reason}`);
    return undefined;
  }
  return {
    command: [python, "-m", "compactd", ...args],
    source: "Python interpreter",
    detail: `${python} (${probe.version})`,
  };
}

type Probe = { ok: true; version: string } | { ok: false; reason: string };

/** Ask `python -m compactd --version`; says why not when compactd is not installed there. */
export function compactdVersion(python: string, cwd?: string): Promise<Probe> {
  return new Promise((resolve) => {
    const options = { cwd, timeout: PROBE_TIMEOUT_MS, windowsHide: true };
    execFile(python, ["-m", "compactd", "--version"], options, (err, stdout, stderr) => {
      if (err) {
        resolve({ ok: false, reason: lastLine(`${stderr}`) ?? err.message });
      } else {
        resolve({ ok: true, version: `${stdout}`.trim() });
      }
    });
  });
}
