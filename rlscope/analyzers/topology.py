"""Topology what-if: how long would a step take colocated, separated, overlapped or async, at which split?

Evidence: the measured throughput part T_thr and tail T_tail of generation (long-tail
analyzer), forward + training time T_t and weight-sync time T_sync (step anatomy), and the
GPU count and current split from ``meta.json``. Times measured on a pool of n_r (or n_t) GPUs
are scaled to all n GPUs (T_thr * n_r / n); the tail does not scale with GPUs.

With n GPUs, n_r for rollout and n_t = n - n_r for training:

- colocated: T = T_thr + T_tail + T_t + T_switch + T_sync
- separated, sync: T = T_thr n/n_r + T_tail + T_t n/n_t + T_sync
- one-step overlap: T = max(T_thr n/n_r + T_tail, T_t n/n_t) + T_sync
- async streaming: T = max(T_thr n/n_r, T_t n/n_t) (the tail and the sync are overlapped)

verl's ``colocate_async`` is async in its samples but takes turns on all GPUs: its step now is
modelled as colocated (T_thr + T_tail + T_t + T_switch + T_sync), and the async streaming row is
what separate pools would give it.

The best split of each pooled topology is the integer n_r with the shortest step. With tail
share f = T_tail / (T_thr + T_tail), async over colocated is T_gen + T_t over T_thr + T_t, i.e.
1 / (1 - f T_gen / (T_gen + T_t)) at the continuous balanced split (8B: 810 / 614 = 1.32x).
Overlapping rollout R with learner L, against running them one after the other, is bounded
by (R + L) / max(R, L), with R and L as the run has them now: each on its own pool when
pooled, else on all GPUs, and under async streaming R without the tail it overlaps (8B
separated at 46:18: 1501 / 761 = 1.97x).

A tail estimated from response lengths can be unknown (the long-tail analyzer's NaN, lengths
bunched near the max). The what-if then models no tail (``tail_unknown``): every row's
generation is all throughput part, which more GPUs shrink, so what async streaming gains by
overlapping the tail is left out and ``async_speedup`` is a lower bound; ``async_speedup_max``
is the same model with the unknown tail at its bound (the recent ``tail_share_max``; under
async streaming each unknown step's: the most it can be, if all responses decode in one wave): at the continuous balanced split, the factor that overlapping
the tail would add to every async streaming speedup.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_count, fmt_seconds
from rlscope.advice.thresholds import (
    ASYNC_SPEEDUP_INFO,
    ASYNC_SPEEDUP_WARN,
    IDLE_RATIO_HIGH,
    IDLE_RATIO_LOW,
    SPLIT_GAIN_MIN,
)
from rlscope.analyzers import anatomy as _anatomy
from rlscope.analyzers import longtail as _longtail
from rlscope.analyzers._data import TOPOLOGIES, RunFacts, RunFrames, load, recent
from rlscope.collectors.verl_metrics import ROLLOUT_UTILIZATION_KEY
from rlscope.trace.reader import RunReader

__all__ = [
    "BUSY_BOUND_NOTE",
    "POOLED",
    "ROLLOUTER_IDLE",
    "ROLLOUT_UTILIZATION",
    "TOPOLOGIES",
    "TRAINER_IDLE",
    "Split",
    "StepModel",
    "TopologyResult",
    "analyze",
    "async_busy_bounded",
    "async_busy_share",
    "async_speedup",
    "async_throughput_s",
    "balanced_ratio",
    "best_split",
    "best_splits",
    "fill_steps",
    "idle_imbalance",
    "measure",
    "overlap_bound",
    "sides_now",
    "split_table",
    "step_time",
    "tail_sensitivity",
    "unmodelled",
]

POOLED = TOPOLOGIES[1:]
# verl fully_async's idle ratios (canonical names; older releases drop the prefix)
ROLLOUTER_IDLE = "fully_async/rollouter/idle_ratio"
TRAINER_IDLE = "fully_async/trainer/idle_ratio"
# verl's occupancy-weighted use of the rollout pool per policy version (0.9.1 on)
ROLLOUT_UTILIZATION = ROLLOUT_UTILIZATION_KEY
BUSY_BOUND_NOTE = (
    f"the rollout pool's busy time is 1 - {ROLLOUTER_IDLE} (no {ROLLOUT_UTILIZATION} logged), an upper bound "
    "that counts its draining tail as busy"
)


@dataclass(frozen=True)
class StepModel:
    """The what-if inputs, as if measured colocated on all ``n_gpus`` GPUs."""

    t_thr_s: float
    t_tail_s: float
    t_train_s: float
    n_gpus: int
    t_sync_s: float = 0.0
    t_switch_s: float = 0.0

    @property
    def t_gen_s(self) -> float:
        return self.t_thr_s + self.t_tail_s

    @property
    def tail_share(self) -> float:
        return self.t_tail_s / self.t_gen_s if self.t_gen_s > 0 else 0.0


@dataclass(frozen=True)
class Split:
    """A rollout:train split and the step time a topology predicts for it."""

    n_rollout: int
    n_train: int
    step_s: float


def step_time(model: StepModel, topology: str, n_rollout: int | None = None) -> float:
    """Predicted step seconds of ``topology`` (one of :data:`TOPOLOGIES`) at ``n_rollout`` GPUs."""
    m, n = model, model.n_gpus
    if topology == "colocated":
        return m.t_thr_s + m.t_tail_s + m.t_train_s + m.t_switch_s + m.t_sync_s
    if topology not in POOLED:
        raise ValueError(f"unknown topology {topology!r}; expected one of {', '.join(TOPOLOGIES)}")
    if n_rollout is None or not 0 < n_rollout < n:
        raise ValueError(f"{topology} needs 0 < n_rollout < {n}, got {n_rollout}")
    return float(_pooled_step_s(topology, n, m.t_thr_s, m.t_tail_s, m.t_train_s, m.t_sync_s, n_rollout))


def _pooled_step_s(topology: str, n: int, t_thr: Any, t_tail: Any, t_train: Any, t_sync: Any, n_rollout: Any) -> Any:
    """The pooled topologies' step time (the module's formulas) on floats or on numpy arrays that
    broadcast: one step at one split, or every step at every split at once."""
    gen = t_thr * n / n_rollout
    train = t_train * n / (n - n_rollout)
    if topology == "separated_sync":
        return gen + t_tail + train + t_sync
    if topology == "one_step_overlap":
        return np.maximum(gen + t_tail, train) + t_sync
    return np.maximum(gen, train)


def split_table(model: StepModel) -> pd.DataFrame:
    """Step seconds of every pooled topology at every integer split (index ``n_rollout``)."""
    splits = range(1, model.n_gpus)
    table = pd.DataFrame(
        {t: [step_time(model, t, r) for r in splits] for t in POOLED},
        index=pd.Index(splits, name="n_rollout"),
    )
    table.insert(0, "n_train", model.n_gpus - table.index)
    return table


def best_split(model: StepModel, topology: str) -> Split:
    """The integer split with the shortest predicted step (the fewest rollout GPUs on a tie)."""
    m = model
    n_rollout, step_s = best_splits([m.t_thr_s], [m.t_tail_s], [m.t_train_s], [m.t_sync_s], m.n_gpus, topology)
    return Split(int(n_rollout[0]), m.n_gpus - int(n_rollout[0]), float(step_s[0]))


def best_splits(
    t_thr_s: Any, t_tail_s: Any, t_train_s: Any, t_sync_s: Any, n_gpus: int, topology: str
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`best_split` of many models at once (equal-length sequences of their inputs): each
    one's best ``n_rollout`` and its step seconds. Every split of every model is one array, as
    drift asks for a split per step."""
    if topology not in POOLED:
        raise KeyError(topology)
    if n_gpus < 2:
        raise ValueError(f"{fmt_count(n_gpus, 'GPU')} cannot be split into a rollout and a training pool")

    def column(values: Any) -> np.ndarray:
        return np.asarray(values, dtype=float)[:, None]

    splits = np.arange(1, n_gpus)
    times = _pooled_step_s(
        topology, n_gpus, column(t_thr_s), column(t_tail_s), column(t_train_s), column(t_sync_s), splits
    )
    unknown = np.isnan(times)
    if unknown.all(axis=1).any():
        raise ValueError(f"no split of {fmt_count(n_gpus, 'GPU')} has a predicted {topology} step time")
    best = np.where(unknown, np.inf, times).argmin(axis=1)  # the first minimum: the fewest rollout GPUs
    return splits[best], times[np.arange(len(times)), best]


