"""Containment: every figure a report shows fits inside the container it belongs to.

Checked on the JSON of every sample and corpus capture (the goldens, which
test_samples.py holds equal to the current output) and of every peer trace, and shown to
fail on a mutated report.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import REPRESENTATIVE_PEERS, ROOT, peer_trace_paths, sweep
from trace_gaps.cli import app
from trace_gaps.units import format_count

RARE_AS_ZERO = re.compile(r"(?<![\d.])0\.0 [a-z/ -]+(?: per step|/step)")
GOLDENS = sorted((ROOT / "tests" / "golden" / "samples").glob("*.json"))


def broken_invariants(report: dict[str, Any]) -> list[str]:
    """Every containment a report breaks, as one line each."""
    found = []
    for process in report["processes"]:
        who = f"{process['pid']} {process.get('kind', '')}".strip()
        ledger = process["ledger"]
        wall = process["steps"]["wall"]["mean_ns"]
        if process["steps"]["steps_analysed"] and sum(e["ns_per_step"] for e in ledger) != wall:
            found.append(f"{who}: the ledger does not sum to the mean step")
        stage_ns: dict[str, int] = {}
        busy_ns: dict[str, int] = {}
        for e in ledger:
            stage_ns[e["stage"]] = stage_ns.get(e["stage"], 0) + e["ns_per_step"]
            if e["bucket"] in ("busy", "wait"):
                busy_ns[e["stage"]] = busy_ns.get(e["stage"], 0) + e["ns_per_step"]
        for stage, ns in stage_ns.items():
            if ns > wall:
                found.append(f"{who}: stage {stage} is longer than the step")
        for c in process["candidates"]:
            ev = c["evidence"]
            if c["ns_per_step"] > stage_ns.get(c["stage"], 0):
                found.append(f"{who}: candidate {c['stage']} {c['bucket']} exceeds its stage")
            if sum(x["ns_per_step"] for x in ev["host_blocked_in"]) > c["ns_per_step"]:
                found.append(f"{who}: OS-call time exceeds candidate {c['stage']} {c['bucket']}")
            if sum(ev["idle_by_cause_ns_per_step"].values()) > c["ns_per_step"]:
                found.append(f"{who}: idle causes exceed candidate {c['stage']}")
            for gap in ev["long_host_gaps"]:
                if gap["idle_ns_per_step"] > stage_ns.get(c["stage"], 0):
                    found.append(f"{who}: a long gap's idle time exceeds stage {c['stage']}")
                if gap["os_ns_per_step"] > gap["ns_per_step"]:
                    found.append(f"{who}: OS calls exceed their long gap in {c['stage']}")
            if c["bucket"] == "busy":
                for kernel in ev["top_kernels"]:
                    if kernel["ns_per_step"] > busy_ns.get(c["stage"], 0):
                        found.append(
                            f"{who}: op {kernel['name'][:40]} exceeds {c['stage']}'s GPU time"
                        )
            shown = format_count(ev["launches_per_step"])
            if (
                "launches/step" in c["verdict"]
                and f" {shown} " not in c["verdict"]
                and (f"{shown} launches/step" not in c["verdict"])
            ):
                found.append(
                    f"{who}: the verdict of {c['stage']} shows other launches than {shown}"
                )
            if RARE_AS_ZERO.search(c["verdict"]):
                found.append(f"{who}: a rare count printed as 0.0 per step in {c['stage']}")
    return found


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda p: p.stem)
def test_every_figure_fits_its_container_on_the_samples(golden: Path) -> None:
    assert broken_invariants(json.loads(golden.read_text(encoding="utf-8"))) == []


@pytest.mark.skipif(not peer_trace_paths(), reason="../shared/peer_traces is absent")
@pytest.mark.parametrize(
    "path", sweep(peer_trace_paths(), REPRESENTATIVE_PEERS), ids=lambda p: p.stem
)
def test_every_figure_fits_its_container_on_the_peer_traces(path: Path) -> None:
    result = CliRunner().invoke(app, ["analyze", str(path), "-f", "json"])
    assert result.exit_code == 0, result.output
    assert broken_invariants(json.loads(result.stdout)) == []


def test_the_invariants_catch_a_figure_outside_its_container() -> None:
    report = json.loads((ROOT / "tests" / "golden" / "samples" / "spec_eager.json").read_text())
    assert broken_invariants(report) == []
    mutated = copy.deepcopy(report)
    candidate = mutated["processes"][0]["candidates"][0]
    candidate["evidence"]["host_blocked_in"] = [
        {"name": "sem_wait", "ns_per_step": candidate["ns_per_step"] + 1, "count_per_step": 1.0}
    ]
    assert any("OS-call time exceeds" in line for line in broken_invariants(mutated))
    mutated = copy.deepcopy(report)
    mutated["processes"][0]["ledger"][0]["ns_per_step"] += 1
    assert any("does not sum" in line for line in broken_invariants(mutated))
