"""The MCP tools' answers: the JSON of `analyze`, `diff` and `info` cut into the questions an
agent asks, each small enough to read whole (an overview under 4 KB, a drill-down under 16 KB,
lists paged with offset and limit).

Plain functions from the commands' JSON (dicts) to answers (dicts): no SDK, no analysis; kept
within their bounds by bounds.py."""

from __future__ import annotations

from typing import Any

from trace_gaps.mcp.bounds import (
    ANSWER_BYTES,
    OVERVIEW_BYTES,
    compact,
    fit,
    ms,
    paged,
    short_name,
)

VERDICTS = 3

Json = dict[str, Any]


class AnswerError(ValueError):
    """A question the report cannot answer (no such stage, step or section): one line."""


def sections(report: Json) -> list[Json]:
    """The report's sections: a process (or one kind of step of it), as they are listed."""
    return list(report.get("processes") or [])


def section_of(report: Json, section: int) -> Json:
    found = sections(report)
    if not found:
        raise AnswerError("the report has no analysed process")
    if not 0 <= section < len(found):
        raise AnswerError(
            f"no section {section}: the report has {len(found)} (0 to {len(found) - 1})"
        )
    return found[section]


def section_key(index: int, process: Json) -> Json:
    """What names a section: its index (the drill-downs' `section`), pid, kind and label."""
    key: Json = {"section": index, "pid": process["pid"]}
    if process.get("kind"):
        key["kind"] = process["kind"]
    if process.get("label"):
        key["label"] = process["label"]
    if process.get("export_file"):
        key["export"] = process["export_file"]
    return key


def step_stats(process: Json) -> Json:
    steps = process["steps"]
    wall = steps.get("wall") or {}
    return {
        "step": steps["name"],
        "analysed": steps["steps_analysed"],
        "skipped": steps["steps_skipped"],
        **{f"{k.removesuffix('_ns')}_ms": ms(v) for k, v in wall.items()},
    }


def candidate_line(candidate: Json) -> Json:
    """A ranked candidate in one small record: what, how much, which lever, what it saves."""
    line: Json = {
        "rank": candidate["rank"],
        "stage": short_name(candidate["stage"], 120),
        "bucket": candidate["bucket"],
        "kind": candidate["kind"],
        "ms_per_step": ms(candidate["ns_per_step"]),
        "share_pct": round(100 * candidate["share_fraction"], 1),
    }
    if candidate.get("lever"):
        line["lever"] = candidate["lever"]
        line["saving_ms"] = ms(candidate.get("saving_ns"))
        line["predicted_step_ms"] = ms(candidate.get("predicted_step_ns"))
    return line


def overview_answer(report: Json, *, candidates: int = 5) -> Json:
    """The answer on one page: per section the headline, step statistics, the first verdicts
    and the top candidates; the integrity notes by code and severity. Under 4 KB."""
    answer: Json = {
        "tool_version": report.get("tool_version"),
        "export": (report.get("export") or {}).get("file"),
        "sections": [],
    }
    if report.get("other_exports"):
        answer["other_exports"] = [e.get("file") for e in report["other_exports"]]
    for index, process in enumerate(sections(report)):
        ranked = process.get("candidates") or []
        answer["sections"].append(
            {
                **section_key(index, process),
                "headline": process["headline"],
                "steps": step_stats(process),
                "verdicts": [c["verdict"] for c in ranked[:VERDICTS]],
                "top": [candidate_line(c) for c in ranked[:candidates]],
                "candidates": len(ranked),
            }
        )
    answer["notes"] = [
        {"code": n["code"], "severity": n["severity"]} for n in report.get("notes") or []
    ]
    if report.get("unreliable"):
        answer["unreliable"] = report["unreliable"]
    answer["next"] = (
        "stage(stage=...) for a stage's ledger and evidence; candidates() for the ranked list; "
        "kernels(stage=...); step(index=...); what_if(levers=...); notes() for the notes' text"
    )
    # Several ranks or kinds: fewer verdicts and candidates each before a section goes.
    return fit(answer, OVERVIEW_BYTES, shrink_first=("verdicts", "top", "notes"))