def balanced_ratio(t_gen_s: float, t_train_s: float) -> float:
    """n_r / n_t that equalises the two sides, from times measured on the same GPUs."""
    return t_gen_s / t_train_s


def overlap_bound(rollout_s: float, learner_s: float) -> float:
    """Upper bound on the speedup from overlapping rollout and learner: (R + L) / max(R, L)."""
    return (rollout_s + learner_s) / max(rollout_s, learner_s)


def sides_now(
    model: StepModel, n_rollout: int | None, n_train: int | None, topology: str = "colocated"
) -> tuple[float, float]:
    """(rollout R, learner L) seconds per step as the run has them: on their own pools when
    it is pooled (``n_rollout``, ``n_train``), else on all GPUs. Under async streaming the
    rollout is its throughput part alone: the tail is overlapped, as in its step time."""
    tail = 0.0 if topology == "async_streaming" else model.t_tail_s
    if n_rollout and n_train:
        n = model.n_gpus
        return model.t_thr_s * n / n_rollout + tail, model.t_train_s * n / n_train
    return model.t_thr_s + tail, model.t_train_s


def async_speedup(tail_share: float, t_gen_s: float, t_train_s: float) -> float:
    """Async streaming over colocated: 1 / (1 - f T_gen / (T_gen + T_train))."""
    return 1.0 / (1.0 - tail_share * t_gen_s / (t_gen_s + t_train_s))


