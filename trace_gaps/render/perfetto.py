"""The analysis as a Chrome trace-event JSON file, the format ui.perfetto.dev opens.

Built from the Report's step timelines (timeline.py), so the slices are the stages, calls,
ops and idle causes the ledger counted, nothing read again from the export. Only the steps
a TimelineRequest picks are written (`--steps A:B`, by default the first DEFAULT_STEPS of
each process's step thread: run/timelines.py): the timelines hold their ops as Python lists,
which is linear in the steps chosen and bounded whatever the export's size.

Per process (one per rank; several exports on export 0's clock, as run/multi.py puts their
timelines), the tracks are:

    <step thread>        steps, and inside them the stages (innermost, as charged)
    CUDA API             the step thread's CUDA calls, named by call
    GPU d stream s       the ops, each with the stage that launched it
    GPU d stream s wait  collective waits: the part of a collective spent waiting for a peer
    GPU idle             idle runs, named by cause (launch, sync, queued, api, host)
    candidates           the top candidates, each on the exported step where it is largest
    GPU DRAM read %      counter tracks of the GPU's metric samples (with GPU metrics):
    GPU SMs active %     each sample's value from its start (cut to the step) to the next's
    GPU queue depth      counter tracks of the drawn launches and idle runs, and a flow from
    GPU idle so far      each CUDA call to the ops it launched (perfetto_links.py)

Times are µs (the format's unit) with three decimals, so they carry exact ns; they count
from the trace start of export 0 (`otherData.trace_start_ns`), like the report's offsets.

A name longer than NAME_CHARS_MAX (a stage, op or call name; its slices and args) is cut in
the middle, and written whole once, in `otherData.full_names` under its cut form: the stage
name was in every op's args, and a 1 MB one made a file of gigabytes (issue 45).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from trace_gaps import __version__
from trace_gaps.records.report import ProcessReport, Report
from trace_gaps.records.timeline import GpuMetricLane, Spans, StepTimeline
from trace_gaps.render.perfetto_links import link_events, to_us

STEP_CATEGORY = "step"
STAGE_CATEGORY = "stage"
API_CATEGORY = "cuda_api"
OP_CATEGORY = "gpu_op"
WAIT_CATEGORY = "collective_wait"
IDLE_CATEGORY = "gpu_idle"
CANDIDATE_CATEGORY = "candidate"
CANDIDATES_SHOWN = 5

# Longer names are cut in the middle in slices and args (the module docstring).
NAME_CHARS_MAX = 1_000

# Pseudo-threads of a process are numbered above any Linux tid (at most 2^22).
_PSEUDO_TID = 1 << 24


def trace_events(reports: Sequence[Report]) -> dict[str, object]:
    """The Chrome trace-event document of the reports' timelines (see the module docstring)."""
    origin = reports[0].export.trace_start_ns
    events: list[dict[str, object]] = []
    used_pids: set[int] = set()
    for index, report in enumerate(reports):
        by_pid: dict[int, list[StepTimeline]] = {}
        for timeline in report.timelines:
            by_pid.setdefault(timeline.pid, []).append(timeline)
        for pid, timelines in sorted(by_pid.items()):
            shown_pid = pid if pid not in used_pids else (index + 1) * _PSEUDO_TID + pid
            used_pids.add(shown_pid)
            processes = [p for p in report.processes if p.pid == pid]
            events += _process_events(report, processes, timelines, shown_pid, index)
    events += link_events(
        events, api_category=API_CATEGORY, op_category=OP_CATEGORY, idle_category=IDLE_CATEGORY
    )
    full_names = _cut_long_names(events)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "tool": "trace-gaps",
            "tool_version": __version__,
            "exports": ", ".join(report.export.file for report in reports),
            "trace_start_ns": str(origin),
            **({"full_names": full_names} if full_names else {}),
        },
    }


