"""How has the balanced rollout:train split moved over the run, and how many GPUs should move now?

Responses lengthen during training, generation time grows 2-4x while training grows 2x,
so a split that was balanced at the start is not at the end (2:1 drifting towards 3:1 or
4:1). This module fits the topology ledger to each step on its own (generation split
into throughput and tail by the long-tail share, forward + training, scaled to all GPUs
as ``topology.measure`` does for the recent window) and finds each step's best split for
the run's topology (async streaming for colocated runs, as the option to move to). For
async runs, verl's idle ratios are the measured side of the same question: rollouter idle
high and trainer idle low means GPUs should move to the trainer, and the reverse.
An async run on separate pools leaves out its first step, and each resumed job's first: the
pool's busy time in it is the pipeline filling (the first batch while the trainer waits, then
the staleness buffer ahead of later steps), not one batch's generation.
A tail estimated from response lengths can be unknown (the long-tail analyzer's NaN): such a
step's generation is taken as all throughput part, which only more GPUs shrink, so its balanced
split leans to rollout by up to the tail (``tail_unknown``; not for async streaming on separate
pools, whose rollout pool's busy time needs no tail share).
Evidence: ``timing_s/*`` steps, trajectory finish times, idle ratios, ``meta.json`` split.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Collection
from dataclasses import dataclass, field

import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_count, fmt_seconds
from rlscope.advice.thresholds import SPLIT_GAIN_MIN
from rlscope.analyzers import anatomy as _anatomy
from rlscope.analyzers import longtail as _longtail
from rlscope.analyzers._data import RunFacts, RunFrames, early, load, recent
from rlscope.analyzers.topology import (
    StepModel,
    TopologyResult,
    async_throughput_s,
    best_split,
    best_splits,
    fill_steps,
    idle_imbalance,
    step_time,
    unmodelled,
)
from rlscope.trace.reader import RunReader

__all__ = ["DriftResult", "analyze", "best_per_step", "model_of", "per_step_models", "steady_models"]


@dataclass(frozen=True)
class DriftResult:
    """Per-step balanced split for ``topology`` and the first- vs last-quarter split."""

    topology: str
    per_step: pd.DataFrame  # step: t_thr_s, t_tail_s, t_train_s, best_rollout, best_train, best_step_s
    first_rollout: float
    last_rollout: float
    n_gpus: int | None
    findings: list[Finding] = field(default_factory=list)
    tail_unknown: bool = False  # some step's estimated tail is unknown and modelled as none


_NO_TAIL = (
    " (the tail estimated from response lengths is unknown in some steps, taken there as no tail: their "
    "generation is all throughput part, which leans the balanced split to rollout; log trajectories to measure it)"
)


_MODEL_COLUMNS = ("t_thr_s", "t_tail_s", "t_train_s", "t_sync_s", "t_switch_s")


def per_step_models(frames: RunFrames, anatomy: _anatomy.AnatomyResult, tails: pd.Series) -> pd.DataFrame:
    """Each step's ledger inputs (seconds as if on all GPUs): ``t_thr_s``, ``t_tail_s``,
    ``t_train_s``, and the weight sync and switching every topology adds, ``t_sync_s``, ``t_switch_s``."""
    facts = frames.facts
    if unmodelled(facts, frames.steps):  # an async run whose pools' time is not known: no model
        return pd.DataFrame(columns=list(_MODEL_COLUMNS), index=pd.Index([], name="step"))
    groups = _anatomy.group_seconds(anatomy.seconds)
    share = tails.reindex(groups.index).fillna(0.0)
    if facts.kind == "async_streaming":  # the tail is hidden: the async split does not need it
        t_thr = async_throughput_s(frames, groups, share)
        t_tail = pd.Series(0.0, index=groups.index)
    else:
        t_tail = groups["generation"] * share
        t_thr = groups["generation"] - t_tail
    t_train = groups["forward"] + groups["training"]
    if facts.is_pooled:
        t_thr = t_thr * facts.rollout_gpus / facts.n_gpus
        t_train = t_train * facts.train_gpus / facts.n_gpus
    out = pd.DataFrame(
        {
            "t_thr_s": t_thr,
            "t_tail_s": t_tail,
            "t_train_s": t_train,
            "t_sync_s": groups["weight_sync"],
            "t_switch_s": groups["switching"],
        }
    )
    return out[(out["t_thr_s"] > 0) & (out["t_train_s"] > 0)]


def steady_models(models: pd.DataFrame, facts: RunFacts, fills: Collection[int]) -> pd.DataFrame:
    """``models`` (rows of :func:`per_step_models`) less the pipeline fills of an async run on
    separate pools, ``fills``: the first training step of the run and of each job that resumed it
    (``_data.pipeline_fills``, ``topology.fill_steps``). The rollout pool's busy time in one (``topology.async_busy_share``:
    verl's occupancy share, else 1 - its idle ratio) covers the first batch, generated while the
    trainer waits, and the staleness buffer it fills for later steps, so as one step's T_thr it
    would call for far more rollout GPUs."""
    if facts.kind != "async_streaming" or facts.shares_gpus:
        return models
    return models.drop(index=list(fills), errors="ignore")


def best_per_step(models: pd.DataFrame, n: int, topology: str) -> pd.DataFrame:
    """Each step's best split (rows of :func:`per_step_models`): ``best_rollout``, ``best_train``
    and ``best_step_s`` (all floats)."""
    n_rollout, step_s = best_splits(
        models["t_thr_s"], models["t_tail_s"], models["t_train_s"], models["t_sync_s"], n, topology
    )
    rollout = n_rollout.astype(float)
    return pd.DataFrame({"best_rollout": rollout, "best_train": n - rollout, "best_step_s": step_s}, index=models.index)


def analyze(
    run: RunReader | RunFrames | str | os.PathLike[str],
    anatomy: _anatomy.AnatomyResult | None = None,
    longtail: _longtail.LongTailResult | None = None,
    what_if: TopologyResult | None = None,
) -> DriftResult:
    """The balanced split per step, its drift, and how many GPUs to move now.

    ``what_if`` is the topology analyzer's result for the run: when it already recommends
    moving GPUs (``split-imbalanced``), the drift finding explains that move rather than
    recommending it a second time.
    """
    frames = load(run)
    anatomy = anatomy or _anatomy.analyze(frames)
    longtail = longtail or _longtail.analyze(frames)
    facts = frames.facts
    topology = facts.kind if facts.is_pooled else "async_streaming"
    n = facts.n_gpus
    tails = longtail.per_step["tail_share"] if "tail_share" in longtail.per_step else pd.Series(dtype=float)
    models = pd.DataFrame()
    if n and n > 1 and not anatomy.seconds.empty:
        fills = fill_steps(frames, anatomy.seconds.index)
        models = steady_models(per_step_models(frames, anatomy, tails), facts, fills)
    if models.empty:
        return DriftResult(topology, models, math.nan, math.nan, n)
    per_step = models.join(best_per_step(models, n, topology))
    first = float(early(per_step["best_rollout"]).mean())
    last = float(recent(per_step["best_rollout"]).mean())
    hidden = facts.kind == "async_streaming" and not facts.shares_gpus  # the busy time needs no tail share
    unknown = longtail.estimated and not hidden and bool(tails.reindex(models.index).isna().any())
    result = DriftResult(topology, per_step, first, last, n, tail_unknown=unknown)
    moves = [f for f in (what_if.findings if what_if is not None else []) if f.id == "split-imbalanced"]
    measured = float(recent(anatomy.seconds["step"]).mean()) if not anatomy.seconds.empty else math.nan
    found = _findings(result, frames, moves[0] if moves else None, measured)
    if unknown:
        found = [
            dataclasses.replace(
                f, evidence={**f.evidence, "tail_unknown": True}, recommendation=f.recommendation + _NO_TAIL
            )
            for f in found
        ]
    result.findings.extend(found)
    return result


def model_of(m: pd.Series, n: int) -> StepModel:
    """The what-if model of one row of :func:`per_step_models` (or a mean of rows) on ``n`` GPUs."""
    return StepModel(
        float(m["t_thr_s"]),
        float(m["t_tail_s"]),
        float(m["t_train_s"]),
        n,
        float(m["t_sync_s"]),
        float(m["t_switch_s"]),
    )


def _recent_model(per_step: pd.DataFrame, n: int) -> StepModel:
    """The recent steps' mean model: what the step times a finding predicts are computed from,
    with the weight sync and switching the topology analyzer's what-if adds too."""
    return model_of(recent(per_step[list(_MODEL_COLUMNS)]).mean(), n)


