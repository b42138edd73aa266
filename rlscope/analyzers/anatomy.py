"""Step anatomy: where does each step's wall-clock go, and how does that change over the run?

Evidence: verl's per-step stage timers ``timing_s/<stage>`` (older ``timing/<stage>``
spellings are canonicalised). Stages map to phases (:data:`PHASES`): ``gen`` (with REMAX's
``gen_max``), ``reward``, ``old_log_prob``, ``ref``, ``values``, ``adv``, ``update_critic``,
``update_actor``; ``update_weights`` / ``param_sync`` / ``sync_rollout_weights`` are weight
sync; ``switch`` / ``switch_to_rollout`` / ``switch_to_trainer`` are switching a pool between
trainer and engine; ``wait*`` and ``switch_wait`` are waiting; ``testing`` is validation (no
phase of a step whose step timer cannot hold it: verl 0.9.1 times it after ``timing_s/step``
closes, older verl inside it) and ``save_checkpoint`` checkpointing; a record with nothing but those two, validation metrics and
the profiling hooks' timers, and no step timer (a validation logged on its own) is no training
step and is left out (:func:`makes_step`). ``other`` is
``timing_s/step`` minus the named phases (zero when there is no step timer, whose time is
then the sum of the phases: ``untracked-time`` is judged over the recent steps that have a
step timer alone, and not at all when none has). Timers nested inside a stage (``generate_sequences``,
``reshard``) and unknown timers are not added, so nothing is counted twice; unknown time
shows up in ``other``.

When generation overlaps the trainer's step (one-step overlap, async streaming: see
``RunFacts.overlapped``), ``gen`` is the rollout's own duration beside the step: it is kept
as a column but not part of the step's sum, and its share (gen / step) may exceed 1. Step
time no trainer timer covers is then counted as waiting for samples, up to the rollout's
length, and only the remainder as ``other``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_seconds, fmt_steps
from rlscope.advice.thresholds import (
    GENERATION_SHARE_GROWTH_WARN,
    GENERATION_SHARE_INFO,
    OVERLAPPING_TIMERS_TOLERANCE,
    SWITCHING_WARN,
    UNTRACKED_TIME_WARN,
)
from rlscope.analyzers._data import RunFrames, Trend, load, quarter, recent, slope
from rlscope.collectors.verl_metrics import STEP_TIMER, makes_step
from rlscope.trace.reader import RunReader

# What a run lacks that has no training step (:func:`makes_step`), as a report names it
STEP_TIMERS_WANTED = "training-step timers (timing_s/* other than validation, checkpoint and profiling timers)"

__all__ = [
    "GROUPS",
    "PHASES",
    "STEP_TIMER",
    "STEP_TIMERS_WANTED",
    "AnatomyResult",
    "analyze",
    "group_seconds",
    "makes_step",
    "phase_seconds",
]

_PREFIX = "timing_s/"
_TESTING = f"{_PREFIX}testing"

# phase -> verl stage timers whose seconds it sums (waiting also takes every ``wait*`` timer)
PHASES: dict[str, tuple[str, ...]] = {
    "gen": ("gen", "gen_max"),
    "reward": ("reward",),
    "old_log_prob": ("old_log_prob",),
    "ref": ("ref",),
    "values": ("values",),
    "adv": ("adv",),
    "update_critic": ("update_critic",),
    "update_actor": ("update_actor",),
    "weight_sync": ("update_weights", "param_sync", "sync_rollout_weights"),
    "switching": ("switch", "switching", "switch_to_rollout", "switch_to_trainer"),
    "waiting": ("switch_wait",),
    "validation": ("testing",),
    "checkpoint": ("save_checkpoint",),
}

# coarse groups the MFU waterfall and the topology model use; "rest" is everything else
GROUPS: dict[str, tuple[str, ...]] = {
    "generation": ("gen",),
    "forward": ("old_log_prob", "ref", "values"),
    "training": ("update_actor", "update_critic"),
    "weight_sync": ("weight_sync",),
    "switching": ("switching",),
    "rest": ("reward", "adv", "waiting", "validation", "checkpoint", "other"),
}


def _phase_timers(steps: pd.DataFrame) -> dict[str, list[str]]:
    """Per phase, the stage timer columns of ``steps`` (wide) that it sums."""
    stages = {c[len(_PREFIX) :]: c for c in steps.columns if c.startswith(_PREFIX)}
    out = {phase: [stages[s] for s in names if s in stages] for phase, names in PHASES.items()}
    out["waiting"] += [c for s, c in stages.items() if s.startswith("wait")]
    return out


def phase_seconds(steps: pd.DataFrame, *, overlapped: bool = False) -> pd.DataFrame:
    """Seconds per phase, ``other`` and ``step`` for every step that has a stage timer other
    than validation and checkpointing, or a step timer.

    ``step`` is the step timer (the wall clock), else (absent or zero) the phases' sum. ``other`` is what the
    timer holds beyond the phases, clipped at zero: when timers nest or overlap, the phases add
    up to more than the step and their shares to more than 1. With ``overlapped``, ``gen`` runs
    beside the step and is left out of the sum.
    """
    out = pd.DataFrame(index=steps.index)
    timers: list[str] = [STEP_TIMER] if STEP_TIMER in steps.columns else []
    for phase, names in _phase_timers(steps).items():
        out[phase] = steps[names].sum(axis=1, min_count=1) if names else float("nan")
        timers += names
    # a record with nothing but validation or checkpoint timers (a validation logged on its own)
    # is no training step: counted, it would halve the mean step and every what-if built on it
    timed = pd.Series(False, index=steps.index)
    for name in timers:
        timed |= steps[name].notna() & makes_step(name, steps[name])
    out = out[timed].fillna(0.0)
    step = steps.loc[out.index, STEP_TIMER] if STEP_TIMER in steps.columns else pd.Series(float("nan"), out.index)
    out.loc[_validation_after_step(out, step, overlapped), "validation"] = 0.0
    named = out.drop(columns="gen").sum(axis=1) if overlapped else out.sum(axis=1)
    step = step.where(step > 0).fillna(named)  # a zero step timer timed nothing: as if absent
    rest = (step - named).clip(lower=0.0)
    if overlapped:  # untimed trainer time up to the rollout's length is waiting for samples
        waited = rest.clip(upper=out["gen"])
        out["waiting"] += waited
        rest -= waited
    out["other"] = rest
    out["step"] = step
    return out


def _stage_sum(seconds: pd.DataFrame, overlapped: bool) -> pd.Series:
    """Per step, the stage timers' seconds that the step timer holds unless they nest or overlap:
    waits are left out (one timed before the step opens, the first batch's, lies outside it), and so
    is generation beside the step of an overlapped run."""
    return seconds.drop(columns=["waiting"] + (["gen"] if overlapped else [])).sum(axis=1)


def _validation_after_step(seconds: pd.DataFrame, timer: pd.Series, overlapped: bool) -> pd.Series:
    """Steps whose ``testing`` ran after their step timer closed: verl 0.9.1 times it once
    ``timing_s/step`` has stopped, older verl inside it. The step timer cannot hold it where the
    stage timers exceed it with ``testing`` and fit without it (within the overlap tolerance)."""
    stages = _stage_sum(seconds, overlapped)
    room = (1 + OVERLAPPING_TIMERS_TOLERANCE) * timer
    return (timer > 0) & (seconds["validation"] > 0) & (stages > room) & (stages - seconds["validation"] <= room)


def group_seconds(seconds: pd.DataFrame) -> pd.DataFrame:
    """Phase seconds summed into :data:`GROUPS`, plus ``step``."""
    out = pd.DataFrame({g: seconds[list(p)].sum(axis=1) for g, p in GROUPS.items()}, index=seconds.index)
    out["step"] = seconds["step"]
    return out


@dataclass(frozen=True)
class AnatomyResult:
    """Per-step phase seconds and shares, their trend, and findings.

    ``seconds``: index step, one column per phase, ``other`` and ``step``. ``shares``: the
    same columns (without ``step``) divided by ``step``. ``trend``: index phase, columns
    ``first``, ``last`` (share of the first / last quarter of steps' time), ``change`` and
    ``slope_per_step``. ``step_timer``: whether ``timing_s/step`` was logged. ``timed``: index
    step, whether its ``step`` is that timer (else the sum of its stage timers).
    ``overlapped``: generation ran beside the step (see the module docstring). ``logged``: the
    phases a timer of the run measured in some training step (``waiting`` too when generation is
    overlapped and a step has a step timer: the time no trainer timer holds is measured as
    waiting); the others' zero seconds are no measurement (their time, if any, is in ``other``).
    ``logged_recent``: the same over the last quarter of steps, which the headline's means take.
    ``timed_recent``: per phase of ``logged_recent``, how many of those steps timed it: a phase a
    timer measured in some of them only has zero seconds in the rest that are no measurement.
    ``unfinite``: per timer, the steps whose value of it was logged as inf or NaN; a step whose
    step timer was is left out of ``seconds`` (its time is unknown: the sum of its stage timers
    would understate it), one whose stage timer was counts that stage as untimed.
    """

    seconds: pd.DataFrame
    shares: pd.DataFrame
    trend: pd.DataFrame
    step_timer: bool
    overlapped: bool = False
    findings: list[Finding] = field(default_factory=list)
    timed: pd.Series = field(default_factory=lambda: pd.Series(dtype=bool))
    logged: tuple[str, ...] = ()
    logged_recent: tuple[str, ...] = ()
    timed_recent: dict[str, int] = field(default_factory=dict)
    unfinite: dict[str, tuple[int, ...]] = field(default_factory=dict)


def analyze(run: RunReader | RunFrames | str | os.PathLike[str]) -> AnatomyResult:
    """Break every step into phases, trend the shares, and flag what dominates or grows."""
    frames = load(run)
    overlapped = frames.facts.overlapped
    seconds = phase_seconds(frames.steps, overlapped=overlapped)
    seconds = seconds.drop(index=seconds.index.intersection(frames.unfinite.get(STEP_TIMER, ())))
    shares = seconds.drop(columns="step").div(seconds["step"].where(seconds["step"] > 0), axis=0)
    trends = _share_trends(seconds, shares)
    table = pd.DataFrame(
        {
            "first": [t.first for t in trends.values()],
            "last": [t.last for t in trends.values()],
            "change": [t.change for t in trends.values()],
            "slope_per_step": [t.slope_per_step for t in trends.values()],
        },
        index=pd.Index(list(trends), name="phase"),
    )
    step_timer = f"{_PREFIX}step" in frames.steps.columns
    timer = frames.steps[f"{_PREFIX}step"].reindex(seconds.index) if step_timer else None
    timed = timer > 0 if timer is not None else pd.Series(False, index=seconds.index)  # NaN: not timed
    trained = frames.steps.loc[seconds.index]
    if _TESTING in trained.columns:  # a validation after the step timer is no phase of the step
        after = (trained[_TESTING] > 0) & (seconds["validation"] == 0)
        trained = trained.assign(**{_TESTING: trained[_TESTING].mask(after)})
    logged = tuple(_timed_steps(trained, timed, overlapped))
    last = _timed_steps(recent(trained), recent(timed), overlapped) if len(trained) else {}
    result = AnatomyResult(
        seconds,
        shares,
        table,
        step_timer,
        overlapped,
        timed=timed,
        logged=logged,
        logged_recent=tuple(last),
        timed_recent=last,
        unfinite=frames.unfinite,
    )
    if not seconds.empty:
        result.findings.extend(_findings(result))
        if step_timer:
            result.findings.extend(_overlapping_timers(seconds, frames.steps[f"{_PREFIX}step"], overlapped))
    return result


def _timed_steps(trained: pd.DataFrame, timed: pd.Series, overlapped: bool) -> dict[str, int]:
    """The phases a timer measured in some of the steps ``trained`` (wide), whose step timers
    are ``timed``, and in how many; waiting beside an overlapped rollout is also the step timer's
    time no trainer timer holds."""
    out: dict[str, int] = {}
    logged = trained.notna().to_numpy()  # one numpy table: a pandas selection per phase costs more than its count
    for p, names in _phase_timers(trained).items():
        measured = logged[:, trained.columns.get_indexer(names)].any(axis=1)
        if p == "waiting" and overlapped:
            measured |= timed.reindex(trained.index, fill_value=False).to_numpy(dtype=bool)
        if measured.any():
            out[p] = int(measured.sum())
    return out


def _share_trends(seconds: pd.DataFrame, shares: pd.DataFrame) -> dict[str, Trend]:
    """Per phase (a column of ``shares``, per step), its share first and last: each quarter's
    seconds of the phase over its step seconds, among the steps with a share, a ratio of means
    as the headline and ``generation-dominates`` take it (a mean of per-step ratios would tell
    another share of the same steps); the slope is the per-step shares'. On numpy arrays: a
    pandas selection per phase cost more than its sums."""
    step = seconds["step"].to_numpy(dtype=float)
    x = shares.index.to_numpy(dtype=float)
    out = {}
    for phase in shares.columns:
        share = shares[phase].to_numpy(dtype=float)
        known = ~np.isnan(share)
        phase_s, step_s = seconds[phase].to_numpy(dtype=float)[known], step[known]
        if not phase_s.size:
            out[phase] = Trend(math.nan, math.nan, math.nan)
            continue
        q = quarter(phase_s.size)
        first = float(phase_s[:q].sum() / step_s[:q].sum())
        last = float(phase_s[-q:].sum() / step_s[-q:].sum())
        out[phase] = Trend(first, last, slope(x[known], share[known]))
    return out


def _overlapping_timers(seconds: pd.DataFrame, timer: pd.Series, overlapped: bool) -> list[Finding]:
    """Steps whose stage timers add up to more than their step timer: nested or overlapping
    timers, whose shares of the (wall-clock) step then add up to more than 1, which the report
    should say. The stages are :func:`_stage_sum`'s, a validation after the step left out."""
    logged = timer.reindex(seconds.index)
    excess = (_stage_sum(seconds.drop(columns=["other", "step"]), overlapped) - logged)[logged > 0]
    over = excess[excess > OVERLAPPING_TIMERS_TOLERANCE * logged[excess.index]]
    if over.empty:
        return []
    several = len(over) > 1
    return [
        finding(
            "stage-timers-overlap",
            Severity.INFO,
            {"steps": len(over), "of_steps": len(excess), "mean_excess_s": float(over.mean())},
            f"in {len(over)} of {fmt_steps(len(excess))} the stage timers add up to more than timing_s/step "
            f"(by {fmt_seconds(over.mean())} s{' on average' if several else ''}): some are nested in others or "
            "ran at the same time. The step time is the wall clock's (timing_s/step), so "
            + ("those steps' phase shares add up" if several else "that step's phase shares add up")
            + " to more than 100%",
        )
    ]


def _findings(r: AnatomyResult) -> list[Finding]:
    now = recent(r.seconds).mean()
    share = now.drop("step") / now["step"] if now["step"] > 0 else now.drop("step") * 0.0
    out: list[Finding] = []
    gen = r.trend.loc["gen"]
    if not r.overlapped and share["gen"] >= GENERATION_SHARE_INFO:
        out.append(
            finding(
                "generation-dominates",
                Severity.INFO,
                {"generation_share": share["gen"], "generation_s": now["gen"], "step_s": now["step"]},
                f"generation takes {fmt_seconds(now['gen'])} s of {fmt_seconds(now['step'])} s steps ({share['gen']:.0%}) over the "
                "last quarter of the run: decode throughput and the long tail are the levers, not training",
            )
        )
    if not r.overlapped and gen["change"] >= GENERATION_SHARE_GROWTH_WARN:
        out.append(
            finding(
                "generation-share-growing",
                Severity.WARN,
                {"first": gen["first"], "last": gen["last"], "slope_per_step": gen["slope_per_step"]},
                f"generation share rose {gen['change'] * 100:.0f} points ({gen['first']:.0%} -> {gen['last']:.0%}): "
                "the balanced rollout:train split has moved towards rollout; re-run the topology what-if",
            )
        )
    out.extend(_untracked_time(recent(r.seconds), recent(r.timed)))
    if share["switching"] >= SWITCHING_WARN:
        out.append(
            finding(
                "switching-costly",
                Severity.WARN,
                {"switching_share": share["switching"], "switching_s": now["switching"], "step_s": now["step"]},
                f"memory switching takes {fmt_seconds(now['switching'])} s per step ({share['switching']:.0%}), above the "
                f"{SWITCHING_WARN:.0%} a healthy colocated run needs: check pinned-memory offload",
            )
        )
    return out


def _untracked_time(last: pd.DataFrame, timed: pd.Series) -> list[Finding]:
    """``untracked-time`` over the recent steps ``last`` that a step timer holds (``timed``): only
    there is ``other`` measured; elsewhere it is 0 by definition, and the step the phases' sum, so
    counting those steps would dilute the share. No such step: nothing to judge."""
    held = last[timed.reindex(last.index, fill_value=False)]
    if held.empty:
        return []
    other, step = float(held["other"].mean()), float(held["step"].mean())  # step > 0: a timer above zero
    if other / step < UNTRACKED_TIME_WARN:
        return []
    partly = (
        f" (in {len(held)} of the {len(last)} recent steps that timing_s/step holds)" if len(held) < len(last) else ""
    )
    return [
        finding(
            "untracked-time",
            Severity.WARN,
            {
                "other_share": other / step,
                "other_s": other,
                "step_s": step,
                "timed_steps": len(held),
                "recent_steps": len(last),
            },
            f"{fmt_seconds(other)} s of each {fmt_seconds(step)} s step{partly} is in no stage timer: "
            "add spans around data loading, logging and hooks to find it",
        )
    ]