def candidates_answer(report: Json, *, section: int, offset: int, limit: int) -> Json:
    """The ranked candidates of a section, a page of them, each with its verdict."""
    process = section_of(report, section)
    ranked = process.get("candidates") or []
    page = [{**candidate_line(c), "verdict": c["verdict"]} for c in ranked[offset : offset + limit]]
    return fit(
        {**section_key(section, process), **paged(page, offset, len(ranked)), "candidates": page},
        ANSWER_BYTES,
    )


def stage_names(process: Json) -> list[str]:
    return [s["name"] for s in process.get("stages") or []]


def stage_answer(report: Json, *, stage: str, section: int) -> Json:
    """One stage: its ledger (busy, wait, idle by cause, ms per step), launches and syncs,
    its candidates with their verdicts and evidence, its long host gaps."""
    process = section_of(report, section)
    found = [s for s in process.get("stages") or [] if s["name"] == stage]
    if not found:
        names = stage_names(process)
        raise AnswerError(
            f"no stage {stage!r} in section {section}; its stages: {', '.join(names)}"
        )
    ledger = {
        (e["bucket"] if e["cause"] is None else f"{e['bucket']} {e['cause']}"): ms(e["ns_per_step"])
        for e in process.get("ledger") or []
        if e["stage"] == stage
    }
    ranked = [c for c in process.get("candidates") or [] if c["stage"] == stage]
    answer: Json = {
        **section_key(section, process),
        "stage": stage,
        "ledger_ms_per_step": ledger,
        "facts": compact(found[0]),
        "candidates": [
            {**candidate_line(c), "verdict": c["verdict"], "evidence": compact(c["evidence"])}
            for c in ranked
        ],
        "long_host_gaps": [
            compact(g) for g in process.get("long_host_gaps") or [] if g["stage"] == stage
        ],
    }
    return fit(answer, ANSWER_BYTES, shrink_first=("long_host_gaps", "candidates"))


def step_answer(report: Json, *, index: int, section: int) -> Json:
    """One step by its index (as --steps and plot's --step-index count): when it ran, how long,
    whether it was analysed, and its ledger by stage, bucket and cause."""
    process = section_of(report, section)
    rows = [r for r in process.get("step_rows") or [] if r["step_index"] == index]
    if not rows:
        indices = sorted({r["step_index"] for r in process.get("step_rows") or []})
        raise AnswerError(f"no step {index} in section {section}; its steps: {spans(indices)}")
    answer: Json = {**section_key(section, process), "steps": []}
    for row in rows:  # one per thread
        ledger: list[Json] = [
            {
                "stage": short_name(e["stage"], 120),
                "bucket": e["bucket"] if e["cause"] is None else f"{e['bucket']} {e['cause']}",
                "ms": ms(e["duration_ns"]),
            }
            for e in process.get("step_ledger") or []
            if e["step_id"] == row["step_id"]
        ]
        ledger.sort(key=lambda e: -float(e["ms"] or 0))
        answer["steps"].append(
            {
                "index": index,
                "thread": row["thread"],
                "start_s": round(row["start_offset_ns"] / 1e9, 6),
                "wall_ms": ms(row["wall_ns"]),
                "busy_ms": ms(row["busy_ns"]),
                "idle_ms": ms(row["idle_ns"]),
                "wait_ms": ms(row["wait_ns"]),
                "analysed": not row["is_warmup"] and not row["skip_reason"],
                **({"skipped": row["skip_reason"]} if row["skip_reason"] else {}),
                "ledger": ledger,
                "gaps": [
                    {
                        "stage": c["stage"],
                        "cause": g["cause"],
                        "ms": ms(g["duration_ns"]),
                        "at_ms": ms(g["start_offset_ns"] - row["start_offset_ns"]),
                    }
                    for c in process.get("candidates") or []
                    for g in c["evidence"].get("longest_gaps") or []
                    if g["step_index"] == index
                ],
            }
        )
    answer["picture"] = f"trace-gaps plot timeline EXPORT --step-index {index} -o step-{index}.png"
    return fit(answer, ANSWER_BYTES)


