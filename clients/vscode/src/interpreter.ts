/**
 * The Python interpreter the Python extension has selected for the workspace: the last place
 * `locate.ts` looks for compactd (`python -m compactd`). Kept apart from `locate.ts`, which has
 * no VS Code import so that plain Node tests drive it.
 */

import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";

export const PYTHON_EXTENSION = "ms-python.python";

/** The selected interpreter's executable, or undefined when the Python extension is not installed or has none. */
export async function selectedInterpreter(): Promise<string | undefined> {
  if (!vscode.extensions.getExtension(PYTHON_EXTENSION)) {
    return undefined;
  }
  const api = await PythonExtension.api();
  const folder = vscode.workspace.workspaceFolders?.[0]?.uri;
  const environment = await api.environments.resolveEnvironment(api.environments.getActiveEnvironmentPath(folder));
  return environment?.executable.uri?.fsPath;
}