def tail_sensitivity(t_thr_s: float, t_train_s: float, tail_shares: Iterable[float]) -> pd.DataFrame:
    """Colocated vs async step time as the tail share f grows, T_thr and T_train held fixed.

    T_tail = T_thr f / (1 - f); async is T_thr + T_train at the continuous balanced split.
    """
    f = pd.Index(list(tail_shares), name="tail_share", dtype=float)
    tail = t_thr_s * f / (1 - f)
    colocated = t_thr_s + tail + t_train_s
    asynchronous = t_thr_s + t_train_s
    return pd.DataFrame(
        {"t_tail_s": tail, "colocated_s": colocated, "async_s": asynchronous, "speedup": colocated / asynchronous},
        index=f,
    )


@dataclass(frozen=True)
class TopologyResult:
    """What each topology predicts for this run.

    ``model``: the inputs (None when the run lacks the GPU count or timings). ``current``:
    the run's topology, one of :data:`TOPOLOGIES`; ``n_rollout``/``n_train`` its split if
    pooled. ``what_if``: index topology; ``n_rollout``, ``n_train`` (best split; NaN for
    colocated), ``step_s``, ``speedup`` over the current topology's predicted step.
    ``splits``: :func:`split_table`. ``async_speedup`` and ``overlap_bound`` as defined above.
    ``step_measured_s``: the recent measured step, to compare with the model's ``step_now_s``
    (of the same steps: an async run on separate pools' pipeline fills left out).
    ``shared``: async on GPUs that rollout and training take turns on (verl's ``colocate_async``),
    whose ``current`` is then ``colocated``: its GPU time is the colocated row's. ``missing``: why
    the run has no model (:func:`unmodelled` for an async run on separate pools).
    ``busy_upper_bound``: an async run on separate pools whose rollout busy time is on some step
    an upper bound (:func:`async_busy_bounded`), which leans the best split towards rollout.
    ``tail_unknown``: the model has no tail, its estimate from response lengths being unknown;
    ``async_speedup`` is then a lower bound and ``async_speedup_max`` its value with the tail at
    its bound (NaN otherwise). ``out_of_range``: per verl share of time the run logged outside
    [0, 1] (its idle ratios, its occupancy share), the steps and values read as not logged
    (``RunFrames.out_of_range``): such a step's busy time is its neighbours', as for a step
    that logged none.
    """

    model: StepModel | None
    current: str
    n_rollout: int | None
    n_train: int | None
    what_if: pd.DataFrame
    splits: pd.DataFrame
    async_speedup: float
    overlap_bound: float
    step_measured_s: float = math.nan
    findings: list[Finding] = field(default_factory=list)
    shared: bool = False
    missing: str | None = None
    busy_upper_bound: bool = False
    tail_unknown: bool = False
    async_speedup_max: float = math.nan
    out_of_range: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)

    @property
    def step_now_s(self) -> float:
        """The model's step time for the current topology and split (NaN if the split is unknown)."""
        if self.model is None or (self.current != "colocated" and self.n_rollout is None):
            return math.nan
        return step_time(self.model, self.current, self.n_rollout)

    def best(self) -> tuple[str, float, float, float]:
        """The what-if's shortest predicted step as ``(topology, n_rollout, n_train, step_s)``
        (NaN GPU counts for colocated); on a tie, the run as it is, its topology at its split."""
        row = str(self.what_if["step_s"].idxmin())
        w = self.what_if.loc[row]
        now = self.step_now_s
        if self.current in self.what_if.index and now <= float(w["step_s"]) * (1 + 1e-9):  # False for NaN
            n_r, n_t = (math.nan, math.nan) if self.n_rollout is None else (self.n_rollout, self.n_train)
            return self.current, float(n_r), float(n_t), now
        return row, float(w["n_rollout"]), float(w["n_train"]), float(w["step_s"])

    def improves(self, step_s: float) -> bool:
        """Whether a predicted step of ``step_s`` is a gain to offer: shorter than the model's
        step now, model against model as every speedup (what the model leaves out cancels);
        where the current step is not modelled (a split unknown), nothing says it is not."""
        now = self.step_now_s
        return math.isnan(now) or step_s < now