def _cut_long_names(events: list[dict[str, object]]) -> dict[str, str]:
    """Cut, in place, every name and arg longer than NAME_CHARS_MAX in the middle; return
    each full name by its cut form (numbered, so two names alike at both ends stay apart)."""
    cut_by_id: dict[int, str] = {}  # the events share their name objects: each is cut once
    cut_by_text: dict[str, str] = {}
    full_names: dict[str, str] = {}

    def cut(text: str) -> str:
        if len(text) <= NAME_CHARS_MAX:
            return text
        short = cut_by_id.get(id(text))
        if short is None:
            short = cut_by_text.get(text)
            if short is None:
                keep = (NAME_CHARS_MAX - 40) // 2
                number = len(full_names) + 1
                short = (
                    f"{text[:keep]} …[{len(text)} characters, full name {number}]… {text[-keep:]}"
                )
                cut_by_text[text] = short
                full_names[short] = text
            cut_by_id[id(text)] = short
        return short

    for event in events:
        name = event.get("name")
        if isinstance(name, str):
            event["name"] = cut(name)
        args = event.get("args")
        if isinstance(args, dict):
            for key, value in args.items():
                if isinstance(value, str):
                    args[key] = cut(value)
    return full_names


def render_perfetto(reports: Sequence[Report]) -> str:
    """The document as JSON text, one event a line (diffable, and readable by line tools)."""
    document = trace_events(reports)
    events = document.pop("traceEvents")
    assert isinstance(events, list)
    lines = ",\n".join(json.dumps(event, ensure_ascii=False) for event in events)
    head = json.dumps(document, ensure_ascii=False)[1:-1]
    return '{"traceEvents": [\n' + lines + "\n],\n" + head + "}\n"


class _Tracks:
    """Pseudo-thread ids of one process, in the order they are first asked for."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.ids: dict[str, int] = {}
        self.events: list[dict[str, object]] = []

    def tid(self, name: str, *, real: int | None = None) -> int:
        if name not in self.ids:
            tid = real if real is not None else _PSEUDO_TID + len(self.ids)
            self.ids[name] = tid
            self.events.append(_meta(self.pid, tid, "thread_name", name))
            self.events.append(
                {
                    "ph": "M",
                    "pid": self.pid,
                    "tid": tid,
                    "name": "thread_sort_index",
                    "args": {"sort_index": len(self.ids)},
                }
            )
        return self.ids[name]


def _process_events(
    report: Report,
    processes: list[ProcessReport],
    timelines: list[StepTimeline],
    pid: int,
    export_index: int,
) -> list[dict[str, object]]:
    name = processes[0].name if processes else ""
    label = processes[0].label if processes and processes[0].label else f"pid {timelines[0].pid}"
    title = f"{name or 'process'} ({label}, {report.export.file})"
    tracks = _Tracks(pid)
    events: list[dict[str, object]] = [
        _meta(pid, 0, "process_name", title),
        {
            "ph": "M",
            "pid": pid,
            "tid": 0,
            "name": "process_sort_index",
            "args": {"sort_index": export_index},
        },
    ]
    # Candidates are placed on analysed steps only, as they are computed from them.
    step_ids = {t.step_id: t for t in timelines if not t.is_warmup}
    for timeline in timelines:
        base = timeline.start_offset_ns
        thread_name = f"thread {timeline.thread} (steps)"
        thread = tracks.tid(thread_name, real=timeline.thread)
        events.append(
            _slice(
                pid,
                thread,
                timeline.step_name or "step",
                STEP_CATEGORY,
                base,
                timeline.wall_ns,
                {
                    "step_id": timeline.step_id,
                    "step_index": timeline.step_index,
                    "is_warmup": timeline.is_warmup,
                    **_step_ledger_args(processes, timeline.step_id),
                },
            )
        )
        events += _spans(tracks, thread_name, timeline.stages, STAGE_CATEGORY, base, "stage")
        api = f"CUDA API (thread {timeline.thread})"
        events += _spans(tracks, api, timeline.api_calls, API_CATEGORY, base, "category", by="name")
        for lane in timeline.streams:
            where = f"GPU {lane.device_id} stream {lane.stream_id}"
            events += _spans(tracks, where, lane.ops, OP_CATEGORY, base, "stage", by="name")
            wait = where + " collective wait"
            events += _spans(tracks, wait, lane.waits, WAIT_CATEGORY, base, "stage", by="name")
        events += _spans(tracks, "GPU idle (by cause)", timeline.idle, IDLE_CATEGORY, base, "cause")
        events += _counters(pid, timeline.gpu_metrics, base)
    events += _candidate_events(processes, step_ids, tracks)
    return events + tracks.events


def _step_ledger_args(processes: list[ProcessReport], step_id: int) -> dict[str, object]:
    """The step's ledger totals (ns) from the report's step rows, for the slice's args."""
    for process in processes:
        for row in process.step_rows:
            if row.step_id == step_id:
                return {
                    "busy_ns": row.busy_ns,
                    "idle_ns": row.idle_ns,
                    "wait_ns": row.wait_ns,
                    "kind": process.kind,
                }
    return {}


