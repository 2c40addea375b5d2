// compactd's hook module for Claude Code: its answer to session.compact
// (docs/claude-code.md#the-plugin in compactd's repository).
//
// At every compaction, /compact and the automatic one alike, it asks compactd: the command
// `compactd claude-code session-compact`, with the event on stdin. compactd answers with its own
// compaction when it has a summary ready (prepared in the background, or its offline summary):
// the module returns those rows and Claude Code makes no summarization request. Otherwise
// compactd says "next": the module lets Claude Code compact (steered by compactd's
// instructions), then asks again with Claude Code's answer, and returns Claude Code's rows with
// compactd's row of what its summary left out.
//
// Whatever goes wrong on compactd's side (not installed, killed, too slow, an answer that is not
// rows), Claude Code compacts by itself: the module never vetoes a compaction unless compactd was
// told to block them, and never gives back one of the event's rows by its handle.

// How long compactd may take, in ms. Waiting on a process does not count against the 10 s a
// hook has of its own time. The first answer is read from what is ready; the second runs the
// survival ledger over the span after Claude Code's own summary.
const FIRST_TIMEOUT_MS = 10000;
const SECOND_TIMEOUT_MS = 20000;

function answerOf(run) {
  if (run.exitCode !== 0) {
    const why = String(run.stderr || "").trim().split("\n").pop() || "no message";
    throw new Error(`exited with status ${run.exitCode} (${why})`);
  }
  if (run.isStdoutTruncated) throw new Error("its answer was cut short");
  const answer = JSON.parse(run.stdout);
  if (answer === null || typeof answer !== "object") throw new Error("its answer is not a JSON object");
  return answer;
}

function isRow(row) {
  return (
    row !== null &&
    typeof row === "object" &&
    (row.role === "user" || row.role === "assistant") &&
    typeof row.text === "string" &&
    Array.isArray(row.toolUses)
  );
}

function rowsOf(answer) {
  const rows = answer.messages;
  return Array.isArray(rows) && rows.length > 0 && rows.every(isRow) ? rows : undefined;
}

// New rows only: a row given back by its handle keeps the old chain in the transcript.
function fresh(rows) {
  return rows.map(({ role, text, toolUses, toolResults }) =>
    toolResults === undefined ? { role, text, toolUses } : { role, text, toolUses, toolResults },
  );
}

export function register(on) {
  on("session.compact", async ($, e, next) => {
    // COMPACTD_COMMAND names the compactd program where it is not on PATH (as for the hooks).
    let command = "compactd";
    try {
      const configured = await $.env.get("COMPACTD_COMMAND");
      if (typeof configured === "string" && configured.trim() !== "") command = configured.trim();
    } catch (err) {
      $.ui.log(`compactd: COMPACTD_COMMAND cannot be read (${err}); running compactd from PATH`, { to: "debug" });
    }
    const argv = [command, "claude-code", "session-compact"];
    let sessionId = "";
    let transcriptPath = "";
    try {
      sessionId = String(await $.session.id());
      const info = await $.session.info();
      if (info !== null && typeof info === "object" && typeof info.transcriptPath === "string") {
        transcriptPath = info.transcriptPath;
      }
    } catch (err) {
      $.ui.log(`compactd: the session's id or transcript is unknown (${err}); asking without them`, { to: "debug" });
    }
    const request = { event: e, sessionId, transcriptPath };

    let first;
    try {
      const run = await $.process.run(argv, { stdin: JSON.stringify(request), timeoutMs: FIRST_TIMEOUT_MS });
      first = answerOf(run);
    } catch (err) {
      $.ui.log(`compactd: ${command} could not answer (${err}); Claude Code compacts by itself`, { to: "debug" });
      return next(e);
    }
    if (typeof first.skip === "string" && first.skip !== "") return { skip: first.skip };
    const rows = rowsOf(first);
    if (rows !== undefined) return { messages: fresh(rows) };
    if (typeof first.next !== "string") {
      $.ui.log(`compactd: ${command} answered neither rows nor next; Claude Code compacts by itself`, { to: "debug" });
      return next(e);
    }

    $.ui.log(`compactd: Claude Code compacts, compactd adds to it: ${first.next}`, { to: "debug" });
    const steer = typeof first.instructions === "string" ? first.instructions.trim() : "";
    const own = await next(steer === "" ? e : { ...e, instructions: e.instructions ? `${e.instructions}\n\n${steer}` : steer });
    if (own === null || typeof own !== "object" || own.skip !== undefined || !Array.isArray(own.messages)) return own;
    try {
      const run = await $.process.run(argv, {
        stdin: JSON.stringify({ ...request, claudeCode: own }),
        timeoutMs: SECOND_TIMEOUT_MS,
      });
      const added = rowsOf(answerOf(run));
      if (added === undefined || JSON.stringify(added) === JSON.stringify(own.messages)) return own;
      return own.usage === undefined ? { messages: fresh(added) } : { messages: fresh(added), usage: own.usage };
    } catch (err) {
      $.ui.log(`compactd: ${command} could not add to Claude Code's summary (${err})`, { to: "debug" });
      return own;
    }
  });
}
