"""What a process's levers save, priced by the what-if replay: each (stage, lever) the
ranking asks about, --what-if's prediction and the step at the GPU's limits; on the
candidates' steps, or on the run's steps where its ranks replay together (in lockstep)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from trace_gaps.analysis.engine.metrics import GPU_METRICS, REPLAY_MODELS
from trace_gaps.analysis.engine.pipeline import Analysis
from trace_gaps.analysis.replay.chain import replay_step
from trace_gaps.analysis.replay.joint import JointRun, joint_run
from trace_gaps.analysis.replay.levers import Lever, LeverError, not_applicable, parse_levers
from trace_gaps.analysis.replay.model import StepModel
from trace_gaps.analysis.replay.whatif import (
    ends,
    models_of,
    predict,
    predict_run,
    priced_subset,
)
from trace_gaps.analysis.steps import IS_WARMUP, STEP_ID
from trace_gaps.figures.speed_of_light import SpeedOfLight
from trace_gaps.figures.stage import StageSummary
from trace_gaps.model import END_NS, PID, START_NS, GraphTraceMode
from trace_gaps.parallel import forked_map
from trace_gaps.records.whatif import Prediction
from trace_gaps.report.levers import NO_GPU_METRICS_WORDS, check_levers
from trace_gaps.vocabulary import SPECIAL_STAGES

Price = tuple[int, int]  # (predicted step, saving), ns per step


def checked_levers(what_if: str | None, analysis: Analysis) -> list[Lever] | None:
    """--what-if's levers ("verify_forward=graph,sample=nosync"); raises LeverError when they
    name no stage of the analysed steps or do not apply."""
    levers = parse_levers(what_if) if what_if is not None else None
    if not levers:
        return levers
    # A lever need only change some kind's or process's steps; where it changes none,
    # that section's prediction lists it as not applicable.
    sections = [
        (part.stage_map.names, list(part.metrics[REPLAY_MODELS].values()))
        for part in analysis.by_kind()
    ]
    sol = next((lever for lever in levers if lever.kind == "sol"), None)
    if sol is not None and all(part.metrics[GPU_METRICS] is None for part in analysis.by_kind()):
        raise LeverError(f"{sol.label} does not apply: {NO_GPU_METRICS_WORDS}")
    # Each process's sol levers get their stages' speeds of light with its stage figures.
    check_levers(
        levers, [(names, models) for names, models in sections if models], speeds_known=False
    )
    return levers


@dataclass(slots=True)
class Prices:
    """A process's replayed steps and what a lever pulled on them saves. models: the steps of
    its section replayed; priced: the candidates' steps among them (priced_subset); base:
    those steps replayed as they are; together: the run's joint replay where the process's
    ranks meet at matched collectives; known: the prices asked so far."""

    pid: int
    models: list[StepModel]
    names: tuple[str, ...]
    mode: GraphTraceMode
    mean_ns: int
    together: JointRun | None
    priced: list[StepModel] = field(default_factory=list)
    base: list[tuple[int, int]] = field(default_factory=list)
    known: dict[tuple[str, str], Price | None] = field(default_factory=dict)

    def price(self, pair: tuple[str, str]) -> Price | None:
        """What pulling one lever (stage, lever) predicts and saves per step: what it saves
        the run where the ranks are in lockstep; None where it does not apply."""
        try:
            if self.together is not None:
                found = predict_run(
                    self.together,
                    self.pid,
                    [Lever(*pair)],
                    self.names,
                    self.mode,
                    self.mean_ns,
                    with_ledger=False,
                )
            else:
                found = predict(
                    self.priced,
                    [Lever(*pair)],
                    self.names,
                    self.mode,
                    self.mean_ns,
                    with_ledger=False,
                    base_walls=self.base,
                )
        except LeverError:
            return None
        return (found.predicted_ns, found.saving_ns)

    def saving(self, stage: str, lever: str) -> Price | None:
        """price((stage, lever)), each pair priced once."""
        if (stage, lever) not in self.known:
            self.known[stage, lever] = self.price((stage, lever))
        return self.known[stage, lever]

    def price_at_once(self, pairs: list[tuple[str, str]]) -> None:
        """Price the pairs at once on forked children, where that pays (forked_map)."""
        found = forked_map(self.price, pairs)
        if found is not None:
            self.known.update(zip(pairs, found, strict=True))

    def predict(self, levers: list[Lever], *, with_ledger: bool = True) -> Prediction:
        """--what-if's prediction of the levers pulled together: on the run's steps where
        the ranks replay together, else as _what_if prices it."""
        if self.together is not None:
            return predict_run(
                self.together,
                self.pid,
                levers,
                self.names,
                self.mode,
                self.mean_ns,
                strict=False,
                with_ledger=with_ledger,
            )
        return _what_if(self, levers, with_ledger=with_ledger)


def process_prices(
    analysis: Analysis, pid: int, mean_ns: int, mode: GraphTraceMode, joint: JointRun | None
) -> Prices:
    """The process's prices in the analysis's section (a kind's section: its own steps);
    mean_ns: its mean step; joint: the section's joint replay (joint_run_of)."""
    kind_steps = set(analysis.steps[STEP_ID].tolist())
    models = [m for m in models_of(analysis.metrics[REPLAY_MODELS], pid) if m.step_id in kind_steps]
    priced = priced_subset(models)
    return Prices(
        pid,
        models,
        analysis.stage_map.names,
        mode,
        mean_ns,
        joint if joint is not None and pid in joint.pids else None,
        priced,
        [ends(replay_step(model)) for model in priced],
    )


def joint_run_of(analysis: Analysis) -> JointRun | None:
    """The joint replay of the analysis's ranks where they meet at matched collectives, for
    steps that are iterations (a step range or cycle; a whole process as one step is not
    one of a loop's iterations)."""
    if analysis.selection.name is None:
        return None
    steps = analysis.steps[~analysis.steps[IS_WARMUP]]
    means = (steps[END_NS] - steps[START_NS]).groupby(steps[PID]).mean().round()
    return joint_run(
        analysis.metrics[REPLAY_MODELS],
        analysis.collectives,
        {int(cast(int, pid)): int(ns) for pid, ns in means.items()},
    )


def _what_if(prices: Prices, levers: list[Lever], *, with_ledger: bool) -> Prediction:
    """--what-if priced on the candidates' steps (one lever, one price in the ranked table,
    the headline and here), or on every replayed step where a lever changes only steps
    outside them."""
    models, priced, names = prices.models, prices.priced, prices.names
    if any(
        not_applicable(lever, names, priced) is not None
        and not_applicable(lever, names, models) is None
        for lever in levers
    ):
        return predict(
            models,
            levers,
            names,
            prices.mode,
            prices.mean_ns,
            strict=False,
            with_ledger=with_ledger,
        )
    return predict(
        priced,
        levers,
        names,
        prices.mode,
        prices.mean_ns,
        strict=False,
        base_walls=prices.base,
        with_ledger=with_ledger,
    )


def at_speed_of_light(levers: list[Lever], stages: Sequence[StageSummary]) -> list[Lever]:
    """The levers, each sol lever given what its stage's ops scale by: the stage's speed of
    light over its GPU busy time (left None where the stage has no GPU metrics)."""
    scales = {
        stage.name: stage.gpu_metrics.sol_ns_per_step / stage.busy_ns_per_step
        for stage in stages
        if stage.gpu_metrics is not None and stage.busy_ns_per_step > 0
    }
    return [
        dataclasses.replace(lever, op_scale=scales.get(lever.stage))
        if lever.kind == "sol"
        else lever
        for lever in levers
    ]


def at_the_limits(
    sol: SpeedOfLight | None, stages: Sequence[StageSummary], prices: Prices
) -> SpeedOfLight | None:
    """The step's speed of light with the step predicted with every stage's GPU work at its
    speed of light (--what-if of every stage's sol lever, priced as --what-if prices it)."""
    if sol is None or not prices.models:
        return sol
    levers = at_speed_of_light(
        [Lever(stage.name, "sol") for stage in stages if stage.name not in SPECIAL_STAGES],
        stages,
    )
    pulled = [
        lever for lever in levers if not_applicable(lever, prices.names, prices.models) is None
    ]
    if not pulled:
        return sol
    found = prices.predict(pulled, with_ledger=False)
    return dataclasses.replace(
        sol, predicted_step_ns=found.predicted_ns, levers=[lever.label for lever in pulled]
    )