def async_busy_share(steps: pd.DataFrame) -> pd.Series:
    """Per step of an async run, the share of the step the rollout pool is busy at full
    concurrency, T_thr / step on the pool: verl's occupancy share where it logs one, else 1 -
    its rollouter idle ratio, an upper bound (:func:`async_busy_bounded`); 1 when the run logs
    neither (never idle: an upper bound too).

    DOMAIN.md's throughput part T_thr is generation at full concurrency, its tail T_tail the
    time fewer and fewer sequences run while the rest of the pool waits. verl's occupancy share
    ``dynamic_resource/rollout_resource_utilization``, sum dt min(1, active / capacity) capacity
    over sum dt capacity, times the version's time is the pool's work at full concurrency: T_thr
    as the async step T = max(T_thr n/n_r, T_t n/n_t) asks for it. (It weighs slot-seconds, and
    a decode step with fewer sequences is shorter, so it reads low where the pool runs part-empty:
    ``sample_traces/README.md``'s known gap.) verl's idle ratio is by time: the pool is active
    from the version's start until it has paused and drained, so 1 - idle ratio is T_thr plus
    that drain, a tail in DOMAIN's sense counted as busy. It is not reduced by the measured tail
    share f (T_thr = busy (1 - f)): f is the tail of a batch generated at once, while the pool
    drains only in a version where the staleness limit stopped it, and no longer than its last
    samples take. In a version it never paused (idle 0: rollout is the bottleneck) there is no
    drain, and subtracting f would shrink T_thr just where rollout needs more GPUs; the drain's
    part-occupancy work is not zero either.

    A trajectory's finish time counts from the earliest submit of the batch it joined, which
    under async streaming reaches back over earlier steps, so finish times cannot give it.
    """
    share = pd.Series(float("nan"), index=steps.index)
    if ROLLOUT_UTILIZATION in steps:
        share = steps[ROLLOUT_UTILIZATION].astype(float)
    if ROLLOUTER_IDLE in steps:
        share = share.fillna(1.0 - steps[ROLLOUTER_IDLE].astype(float))
    # a step with neither (one outside [0, 1] is not read) takes its neighbours' (the last one logged, else the next)
    return share.ffill().bfill().fillna(1.0)


def async_busy_bounded(steps: pd.DataFrame) -> bool:
    """Whether :func:`async_busy_share` is an upper bound on some step: one with the rollouter's
    idle ratio but no occupancy share (verl before 0.9.1), whose busy time counts the pool's
    draining tail as busy."""
    if ROLLOUTER_IDLE not in steps:
        return False
    utilization = steps[ROLLOUT_UTILIZATION] if ROLLOUT_UTILIZATION in steps else pd.Series(dtype=float)
    return bool((steps[ROLLOUTER_IDLE].notna() & utilization.reindex(steps.index).isna()).any())


def unmodelled(facts: RunFacts, steps: pd.DataFrame) -> str | None:
    """Why an async run on separate pools has no what-if model, or None if it has one.

    Its rollout pool's busy time comes only from verl's rollouter occupancy share or idle ratio
    (the fully async trainer logs them; the v1 ``separate_async`` trainer does not): the
    trainer's ``gen`` timer is its wait for samples, and finish times reach back over earlier
    steps. Assuming the pool
    busy the whole step would make rollout the bottleneck of every such run, and every split
    advice a move towards it; the pools' sizes are needed to scale either side.
    """
    if facts.kind != "async_streaming" or facts.shares_gpus:
        return None
    if facts.n_gpus == 1:  # verl gives each pool a GPU at least: the count or the topology is wrong
        return "an async run on separate pools needs 2 GPUs or more, but meta.json's gpu.count is 1"
    if not facts.is_pooled:
        return "the what-if of an async run on separate pools needs its rollout:train split, meta.json's split"
    if not any(k in steps and steps[k].notna().any() for k in (ROLLOUT_UTILIZATION, ROLLOUTER_IDLE)):
        return (
            f"the what-if of an async run on separate pools needs the rollout pool's busy time, {ROLLOUT_UTILIZATION} or "
            f"{ROLLOUTER_IDLE}, which verl's fully async trainer logs: the trainer's gen timer is only its wait for samples"
        )
    return None


