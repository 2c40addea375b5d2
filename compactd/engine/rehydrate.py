"""Rehydration after a full or partial compaction, and on demand (``attachments/rehydrate``).

``gather`` reads what would be re-injected and ``Rehydration.fit`` returns the attachment entries (Claude Code's attachment entry
shape, as dicts, ``parentUuid`` left null for the writer to link) that re-inject the agent's
working set after a compaction (docs/rehydration.md): the most recently read files re-read from
disk, the todo list, the plan file and plan mode, invoked skills, background agents still
running and the announcements the client supplied as extras (the transcript's own are not
repeated: the main loop announces them again). ``kept`` are the records a partial compaction
keeps verbatim: files read in them are not re-attached. All of it fits the room the view budget
leaves (``limit_tokens``, docs/compaction.md#survival-ledger).

The facts come from the current context (``core.rehydrate.scan_context``) and the session's
read-file state; disk reads happen in a worker thread, confined to the session's roots (plan
files may also live in Claude Code's plans directory, user skills in its skills directory);
budgets and order are decided by the pure ``core.rehydrate.fit_attachments``. The extras a
client supplies are the rehydration's per-session state, a feature (``ClientExtras``,
docs/engine.md#features) that adds them to every snapshot; ``extras_of`` reads them.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from compactd import protocol as p
from compactd.core import constants as c
from compactd.core import rehydrate as rh
from compactd.core.ledger import SUMMARY_SHARE, view_budget
from compactd.engine.features import Feature, feature_of
from compactd.services import fs
from compactd.transcript.model import Record, transcript_timestamp

if TYPE_CHECKING:
    from compactd.engine.runtime import Runtime
    from compactd.engine.session import Session
    from compactd.engine.snapshot import Snapshot

# A skill name that can safely become a directory name.
_SKILL_NAME_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ClientExtras(Feature["Session"]):
    """What the client told ``attachments/rehydrate`` to re-inject besides what compactd finds
    (announcements, plan file), remembered for the session's later compactions."""

    def __init__(self) -> None:
        self.extras: p.RehydrationExtras | None = None

    def on_snapshot(self, snap: Snapshot) -> Snapshot:
        return replace(snap, extras=self.extras)


def extras_of(session: Session) -> p.RehydrationExtras | None:
    """The extras the client last supplied for ``session`` (None: none, or the feature is
    not registered)."""
    state = feature_of(session, ClientExtras)
    return state.extras if state is not None else None


def claude_config_dir(runtime: Runtime) -> Path:
    raw = runtime.env.get(c.ENV_CLAUDE_CONFIG_DIR) or c.DEFAULT_CLAUDE_CONFIG_DIR
    return Path(raw).expanduser()


@dataclass(frozen=True, slots=True)
class Rehydration:
    """What a compaction would re-inject, read once (disk included) and fitted to any budget.

    A compaction plan keeps it (docs/engine.md#plan): the disk is read when the plan is made,
    and carrying the plan out only fits the attachments to the room its summary leaves.
    """

    session_id: str
    inputs: rh.RehydrationInputs

    def fit(self, limit_tokens: int | None) -> list[dict[str, Any]]:
        """The attachment entries within ``limit_tokens`` raw tokens (pure, cheap)."""
        now = transcript_timestamp()
        return [
            rh.attachment_entry(payload, str(uuid.uuid4()), now, self.session_id)
            for payload in rh.fit_attachments(self.inputs, limit_tokens, rh.Budgets())
        ]


async def gather(runtime: Runtime, snap: Snapshot, kept: Sequence[Record]) -> Rehydration:
    """What a compaction of ``snap`` that keeps ``kept`` would re-inject: the facts of the
    snapshot's context and read-file state, with the files read from disk (in a worker thread).
    """
    return await _gather(runtime, snap, kept, snap.extras)


async def rehydrate_now(
    runtime: Runtime, session: Session, extras: p.RehydrationExtras | None
) -> list[dict[str, Any]]:
    """``attachments/rehydrate``: what a full compaction now would re-inject, within the part
    of the view budget the summary leaves at least.

    ``extras`` (validated here) are remembered for the session's later compactions (by
    ``ClientExtras``, when the wiring registered it).
    """
    if extras is not None:
        for i, item in enumerate(extras.announcements or []):
            kind = item.get("type")
            if not isinstance(kind, str) or not kind:
                raise p.CompactdError(
                    p.ErrorCode.INVALID_PARAMS,
                    f"extras.announcements[{i}] needs a string 'type' (an attachment payload "
                    'such as {"type": "deferred_tools_delta", ...})',
                )
        if extras.plan_file_path is not None and (
            not extras.plan_file_path or "\x00" in extras.plan_file_path
        ):
            raise p.CompactdError(
                p.ErrorCode.INVALID_PARAMS, "extras.planFilePath must be a non-empty path"
            )
        state = feature_of(session, ClientExtras)
        if state is not None:
            state.extras = extras
    snap = await runtime.snapshot(session)
    # The room a summary that keeps to its share leaves.
    budget = view_budget(snap.status.effective_window)
    room = budget.raw_tokens - int(budget.raw_tokens * SUMMARY_SHARE)
    # ``extras`` apply to this answer even where no feature remembers them.
    wanted = extras if extras is not None else snap.extras
    return (await _gather(runtime, snap, (), wanted)).fit(room)


