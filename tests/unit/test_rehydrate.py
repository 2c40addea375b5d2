"""Rehydration planning (compactd/core/rehydrate/): budgets, selection, transcript facts."""

from __future__ import annotations

from typing import Any

from compactd.core import rehydrate as rh
from compactd.transcript.model import Record, record_from_dict
from tests.helpers import assistant, numbering, tool_result, tool_use_block

# -- helpers ------------------------------------------------------------------------------------


def _lines(n: int, width: int = 40) -> str:
    return "".join(f"{i:05d} " + "x" * (width - 7) + "\n" for i in range(1, n + 1))


def _text_of_tokens(tokens: int) -> str:
    # 40 characters per line = 10 tokens per line.
    return _lines(tokens // 10)


def _snap(name: str, tokens: int) -> rh.FileSnapshot:
    text = _text_of_tokens(tokens)
    return rh.FileSnapshot(
        path=f"/w/{name}",
        display_path=name,
        content=text,
        start_line=1,
        total_lines=len(text.splitlines()),
    )


def _files(out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [a for a in out if a["type"] in ("file", "compact_file_reference")]


def _file_text(att: dict[str, Any]) -> str:
    text: str = att["content"]["file"]["content"]
    return text


_uid = numbering("e")


def _assistant(*uses: tuple[str, str, dict[str, Any]]) -> Record:
    blocks = [tool_use_block(tid, name, args) for tid, name, args in uses]
    return record_from_dict(assistant(blocks, uuid=_uid(), msg_id=_uid()))


def _result(tid: str, text: str = "ok", is_error: bool = False) -> Record:
    return record_from_dict(tool_result(tid, text, uuid=_uid(), is_error=is_error))


def _attachment(payload: dict[str, Any]) -> Record:
    return record_from_dict({"type": "attachment", "uuid": _uid(), "attachment": payload})


# -- estimation and truncation ------------------------------------------------------------------


def test_estimate_is_characters_over_four_rounded_half_up() -> None:
    # The one rule of core.tokens.chars_to_tokens (docs/thresholds.md#estimate).
    assert rh.estimate_text_tokens("") == 0
    assert rh.estimate_text_tokens("abcd") == 1
    assert rh.estimate_text_tokens("abcde") == 1
    assert rh.estimate_text_tokens("abcdef") == 2
    assert rh.estimate_text_tokens("x" * 4000) == 1000


def test_truncate_keeps_text_that_fits() -> None:
    text = _lines(10)
    out, cut = rh.truncate_to_tokens(text, 1000, lambda n: "[cut]")
    assert (out, cut) == (text, False)


def test_truncate_cuts_on_a_line_end_and_stays_within_the_cap() -> None:
    text = _lines(1000)  # 10,000 tokens
    out, cut = rh.truncate_to_tokens(text, 500, lambda n: f"\n[kept {n} lines]")
    assert cut
    assert rh.estimate_text_tokens(out) <= 500
    body, marker = out.rsplit("\n[kept ", 1)
    kept = int(marker.split()[0])
    assert body.endswith("x\n") and text.startswith(body)
    assert len(body.splitlines()) == kept


# -- files --------------------------------------------------------------------------------------


def test_each_file_is_capped_at_5000_tokens_with_a_marker() -> None:
    out = rh.plan_attachments(rh.RehydrationInputs(files=[_snap("big.py", 30_000)]))
    [att] = out
    assert att["type"] == "file" and att["truncated"] is True
    text = _file_text(att)
    assert rh.estimate_text_tokens(text) <= 5_000
    assert "content cut after line" in text and "of 3000" in text
    assert att["content"]["file"]["totalLines"] == 3000


def test_small_files_are_restored_whole() -> None:
    snap = _snap("small.py", 200)
    [att] = rh.plan_attachments(rh.RehydrationInputs(files=[snap]))
    assert _file_text(att) == snap.content and "truncated" not in att
    assert att["filename"] == "/w/small.py" and att["displayPath"] == "small.py"


def test_at_most_five_files_in_the_given_order() -> None:
    snaps = [_snap(f"f{i}.py", 100) for i in range(7)]
    out = rh.plan_attachments(rh.RehydrationInputs(files=snaps))
    assert [a["displayPath"] for a in _files(out)] == [f"f{i}.py" for i in range(5)]


def test_total_file_budget_truncates_then_references() -> None:
    budgets = rh.Budgets(file_tokens=5_000, files_total_tokens=12_000, min_partial_tokens=500)
    snaps = [_snap(f"f{i}.py", 6_000) for i in range(4)]
    out = _files(rh.plan_attachments(rh.RehydrationInputs(files=snaps), budgets))
    used = [rh.estimate_text_tokens(_file_text(a)) for a in out[:3]]
    assert all(u <= 5_000 for u in used[:2]) and used[0] > 4_500
    # The third gets what is left of the 12,000 (about 2,000), the fourth nothing.
    assert 1_500 < used[2] <= 12_000 - used[0] - used[1]
    assert sum(used) <= 12_000
    assert out[3]["type"] == "compact_file_reference" and out[3]["reason"] == "budget"


def test_a_file_that_fits_whole_is_kept_even_below_the_partial_minimum() -> None:
    budgets = rh.Budgets(file_tokens=5_000, files_total_tokens=5_300, min_partial_tokens=500)
    out = rh.plan_attachments(
        rh.RehydrationInputs(files=[_snap("a.py", 5_000), _snap("b.py", 200)]), budgets
    )
    assert [a["type"] for a in out] == ["file", "file"]
    assert "truncated" not in out[1]


def test_unshowable_files_become_references_and_take_a_slot() -> None:
    notice = rh.FileNotice(path="/w/logo.png", display_path="logo.png", reason="binary")
    snaps: list[rh.FileSnapshot | rh.FileNotice] = [notice] + [
        _snap(f"f{i}.py", 100) for i in range(6)
    ]
    out = rh.plan_attachments(rh.RehydrationInputs(files=snaps))
    assert out[0] == {
        "type": "compact_file_reference",
        "filename": "/w/logo.png",
        "displayPath": "logo.png",
        "reason": "binary",
    }
    assert len(_files(out)) == 5


# -- selection ----------------------------------------------------------------------------------


def test_select_orders_by_recency_and_skips_memory_plan_kept_and_stubs() -> None:
    cands = [
        rh.FileCandidate(path="/w/a.py", timestamp=1),
        rh.FileCandidate(path="/w/b.py", timestamp=5),
        rh.FileCandidate(path="/w/c.py", timestamp=3),
        rh.FileCandidate(path="/w/sub/CLAUDE.md", timestamp=9),
        rh.FileCandidate(path="/w/notes.md", timestamp=8, memory=True),
        rh.FileCandidate(path="/w/plan.md", timestamp=9),
        rh.FileCandidate(path="/home/u/.claude/plans/p.md", timestamp=9),
        rh.FileCandidate(path="/w/kept.py", timestamp=9),
        rh.FileCandidate(path="/w/same.py", timestamp=7, stub=True),
        rh.FileCandidate(path="/w/d.py", timestamp=3, seq=2),
    ]
    got = rh.select_files(
        cands,
        exclude_paths={"/w/kept.py"},
        plan_paths={"/w/plan.md"},
        plan_dirs=["/home/u/.claude/plans"],
    )
    assert [c.path for c in got] == ["/w/b.py", "/w/d.py", "/w/c.py", "/w/a.py"]


def test_select_uses_the_latest_read_of_a_path() -> None:
    cands = [
        rh.FileCandidate(path="/w/a.py", timestamp=1),
        rh.FileCandidate(path="/w/b.py", timestamp=2),
        rh.FileCandidate(path="/w/a.py", timestamp=3, offset=10, limit=5),
    ]
    got = rh.select_files(cands)
    assert [(c.path, c.offset) for c in got] == [("/w/a.py", 10), ("/w/b.py", None)]


def test_memory_names_are_configurable() -> None:
    cands = [rh.FileCandidate(path="/w/AGENTS.md", timestamp=1)]
    assert rh.select_files(cands) != []
    assert rh.select_files(cands, memory_names=["AGENTS.md"]) == []


def test_read_paths_of_kept_entries() -> None:
    kept = [
        _assistant(("t1", "Read", {"file_path": "src/a.py"}), ("t2", "Bash", {"command": "ls"})),
        _attachment({"type": "file", "filename": "/w/b.py"}),
        _assistant(("t3", "Edit", {"file_path": "/w/c.py"})),
    ]
    assert rh.read_paths(kept, "/w") == {"/w/src/a.py", "/w/b.py"}


# -- skills -------------------------------------------------------------------------------------


def test_skills_each_capped_and_total_capped_most_recent_first() -> None:
    skills = [
        rh.SkillSnapshot(name=f"s{i}", content=_text_of_tokens(6_000), path=f"/s/s{i}/SKILL.md")
        for i in range(6)
    ]
    [att] = rh.plan_attachments(rh.RehydrationInputs(skills=skills))
    assert att["type"] == "invoked_skills"
    names = [s["name"] for s in att["skills"]]
    assert names == ["s0", "s1", "s2", "s3", "s4"]  # the sixth no longer fits in 25,000
    sizes = [rh.estimate_text_tokens(s["content"]) for s in att["skills"]]
    assert all(s <= 5_000 for s in sizes) and sum(sizes) <= 25_000
    assert all(s["truncated"] for s in att["skills"])
    assert "skill instructions cut" in att["skills"][0]["content"]
    assert "/s/s0/SKILL.md" in att["skills"][0]["content"]


def test_skill_total_budget_truncates_the_last_one_that_fits() -> None:
    budgets = rh.Budgets(skill_tokens=5_000, skills_total_tokens=7_000)
    skills = [
        rh.SkillSnapshot(name="new", content=_text_of_tokens(4_000)),
        rh.SkillSnapshot(name="old", content=_text_of_tokens(4_000)),
        rh.SkillSnapshot(name="oldest", content=_text_of_tokens(4_000)),
    ]
    [att] = rh.plan_attachments(rh.RehydrationInputs(skills=skills), budgets)
    assert [s["name"] for s in att["skills"]] == ["new", "old"]
    assert "truncated" not in att["skills"][0] and att["skills"][1]["truncated"]
    total = sum(rh.estimate_text_tokens(s["content"]) for s in att["skills"])
    assert total <= 7_000


def test_skills_without_content_are_left_out() -> None:
    inputs = rh.RehydrationInputs(skills=[rh.SkillSnapshot(name="x", content="")])
    assert rh.plan_attachments(inputs) == []


# -- the other kinds and their order ------------------------------------------------------------


def test_order_and_shapes_of_all_kinds() -> None:
    inputs = rh.RehydrationInputs(
        files=[_snap("a.py", 100)],
        todos=[{"content": "ship", "status": "in_progress", "activeForm": "Shipping"}],
        plan=rh.PlanSnapshot(path="/p/plan.md", content="# Plan", mode=True),
        skills=[rh.SkillSnapshot(name="pdf", content="use pdftotext", path="/s/pdf/SKILL.md")],
        agents=[rh.RunningAgent(tool_use_id="toolu_1", description="scan", subagent_type="x")],
        announcements=[{"type": "deferred_tools_delta", "addedNames": ["A"]}],
    )
    out = rh.plan_attachments(inputs)
    assert [a["type"] for a in out] == [
        "file",
        "todo",
        "plan_file_reference",
        "plan_mode",
        "invoked_skills",
        "task_status",
        "deferred_tools_delta",
    ]
    assert out[1] == {
        "type": "todo",
        "content": inputs.todos,
        "itemCount": 1,
        "context": "post-compact",
    }
    assert out[2] == {
        "type": "plan_file_reference",
        "planFilePath": "/p/plan.md",
        "planContent": "# Plan",
    }
    assert out[3]["planExists"] is True and out[3]["isSubAgent"] is False
    assert out[5]["taskId"] == "toolu_1" and out[5]["status"] == "running"


def test_entries_carry_a_rendered_copy() -> None:
    [payload] = rh.plan_attachments(rh.RehydrationInputs(files=[_snap("a.py", 100)]))
    entry = rh.attachment_entry(payload, "u1", "2026-01-01T00:00:00Z", "s1")
    assert entry["type"] == "attachment" and entry["parentUuid"] is None
    assert entry["attachment"] is payload and entry["sessionId"] == "s1"
    rendered = entry["rendered"][0]["content"]
    assert rendered.startswith("<system-reminder>") and "a.py" in rendered
    assert _file_text(payload) in rendered


# -- facts from the transcript ------------------------------------------------------------------


def test_latest_todo_list_wins_and_an_empty_one_means_none() -> None:
    first = [{"content": "a", "status": "pending"}]
    second = [{"content": "b", "status": "completed"}]
    recs = [
        _assistant(("t1", "TodoWrite", {"todos": first})),
        _result("t1"),
        _assistant(("t2", "TodoWrite", {"todos": second})),
    ]
    assert rh.scan_context(recs, "/w").todos == second
    recs.append(_assistant(("t3", "TodoWrite", {"todos": []})))
    assert rh.scan_context(recs, "/w").todos is None
    carried = [_attachment({"type": "todo", "content": first, "itemCount": 1})]
    assert rh.scan_context(carried, "/w").todos == first


def test_running_agents_are_calls_without_a_result() -> None:
    recs = [
        _assistant(
            ("a1", "Task", {"description": "done one", "subagent_type": "general-purpose"}),
            ("a2", "Agent", {"description": "still going"}),
        ),
        _result("a1"),
        _attachment(
            {"type": "task_status", "taskId": "old", "status": "running", "description": "bg"}
        ),
        _attachment({"type": "task_status", "taskId": "gone", "status": "running"}),
        _attachment({"type": "task_status", "taskId": "gone", "status": "completed"}),
    ]
    agents = rh.scan_context(recs, "/w").agents
    assert [(a.tool_use_id, a.description) for a in agents] == [
        ("a2", "still going"),
        ("old", "bg"),
    ]


def test_plan_mode_and_plan_file() -> None:
    plans = "/home/u/.claude/plans"
    recs = [_assistant(("p1", "EnterPlanMode", {}))]
    assert rh.scan_context(recs, "/w", [plans]).plan == rh.PlanInfo(path=None, mode=True)
    recs.append(_assistant(("w1", "Write", {"file_path": f"{plans}/p.md", "content": "x"})))
    assert rh.scan_context(recs, "/w", [plans]).plan.path == f"{plans}/p.md"
    recs += [_assistant(("x1", "ExitPlanMode", {})), _result("x1", "rejected", is_error=True)]
    assert rh.scan_context(recs, "/w", [plans]).plan.mode is True
    recs += [_assistant(("x2", "ExitPlanMode", {})), _result("x2", "approved")]
    assert rh.scan_context(recs, "/w", [plans]).plan.mode is False
    recs.append(_attachment({"type": "plan_mode", "planFilePath": "/w/other.md"}))
    assert rh.scan_context(recs, "/w", [plans]).plan == rh.PlanInfo("/w/other.md", True)
    recs.append(record_from_dict({"type": "mode", "mode": "normal"}))
    assert rh.scan_context(recs, "/w", [plans]).plan.mode is False


def test_skills_from_calls_meta_messages_and_attachments() -> None:
    recs = [
        _attachment(
            {
                "type": "invoked_skills",
                "skills": [
                    {"name": "newer", "path": "/s/newer", "content": "N"},
                    {"name": "older", "path": "/s/older", "content": "O"},
                ],
            }
        ),
        _assistant(("k1", "Skill", {"skill": "pdf"})),
        _result("k1", "Launching skill: pdf"),
        record_from_dict(
            {
                "type": "user",
                "uuid": "m1",
                "isMeta": True,
                "sourceToolUseID": "k1",
                "message": {"role": "user", "content": [{"type": "text", "text": "PDF steps"}]},
            }
        ),
        _assistant(("k2", "Skill", {"skill": "bare"})),
    ]
    skills = rh.scan_context(recs, "/w").skills
    assert [(s.name, s.content) for s in skills] == [
        ("bare", None),
        ("pdf", "PDF steps"),
        ("newer", "N"),
        ("older", "O"),
    ]


def test_the_transcripts_own_announcements_are_not_repeated() -> None:
    # The main loop announces its tools, agents, skills and MCP instructions again after a
    # compaction; repeating them would count them twice.
    recs = [
        _attachment(
            {
                "type": "deferred_tools_delta",
                "addedNames": ["A", "B"],
                "addedLines": ["A", "B"],
                "removedNames": [],
            }
        ),
        _attachment({"type": "skill_listing", "content": "- s"}),
    ]
    facts = rh.scan_context(recs, "/w")
    inputs = rh.RehydrationInputs(todos=facts.todos, skills=facts.skills, agents=facts.agents)
    assert rh.plan_attachments(inputs) == []
    rendered = rh.render(
        {"type": "deferred_tools_delta", "addedNames": ["B", "C"], "addedLines": ["B", "C"]}
    )
    assert rendered is not None and "B\nC" in rendered


def test_attachments_fit_the_room_the_view_budget_leaves() -> None:
    todos = [{"content": "ship", "status": "in_progress", "activeForm": "Shipping"}]
    inputs = rh.RehydrationInputs(
        files=[_snap(f"f{i}.py", 4_000) for i in range(5)],
        todos=todos,
        skills=[rh.SkillSnapshot(name="pdf", content=_text_of_tokens(3_000))],
        agents=[rh.RunningAgent(tool_use_id="toolu_1", description="scan")],
    )
    whole = rh.plan_attachments(inputs)
    assert sum(rh.payload_tokens(a) for a in whole) > 20_000
    assert rh.fit_attachments(inputs, None) == whole
    for limit in (12_000, 6_000, 1_500, 300, 0):
        out = rh.fit_attachments(inputs, limit)
        kinds = [a["type"] for a in out]
        # The todo list always stays; the rest shrinks or gives way to fit.
        assert "todo" in kinds, limit
        assert sum(rh.payload_tokens(a) for a in out) <= limit or kinds == ["todo"], limit
    # Files shrink first (the most recent keeps its content, later ones become references),
    # then the skills; references and agents give way last, the todo list never.
    roomy = [a["type"] for a in rh.fit_attachments(inputs, 12_000)]
    assert roomy[:3] == ["file", "file", "compact_file_reference"]
    assert "invoked_skills" in roomy
    tight = [a["type"] for a in rh.fit_attachments(inputs, 300)]
    assert tight == ["compact_file_reference"] * 5 + ["todo", "task_status"]
    assert [a["type"] for a in rh.fit_attachments(inputs, 0)] == ["todo"]


def test_paths_are_normalized_against_cwd() -> None:
    assert rh.normalize_path("src/../a.py", "/w") == "/w/a.py"
    assert rh.normalize_path("/x/./y", "/w") == "/x/y"
    assert rh.display_path("/w/src/a.py", "/w") == "src/a.py"
    assert rh.display_path("/other/a.py", "/w") == "/other/a.py"
    assert rh.display_path("/wx/a.py", "/w") == "/wx/a.py"