def _no_model(facts: RunFacts, anatomy: _anatomy.AnatomyResult, steps: pd.DataFrame) -> str:
    """Why :func:`measure` gave no model to a run that :func:`unmodelled` does not explain."""
    if not facts.n_gpus:
        return "the what-if needs the run's GPU count, meta.json gpu.count"
    if anatomy.seconds.empty:
        if any(str(c).startswith("timing_s/") for c in steps.columns):
            return "the what-if needs training steps: the run's timers are validation or checkpointing only"
        return "the what-if needs step timers, timing_s/*"
    groups = recent(_anatomy.group_seconds(anatomy.seconds)).mean()
    if not groups["forward"] + groups["training"] > 0:
        return "the what-if needs a training time: no update_actor, old_log_prob or ref timer above zero"
    return "the what-if needs a generation time: no rollout time above zero (timing_s/gen, or the pool's busy time)"


def async_throughput_s(frames: RunFrames, groups: pd.DataFrame, tail_shares: pd.Series) -> pd.Series:
    """Per step of an async run (index of ``groups``, :func:`anatomy.group_seconds`), the
    throughput part T_thr of its generation: seconds on the GPUs it ran on (the rollout pool
    when pooled), before scaling to all GPUs.

    - Separate pools: the pool's busy time, :func:`async_busy_share` x step, from verl's
      rollouter occupancy share, else its idle ratio (a run with neither has no model:
      :func:`unmodelled`). Their trainer's ``gen`` timer is its wait for samples (verl:
      ``trainer/idle_ratio = gen / step``), not the pool's time, and finish times reach back
      over earlier steps.
    - Shared GPUs (verl's ``colocate_async``): the engines generate while the step waits in
      ``gen``, so as for a synchronous run, the ``gen`` timer less the tail share f of that step
      (``tail_shares``), at most the step; a step without a gen timer takes the whole step.
    """
    step = groups["step"]
    if frames.facts.shares_gpus:
        gen = groups["generation"].where(groups["generation"] > 0)
        f = tail_shares.reindex(groups.index).fillna(0.0)
        return (gen * (1.0 - f)).clip(upper=step).fillna(step)
    return async_busy_share(frames.steps).reindex(groups.index).fillna(1.0) * step


def fill_steps(frames: RunFrames, steps: pd.Index) -> frozenset[int]:
    """The steps an async run on separate pools filled its pipeline in (``RunFrames.fills``: the
    run's first training step and each resumed job's), else the first of ``steps``. The pool's
    busy time in one covers the trainer's wait for its first batch and the staleness buffer,
    not one batch's generation: the what-if and the balanced split leave them out."""
    if frames.fills is not None:
        return frames.fills
    return frozenset({int(steps.min())}) if len(steps) else frozenset()


def _steady(frames: RunFrames, seconds: pd.DataFrame) -> pd.DataFrame:
    """The steps (rows of ``seconds``) the model is of: an async run on separate pools' steady
    steps, its :func:`fill_steps` left out (unless nothing else is left), else all of them."""
    facts = frames.facts
    if facts.kind != "async_streaming" or facts.shares_gpus:
        return seconds
    steady = seconds.drop(index=list(fill_steps(frames, seconds.index)), errors="ignore")
    return steady if len(steady) else seconds


def _tail_for(t_thr: float, tail_share: float) -> float:
    """The tail beside throughput part ``t_thr`` at tail share f: T_thr f / (1 - f)."""
    return t_thr * tail_share / (1 - tail_share) if 0 <= tail_share < 1 else 0.0