@dataclass(frozen=True, slots=True)
class _DiskFacts:
    files: list[rh.FileSnapshot | rh.FileNotice]
    plan_content: str | None
    skill_texts: dict[str, tuple[str, str]]  # name -> (content, path)


async def _gather(
    runtime: Runtime,
    snap: Snapshot,
    kept: Sequence[Record],
    extras: p.RehydrationExtras | None,
) -> Rehydration:
    cwd = snap.meta.cwd
    config = claude_config_dir(runtime)
    plan_dir = str(config / "plans")
    facts = rh.scan_context(list(snap.context), cwd, plan_dirs=[plan_dir])
    plan_path = facts.plan.path
    plan_mode = facts.plan.mode
    if extras is not None:
        plan_path = extras.plan_file_path or plan_path
        plan_mode = extras.plan_mode if extras.plan_mode is not None else plan_mode
    if plan_path is not None:
        plan_path = rh.normalize_path(plan_path, cwd)
    budgets = rh.Budgets()
    candidates = rh.select_files(
        list(snap.file_candidates),
        exclude_paths=rh.read_paths(kept, cwd),
        plan_paths=[plan_path] if plan_path else [],
        plan_dirs=[plan_dir],
        memory_names=runtime.memory_names,
    )
    wanted_skills = [s.name for s in facts.skills if not s.content]
    disk = await anyio.to_thread.run_sync(
        _read_disk,
        candidates,
        cwd,
        runtime.roots_of(snap.meta.cwd),
        budgets.max_files,
        plan_path,
        Path(plan_dir),
        wanted_skills,
        config / "skills",
    )
    skills = []
    for ref in facts.skills:
        if ref.content:
            skills.append(rh.SkillSnapshot(name=ref.name, content=ref.content, path=ref.path))
        elif ref.name in disk.skill_texts:
            text, where = disk.skill_texts[ref.name]
            skills.append(rh.SkillSnapshot(name=ref.name, content=text, path=where))
    # The transcript's own listings are announced again by the main loop; only what the client
    # asked for is re-injected.
    announcements = [dict(a) for a in (extras.announcements or [])] if extras is not None else []
    plan = None
    if plan_path is not None or plan_mode:
        plan = rh.PlanSnapshot(path=plan_path or "", content=disk.plan_content, mode=plan_mode)
    inputs = rh.RehydrationInputs(
        files=disk.files,
        todos=facts.todos,
        plan=plan,
        skills=skills,
        agents=facts.agents,
        announcements=announcements,
        is_subagent=snap.meta.agent_kind == "subagent",
    )
    return Rehydration(snap.session_id, inputs)


def _read_disk(
    candidates: list[rh.FileCandidate],
    cwd: str,
    roots: list[str],
    max_files: int,
    plan_path: str | None,
    plan_dir: Path,
    skills: list[str],
    user_skills: Path,
) -> _DiskFacts:
    """Blocking: read the candidates in order until ``max_files`` take a slot, the plan and
    skill files. Missing files and files outside the roots are passed over."""
    resolved_roots = fs.resolve_roots(cwd, roots)
    out: list[rh.FileSnapshot | rh.FileNotice] = []
    seen: set[Path] = set()
    for cand in candidates:
        if len(out) >= max_files:
            break
        try:
            real = fs.confine(cand.path, cwd, resolved_roots)
        except p.CompactdError:
            continue
        if real in seen:
            continue
        seen.add(real)
        got = fs.read_file(real)
        if got is None:
            continue
        shown = rh.display_path(cand.path, cwd)
        if got.text is None:
            out.append(rh.FileNotice(path=cand.path, display_path=shown, reason=got.reason or ""))
            continue
        text, start, total = fs.slice_lines(got.text, cand.offset, cand.limit)
        out.append(
            rh.FileSnapshot(
                path=cand.path,
                display_path=shown,
                content=text,
                start_line=start,
                total_lines=total,
            )
        )
    plan_content = None
    if plan_path is not None:
        plan_content = _read_confined(plan_path, cwd, [*resolved_roots, *_resolved(plan_dir)])
    texts: dict[str, tuple[str, str]] = {}
    project_skills = Path(cwd) / ".claude" / "skills"
    for name in skills:
        if not _SKILL_NAME_RE.match(name):
            continue
        for base, allowed in (
            (project_skills, resolved_roots),
            (user_skills, _resolved(user_skills)),
        ):
            where = str(base / name / "SKILL.md")
            skill_text = _read_confined(where, cwd, allowed)
            if skill_text is not None:
                texts[name] = (skill_text, where)
                break
    return _DiskFacts(files=out, plan_content=plan_content, skill_texts=texts)


def _resolved(path: Path) -> list[Path]:
    try:
        return [path.resolve()]
    except (OSError, RuntimeError):
        return []


def _read_confined(path: str, cwd: str, roots: list[Path]) -> str | None:
    try:
        real = fs.confine(path, cwd, roots)
    except p.CompactdError:
        return None
    got = fs.read_file(real)
    return got.text if got is not None else None