def _candidate_events(
    processes: list[ProcessReport],
    step_ids: dict[int, StepTimeline],
    tracks: _Tracks,
) -> Iterator[dict[str, object]]:
    """Each top candidate as a slice over the exported analysed step where its (stage, bucket)
    is largest (the first such step on ties); none where no exported step has it."""
    for process in processes:
        charged: dict[tuple[str, str, int], int] = {}
        for entry in process.step_ledger:
            if entry.step_id in step_ids:
                key = (entry.stage, entry.bucket, entry.step_id)
                charged[key] = charged.get(key, 0) + entry.duration_ns
        for candidate in process.candidates[:CANDIDATES_SHOWN]:
            ns, step_id = max(
                (
                    (charged.get((candidate.stage, candidate.bucket, step_id), 0), -step_id)
                    for step_id in step_ids
                ),
                default=(0, 0),
            )
            if ns <= 0:
                continue
            timeline = step_ids[-step_id]
            kind = f" [{process.kind}]" if process.kind else ""
            yield _slice(
                tracks.pid,
                tracks.tid("candidates"),
                f"#{candidate.rank} {candidate.stage} {candidate.bucket}{kind}",
                CANDIDATE_CATEGORY,
                timeline.start_offset_ns,
                timeline.wall_ns,
                {
                    "rank": candidate.rank,
                    "stage": candidate.stage,
                    "bucket": candidate.bucket,
                    "ns_per_step": candidate.ns_per_step,
                    "share_fraction": candidate.share_fraction,
                    "ns_in_this_step": ns,
                    "verdict": candidate.verdict,
                },
            )


def _spans(
    tracks: _Tracks,
    track: str,
    spans: Spans,
    category: str,
    base: int,
    group_key: str,
    *,
    by: str = "group",
) -> Iterator[dict[str, object]]:
    """A slice per span on the named track; a span that overlaps an earlier one without
    nesting in it (two ops of one stream a few ns apart in CUPTI's clock) goes on a second
    track, "<track> (2)", as viewers stack only nested slices."""
    names = spans.name if by == "name" else spans.group
    ids: list[int | None] = list(spans.correlation_id) or [None] * len(names)
    lane_ends: list[int] = []
    for start, end, group, name, correlation_id in zip(
        spans.start_ns, spans.end_ns, spans.group, names, ids, strict=True
    ):
        lane = next((i for i, last in enumerate(lane_ends) if last <= start), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(end)
        lane_ends[lane] = end
        tid = tracks.tid(track if lane == 0 else f"{track} ({lane + 1})")
        args: dict[str, object] = {group_key: group}
        if correlation_id is not None:
            args["correlation_id"] = correlation_id
        yield _slice(tracks.pid, tid, name, category, base + start, end - start, args)


# The counter tracks of the GPU's metric samples: track name -> GpuMetricLane field.
METRIC_COUNTERS = {"GPU DRAM read % of peak": "dram_read_pct", "GPU SMs active %": "sm_active_pct"}


def _counters(pid: int, lane: GpuMetricLane | None, base: int) -> list[dict[str, object]]:
    """A counter event per metric sample: its value from its start on (Perfetto holds a
    counter's value until the next event)."""
    if lane is None:
        return []
    return [
        {"ph": "C", "pid": pid, "name": name, "ts": to_us(base + start), "args": {"pct": value}}
        for name, field in METRIC_COUNTERS.items()
        for start, value in zip(lane.start_ns, getattr(lane, field), strict=True)
    ]


def _slice(
    pid: int,
    tid: int,
    name: str,
    category: str,
    start_ns: int,
    duration_ns: int,
    args: dict[str, object],
) -> dict[str, object]:
    return {
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "name": name,
        "cat": category,
        "ts": to_us(start_ns),
        "dur": to_us(duration_ns),
        "args": args,
    }


def _meta(pid: int, tid: int, name: str, value: str) -> dict[str, object]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {"name": value}}