def measure(
    frames: RunFrames, anatomy: _anatomy.AnatomyResult, longtail: _longtail.LongTailResult, *, at_bound: bool = False
) -> StepModel | None:
    """The what-if inputs from the last quarter of the run, scaled to all GPUs.

    Generation is the ``gen`` timer split by the long-tail share. Under async streaming the
    throughput part is :func:`async_throughput_s` (on separate pools the rollout pool's busy
    time per trainer step, at most the step; on shared GPUs the generation timer's throughput
    part), and the tail what the measured tail share f adds to it, T_thr f / (1 - f). An unknown
    share counts as no tail, or with ``at_bound`` as its ``tail_share_max``.
    """
    facts = frames.facts
    if not facts.n_gpus or anatomy.seconds.empty or unmodelled(facts, frames.steps):
        return None
    seconds = _steady(frames, _anatomy.group_seconds(anatomy.seconds))
    groups = recent(seconds).mean()
    t_train = groups["forward"] + groups["training"]
    recent_share = longtail.tail_share
    if at_bound and math.isnan(recent_share):
        recent_share = longtail.tail_share_max
    recent_share = 0.0 if math.isnan(recent_share) else recent_share
    if facts.kind == "async_streaming":
        shares = longtail.per_step["tail_share"] if "tail_share" in longtail.per_step else pd.Series(dtype=float)
        if at_bound and "tail_share_max" in longtail.per_step:
            shares = shares.fillna(longtail.per_step["tail_share_max"])
        shares = shares.reindex(seconds.index).fillna(recent_share)
        t_thr = float(recent(async_throughput_s(frames, seconds, shares)).mean())
        t_tail = _tail_for(t_thr, recent_share)
    else:
        t_tail = groups["generation"] * recent_share
        t_thr = groups["generation"] - t_tail
    if not (t_thr > 0 and t_train > 0):
        return None
    n = facts.n_gpus
    if facts.is_pooled:
        t_thr *= facts.rollout_gpus / n
        t_train *= facts.train_gpus / n
    return StepModel(
        float(t_thr), float(t_tail), float(t_train), int(n), float(groups["weight_sync"]), float(groups["switching"])
    )


def analyze(
    run: RunReader | RunFrames | str | os.PathLike[str],
    anatomy: _anatomy.AnatomyResult | None = None,
    longtail: _longtail.LongTailResult | None = None,
) -> TopologyResult:
    """Predict every topology and split from the measured phases and recommend a better one.

    Pass the anatomy and long-tail results if already computed (the facade does).
    """
    frames = load(run)
    anatomy = anatomy or _anatomy.analyze(frames)
    longtail = longtail or _longtail.analyze(frames)
    facts = frames.facts
    # async on shared GPUs takes turns on them, its rollout, tail included, alternating with the
    # learner: in GPU time it is the colocated row, which the async streaming row is compared with
    current = "colocated" if facts.shares_gpus else facts.kind
    n_r, n_t = (facts.rollout_gpus, facts.train_gpus) if facts.is_pooled else (None, None)
    model = measure(frames, anatomy, longtail)
    if model is None:
        empty = pd.DataFrame(columns=["n_rollout", "n_train", "step_s", "speedup"])
        missing = unmodelled(facts, frames.steps) or _no_model(facts, anatomy, frames.steps)
        result = TopologyResult(
            None,
            current,
            n_r,
            n_t,
            empty,
            pd.DataFrame(),
            math.nan,
            math.nan,
            shared=facts.shares_gpus,
            missing=missing,
            out_of_range=frames.out_of_range,
        )
        result.findings.extend(_idle_findings(frames.steps))
        return result
    rows = {"colocated": (math.nan, math.nan, step_time(model, "colocated"))}
    for topology in POOLED if model.n_gpus > 1 else ():  # one GPU cannot be split into two pools
        best = best_split(model, topology)
        rows[topology] = (best.n_rollout, best.n_train, best.step_s)
    what_if = pd.DataFrame.from_dict(rows, orient="index", columns=["n_rollout", "n_train", "step_s"])
    what_if.index.name = "topology"
    tail_unknown = longtail.estimated and math.isnan(longtail.tail_share)  # no tail modelled
    most = math.nan
    if tail_unknown and not math.isnan(longtail.tail_share_max):  # the async gain with the tail at its bound
        bound = measure(frames, anatomy, longtail, at_bound=True)
        most = math.nan if bound is None else async_speedup(bound.tail_share, bound.t_gen_s, bound.t_train_s)
    result = TopologyResult(
        model,
        current,
        n_r,
        n_t,
        what_if,
        split_table(model),
        async_speedup(model.tail_share, model.t_gen_s, model.t_train_s),
        overlap_bound(*sides_now(model, n_r, n_t, current)),
        float(recent(_steady(frames, anatomy.seconds)["step"]).mean()),  # of the steps the model is of
        shared=facts.shares_gpus,
        busy_upper_bound=facts.kind == "async_streaming" and not facts.shares_gpus and async_busy_bounded(frames.steps),
        tail_unknown=tail_unknown,
        async_speedup_max=most,
        out_of_range=frames.out_of_range,
    )
    what_if["speedup"] = result.step_now_s / what_if["step_s"]
    result.findings.extend(_findings(result, longtail.tail_share, tail_estimated=longtail.estimated))
    result.findings.extend(_idle_findings(frames.steps, result))
    return result