def kernels_answer(
    report: Json, *, stage: str | None, section: int, offset: int, limit: int
) -> Json:
    """The GPU ops of the analysed steps with most GPU time, of one stage or all, a page."""
    process = section_of(report, section)
    summary = process.get("kernels") or {"rows": [], "count": 0, "total_ns": 0}
    rows = [r for r in summary["rows"] if stage is None or r["stage"] == stage]
    if stage is not None and not rows and stage not in stage_names(process):
        names = stage_names(process)
        raise AnswerError(
            f"no stage {stage!r} in section {section}; its stages: {', '.join(names)}"
        )
    page = [
        {
            "name": short_name(r["name"]),
            "stage": short_name(r["stage"], 120),
            "kind": r["kind"] + (" in graph" if r["from_graph"] and r["kind"] != "graph" else ""),
            "per_step": r["count_per_step"],
            "ms_per_step": ms(r["ns_per_step"]),
            "mean_us": round(r["mean_ns"] / 1e3, 1),
            "p50_us": round(r["p50_ns"] / 1e3, 1),
            "p90_us": round(r["p90_ns"] / 1e3, 1),
            "share_pct": r["share_pct"],
        }
        for r in rows[offset : offset + limit]
    ]
    return fit(
        {
            **section_key(section, process),
            "stage": stage,
            "ops": summary["count"],
            "gpu_ms": ms(summary["total_ns"]),
            **paged(page, offset, len(rows)),
            "kernels": page,
        },
        ANSWER_BYTES,
    )


def what_if_answer(report: Json, *, section: int) -> Json:
    """The predicted step with the levers pulled, against the replayed one, and its ledger."""
    process = section_of(report, section)
    prediction = process.get("what_if")
    if prediction is None:
        raise AnswerError("the report has no what-if prediction for this section")
    answer = {**section_key(section, process), **compact(prediction)}
    answer["ledger"] = sorted(answer.get("ledger") or [], key=lambda e: -e["ms_per_step"])
    return fit(answer, ANSWER_BYTES)


def notes_answer(report: Json, *, offset: int, limit: int) -> Json:
    """The integrity notes, whole: code, severity, what they make unreliable, and the text."""
    notes = report.get("notes") or []
    page = notes[offset : offset + limit]
    return fit({**paged(page, offset, len(notes)), "notes": page}, ANSWER_BYTES)


def diff_answer(diff: Json, *, limit: int) -> Json:
    """Did the fix work: per pair of processes the verdict, the step-time change with its
    noise, the machine's drift, and the biggest changes (beyond noise first), limit of each."""
    pairs = []
    for pair in diff.get("processes") or []:

        def biggest(rows: list[Json], key: str) -> list[Json]:
            ordered = sorted(
                rows,
                key=lambda r: (not r.get("is_beyond_noise", True), -abs(r.get(key) or 0)),
            )
            return [compact(r) for r in ordered[:limit]]

        pairs.append(
            {
                "before": compact(pair["before"]),
                "after": compact(pair["after"]),
                "verdict": pair["verdict"],
                "wall": pair["wall"],
                "drift": pair.get("drift"),
                "buckets": biggest(pair.get("buckets") or [], "change_ns_per_step"),
                "bucket_rows": len(pair.get("buckets") or []),
                "stages": biggest(pair.get("stages") or [], "change_ns_per_step"),
                "candidates": biggest(pair.get("candidates") or [], "change_ns_per_step"),
            }
        )
    answer = {
        "tool_version": diff.get("tool_version"),
        "pairs": pairs,
        "notes": diff.get("notes") or [],
        **{k: diff[k] for k in ("confidence_pct", "runs", "run", "code_runs") if diff.get(k)},
    }
    return fit(answer, ANSWER_BYTES, shrink_first=("notes",))


def info_answer(info: Json, *, offset: int, limit: int) -> Json:
    """What an export holds, its NVTX ranges a page (the longest list)."""
    ranges = info.get("ranges") or []
    page = ranges[offset : offset + limit]
    answer = {
        **{k: v for k, v in info.items() if k != "ranges"},
        **paged(page, offset, len(ranges)),
        "ranges": page,
    }
    return fit(answer, ANSWER_BYTES, shrink_first=("capture_settings", "threads"))


def spans(numbers: list[int]) -> str:
    """Sorted numbers as runs: '1-4, 7, 9-12' ('none' for none)."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][1] + 1:
            runs[-1][1] = number
        else:
            runs.append([number, number])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs) or "none"