def _findings(r: DriftResult, frames: RunFrames, move: Finding | None, measured_s: float) -> list[Finding]:
    """``measured_s``: the recent measured step, said beside the model's."""
    assert r.n_gpus is not None
    facts = frames.facts
    model = _recent_model(r.per_step, r.n_gpus)
    best = best_split(model, r.topology)
    evidence = {
        "topology": r.topology,
        "first_rollout": round(r.first_rollout),
        "first_train": r.n_gpus - round(r.first_rollout),
        "last_rollout": best.n_rollout,
        "last_train": best.n_train,
        "steps": len(r.per_step),
    }
    if round(r.first_rollout) == best.n_rollout:
        return []  # no drift; a split that is off all along is topology's split-imbalanced
    if not facts.is_pooled:
        return [
            finding(
                "split-drift",
                Severity.INFO,
                evidence,
                f"if this run moves to async streaming, size it for now ({best.n_rollout}:{best.n_train}, "
                f"predicted {fmt_seconds(best.step_s)} s per step), not for its start ({evidence['first_rollout']}:"
                f"{evidence['first_train']}), and re-check as responses keep growing",
            )
        ]
    current = facts.rollout_gpus
    now_s = step_time(model, r.topology, current)
    imbalance = idle_imbalance(frames.steps)
    idle = None if imbalance is None else {"trainer": "training", "rollouter": "rollout"}[imbalance[0]]
    k = best.n_rollout - current
    if k == 0 and idle:
        k = 1 if idle == "rollout" else -1  # the ledger sees balance; the measured idle ratios do not
    started = f"{evidence['first_rollout']}:{evidence['first_train']}"
    note = None  # the drift alone, with no move to recommend
    if k == 0:
        note = (
            f"the split {current}:{r.n_gpus - current} is balanced for recent steps; it drifted from {started}: "
            "re-check as responses grow"
        )
    elif move is not None and (move.evidence["best_rollout"] > move.evidence["n_rollout"]) == (k > 0):
        # topology already recommends this move (the same way): say why, not the move again
        note = (
            f"the balanced split drifted from {started} to {best.n_rollout}:{best.n_train} over {len(r.per_step)} "
            "steps, which is why split-imbalanced recommends moving GPUs now: re-check after the move, as "
            "responses keep growing"
        )
    if note is not None:
        return [
            finding("split-drift", Severity.INFO, {**evidence, "current_rollout": current, "step_now_s": now_s}, note)
        ]
    target = current + k
    after_s = step_time(model, r.topology, target)
    src, dst = ("training", "rollout") if k > 0 else ("rollout", "training")
    gain = 1 - after_s / now_s
    evidence |= {
        "current_rollout": current,
        "move_gpus": abs(k),
        "to": dst,
        "step_now_s": now_s,
        "step_after_s": after_s,
        "idle_says": idle,
    }
    why = ""
    if imbalance is not None:
        _, rollouter, trainer = imbalance
        evidence |= {"rollouter_idle": rollouter, "trainer_idle": trainer}
        why = f"; verl's idle ratios agree (rollouter {rollouter:.0%}, trainer {trainer:.0%} idle)"
        if idle != dst:
            why = (
                f"; but verl's idle ratios point the other way (rollouter {rollouter:.0%}, trainer {trainer:.0%} idle)"
            )
    # a move only verl's idle ratios call for is already topology's async-idle-imbalanced warning
    severity = Severity.WARN if gain >= SPLIT_GAIN_MIN else Severity.INFO
    gpus = f"{fmt_count(abs(k), 'GPU')} from {src} to {dst}"
    drifted = (
        f"the balanced split drifted from {started} to {best.n_rollout}:{best.n_train} over {len(r.per_step)} steps"
    )
    if gain >= 0:
        measured = f", {fmt_seconds(measured_s)} s measured" if math.isfinite(measured_s) else ""
        text = (
            f"move {gpus}: the model predicts {fmt_seconds(after_s)} s a step, against {fmt_seconds(now_s)} s "
            f"modelled for {current}:{r.n_gpus - current}{measured}; {drifted}{why}"
        )
    else:  # only the idle ratios call for the move: the ledger sees the split as balanced
        assert imbalance is not None
        text = (
            f"verl's idle ratios call for moving GPUs from {src} to {dst} (rollouter {imbalance[1]:.0%}, trainer "
            f"{imbalance[2]:.0%} idle), but the ledger predicts the current {current}:{r.n_gpus - current} is already "
            f"the best split ({fmt_seconds(now_s)} s; {target}:{r.n_gpus - target} would take {fmt_seconds(after_s)} s): the two "
            f"disagree, so move the smallest step your pools allow and re-measure both idle ratios and the step "
            f"time; {drifted}"
        )
    return [finding("split-drift", severity, evidence, text)]