def _findings(r: TopologyResult, tail_share: float, *, tail_estimated: bool = False) -> list[Finding]:
    """``tail_share``: the measured share of rollout time the slowest 10% take (the model's own
    f is of generation scaled to all GPUs, a different number for a pooled run)."""
    assert r.model is not None
    out: list[Finding] = []
    now = r.step_now_s
    # the model's step for now is the baseline of every prediction (its errors cancel); the
    # measured one is said beside it, so a reader can tell the two apart
    measured = f", {fmt_seconds(r.step_measured_s)} s measured" if math.isfinite(r.step_measured_s) else ""
    if r.current != "colocated" and r.n_rollout is not None and r.n_train is not None:
        best = r.what_if.loc[r.current]
        if 1 - best["step_s"] / now >= SPLIT_GAIN_MIN:
            k = int(best["n_rollout"]) - r.n_rollout
            src, dst = ("training", "rollout") if k > 0 else ("rollout", "training")
            out.append(
                finding(
                    "split-imbalanced",
                    Severity.WARN,
                    {
                        "n_rollout": r.n_rollout,
                        "n_train": r.n_train,
                        "best_rollout": int(best["n_rollout"]),
                        "best_train": int(best["n_train"]),
                        "step_now_s": now,
                        "step_measured_s": r.step_measured_s,
                        "step_best_s": best["step_s"],
                        "speedup": now / best["step_s"],
                        "busy_upper_bound": r.busy_upper_bound,
                    },
                    f"move {fmt_count(abs(k), 'GPU')} from {src} to {dst}: the model predicts {fmt_seconds(best['step_s'])} s a step, against "
                    f"{fmt_seconds(now)} s modelled for {r.n_rollout}:{r.n_train}{measured}"
                    + (f"; {BUSY_BOUND_NOTE}, which leans the best split to rollout" if r.busy_upper_bound else ""),
                )
            )
    if r.current == "separated_sync" and r.n_rollout is not None:
        overlap = r.what_if.loc["one_step_overlap"]
        colocated = r.what_if.loc["colocated", "step_s"]
        out.append(
            finding(
                "separated-sync",
                Severity.WARN,
                {
                    "step_now": now,
                    "step_measured_s": r.step_measured_s,
                    "step_overlap_s": overlap["step_s"],
                    "step_colocated_s": colocated,
                },
                f"one-step overlap at {int(overlap['n_rollout'])}:{int(overlap['n_train'])} predicts "
                f"{fmt_seconds(now)} s -> {fmt_seconds(overlap['step_s'])} s ({now / overlap['step_s']:.2f}x) over "
                f"the model's step now{measured}; colocated predicts {fmt_seconds(colocated)} s",
            )
        )
    if r.current != "async_streaming" and "async_streaming" in r.what_if.index:
        best = r.what_if.loc["async_streaming"]
        # a pooled run can rebalance its own split first: async is credited only with what it adds
        base, baseline = now, f"the {fmt_seconds(now)} s modelled for now"
        if r.current != "colocated" and r.n_rollout is not None:
            rebalanced = r.what_if.loc[r.current]
            if rebalanced["step_s"] < now:
                base = float(rebalanced["step_s"])
                baseline = (
                    f"the {fmt_seconds(base)} s of the current topology rebalanced to "
                    f"{int(rebalanced['n_rollout'])}:{int(rebalanced['n_train'])}"
                )
        speedup = base / best["step_s"]
        if speedup >= ASYNC_SPEEDUP_INFO:
            m = r.model
            out.append(
                finding(
                    "async-recommended",
                    Severity.WARN if speedup >= ASYNC_SPEEDUP_WARN else Severity.INFO,
                    {
                        "best_rollout": int(best["n_rollout"]),
                        "best_train": int(best["n_train"]),
                        "step_now": now,
                        "step_from": base,
                        "baseline": baseline,
                        "step_measured_s": r.step_measured_s,
                        "step_async": best["step_s"],
                        "speedup": speedup,
                        "tail_share": tail_share,
                        "model_tail_share": m.tail_share,
                        "t_tail_s": m.t_tail_s,
                        "overlap_bound": r.overlap_bound,
                        "tail_unknown": r.tail_unknown,
                        "async_speedup_max": r.async_speedup_max,
                    },
                    ("moving to separate pools" if r.shared else "switching to async streaming")
                    + f" at {int(best['n_rollout'])}:{int(best['n_train'])} predicts "
                    f"{fmt_seconds(base)} s -> {fmt_seconds(best['step_s'])} s ({speedup:.2f}x)"
                    + (
                        f", beyond rebalancing the current split ({fmt_seconds(now)} s modelled now{measured})"
                        if base < now
                        else f" over the model's step now{measured}"
                    )
                    + (
                        ": training stops taking turns with generation and its "
                        if r.shared
                        else ": the trainer stops waiting for the "
                    )
                    + (
                        "long tail, which the model leaves out, its estimate from response lengths unknown: a lower "
                        + (
                            f"bound; overlapping the tail would add up to {r.async_speedup_max:.2f}x more (at its "
                            "bound, if all responses decode in one wave; log trajectories to measure it). "
                            if math.isfinite(r.async_speedup_max)
                            else "bound, and the response lengths give no bound on the tail either (log trajectories "
                            "to measure it). "
                        )
                        if r.tail_unknown
                        else f"{fmt_seconds(m.t_tail_s)} s tail ("
                        + (f"{tail_share:.0%} of rollout" if math.isfinite(tail_share) else "share not measured")
                        + (
                            ", estimated from response lengths: log trajectories to measure it"
                            if tail_estimated
                            else ""
                        )
                        + "). "
                    )
                    + (
                        "Its samples are already stale; on separate pools (verl's separate_async) the rollout no "
                        "longer pauses for training, so watch the staleness findings"
                        if r.shared
                        else "Samples become stale, a long answer by about (its generation + wait) / T_sync versions: "
                        "bound it with the off-policy threshold and watch the staleness findings"
                    ),
                )
            )
    return out


def idle_imbalance(steps: pd.DataFrame) -> tuple[str, float, float] | None:
    """verl's rule on the recent median idle ratios: (pool to grow, rollouter idle, trainer idle).

    Rollouter idle high and trainer idle low: the rollouter waits for the trainer, so the
    trainer should grow; the reverse grows the rollouter. None when neither holds.
    """
    keys = [ROLLOUTER_IDLE, TRAINER_IDLE]
    if not set(keys) <= set(steps.columns):
        return None
    rollouter, trainer = recent(steps[keys].dropna()).median()  # robust to the warm-up and drift steps
    if rollouter >= IDLE_RATIO_HIGH and trainer <= IDLE_RATIO_LOW:
        return "trainer", float(rollouter), float(trainer)
    if trainer >= IDLE_RATIO_HIGH and rollouter <= IDLE_RATIO_LOW:
        return "rollouter", float(rollouter), float(trainer)
    return None


def _idle_findings(steps: pd.DataFrame, r: TopologyResult | None = None) -> list[Finding]:
    """verl's idle-ratio rule, with what the topology model ``r`` says of the same move."""
    imbalance = idle_imbalance(steps)
    if imbalance is None:
        return []
    target, rollouter, trainer = imbalance
    why = "the rollouter waits for the trainer" if target == "trainer" else "the trainer waits for samples"
    ledger = ""
    if r is not None and r.n_rollout is not None and r.n_train is not None and r.current in r.what_if.index:
        best = r.what_if.loc[r.current]
        k = int(best["n_rollout"]) - r.n_rollout
        split = f"{r.n_rollout}:{r.n_train}"
        if k == 0:
            ledger = f"; the topology model finds {split} already the best split, so the two disagree: re-measure after each move"
        elif (k > 0) == (target == "rollouter"):
            ledger = f"; the topology model agrees ({split} -> {int(best['n_rollout'])}:{int(best['n_train'])})"
        else:
            ledger = (
                f"; the topology model points the other way ({split} -> {int(best['n_rollout'])}:"
                f"{int(best['n_train'])}): re-measure after each move"
            )
    return [
        finding(
            "async-idle-imbalanced",
            Severity.WARN,
            {"rollouter_idle": rollouter, "trainer_idle": trainer, "target": target},
            f"{why} (rollouter idle {rollouter:.0%}, trainer idle {trainer:.0%}): move GPUs to the {target} in "
            f"small steps (a node at a time where pools come by the node) until both idle ratios are low{ledger}",
        )
    ]
