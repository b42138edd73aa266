"""How much of each step do the GPUs of each role sit idle, and in which phase?

NVML samples say how busy each GPU was; phase spans say what the job was doing then.
Joining the two by time shows the sawtooth: learner GPUs near 0% while rollout decodes
the tail, engines idle while the trainer updates. A sample counts as idle below
``GPU_IDLE_UTIL_PCT``. Evidence: the ``gpu`` table (``time``, ``role``, ``util_pct``)
and the ``spans`` table (``step``, ``phase``, ``start``, ``end``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import GPU_IDLE_SHARE_CRITICAL, GPU_IDLE_SHARE_WARN, GPU_IDLE_UTIL_PCT, RECENT_FRACTION
from rlscope.analyzers._data import RunFacts, kept, labels, numbers
from rlscope.trace.reader import RunReader

__all__ = ["GpuIdleResult", "analyze", "learner_role"]

# Roles whose idleness is the training job's bill, in order of preference: the learner in
# separated/async runs, or every GPU when they are time-shared (colocated runs label them all
# "trainer", or "actor_rollout" after verl's colocated worker).
_LEARNER_ROLES = ("trainer", "actor", "learner", "actor_rollout")
_TIME_SHARED = "actor_rollout"


def learner_role(roles: Iterable[str]) -> str | None:
    """The role among ``roles`` whose idle share is the learner's (None if there is none)."""
    present = set(roles)
    return next((r for r in _LEARNER_ROLES if r in present), None)


@dataclass
class GpuIdleResult:
    """Idle share per role, per (step, role) and per (phase, role), from NVML samples."""

    available: bool
    by_role: pd.DataFrame = field(default_factory=pd.DataFrame)  # role: samples, mean_util_pct, idle_share
    by_step: pd.DataFrame = field(default_factory=pd.DataFrame)  # step, role, samples, idle_share
    by_phase: pd.DataFrame = field(default_factory=pd.DataFrame)  # phase, role, samples, mean_util_pct, idle_share
    findings: list[Finding] = field(default_factory=list)


@dataclass(frozen=True)
class _Role:
    """One role's samples in time order, with the running total of utilisation and which are idle.

    The samples inside any time window [start, end) are one slice of them, so a window's
    totals are a few lookups: thousands of spans cost no per-sample work.
    """

    time: np.ndarray
    util: np.ndarray  # running total, one longer than time
    idle: np.ndarray  # the idle samples' indices, ascending: those before i are searchsorted(idle, i)

    def totals(self, starts: np.ndarray | None, ends: np.ndarray | None) -> np.ndarray:
        """(3, windows): samples, summed utilisation and idle samples inside each window
        (``None``: one window holding every sample)."""
        if starts is None or ends is None:
            lo, hi = np.zeros(1, dtype=np.intp), np.full(1, self.time.size)
        else:
            lo = np.searchsorted(self.time, starts, side="left")
            hi = np.maximum(np.searchsorted(self.time, ends, side="left"), lo)
        idle = np.searchsorted(self.idle, hi) - np.searchsorted(self.idle, lo)
        return np.stack([hi - lo, self.util[hi] - self.util[lo], idle])


@dataclass(frozen=True)
class _Samples:
    """NVML samples with a utilisation, split by role (``roles``, sorted), each in time order."""

    roles: np.ndarray
    by_role: list[_Role]

    def aggregate(
        self, starts: np.ndarray | None, ends: np.ndarray | None, key: np.ndarray, keys: np.ndarray, name: str
    ) -> pd.DataFrame:
        """samples, mean_util_pct and idle_share per (``name``, role) of the samples inside the
        windows [``starts``, ``ends``), in the order of a groupby on both; ``key`` indexes
        ``keys`` per window (-1: a window left out)."""
        if starts is not None and ends is not None:
            kept = key >= 0
            starts, ends, key = starts[kept], ends[kept], key[kept]
        # per (key, role): the windows' totals summed
        totals = np.stack(
            [
                [np.bincount(key, weights=t, minlength=keys.size) for t in role.totals(starts, ends)]
                for role in self.by_role
            ]
        )  # roles x 3 x keys
        count, util, idle = (totals[:, k].T.reshape(-1) for k in range(3))  # key-major, role-minor
        present = np.flatnonzero(count > 0)
        samples = count[present]
        n_roles = self.roles.size
        return pd.DataFrame(
            {
                name: keys[present // n_roles],
                "role": self.roles[present % n_roles],
                "samples": samples.astype(np.int64),
                "mean_util_pct": util[present] / samples,
                "idle_share": idle[present] / samples,
            }
        )


def _ascending(values: np.ndarray) -> bool:
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def _samples(reader: RunReader) -> _Samples | None:
    gpu = reader.read("gpu", ["time", "role", "util_pct"], dictionary=["role"])
    util = numbers(gpu.column("util_pct")).astype(float, copy=False)
    keep = ~np.isnan(util)
    if not keep.any():
        return None
    role, roles = labels(gpu.column("role"), missing="unknown")
    time = numbers(gpu.column("time")).astype(float, copy=False)
    rows = kept(keep)
    time, util, role = time[rows], util[rows], role[rows]
    # one role's samples together, in time order (samplers write in time order: usually sorted)
    if not (_ascending(role) and _ascending(time)):
        order = np.lexsort((time, role))  # stable: samples of one role and time keep their order
        time, util, role = time[order], util[order], role[order]
    bounds = np.searchsorted(role, np.arange(roles.size + 1))
    by_role = []
    for a, b in itertools.pairwise(bounds.tolist()):
        running = np.zeros(b - a + 1)
        np.cumsum(util[a:b], out=running[1:])
        by_role.append(_Role(time[a:b], running, np.flatnonzero(util[a:b] < GPU_IDLE_UTIL_PCT)))
    return _Samples(roles, by_role)


def _timed(spans: pa.Table) -> pa.Table:
    """The spans with a start and an end (neither missing nor NaN)."""
    keep = None
    for name in ("start", "end"):
        column = spans.column(name)
        valid = pc.fill_null(pc.and_(pc.is_valid(column), pc.invert(pc.is_nan(column))), False)
        keep = valid if keep is None else pc.and_(keep, valid)
    return spans.filter(keep)


def _latest_attempt(spans: pa.Table) -> pa.Table:
    """The spans of each step's last attempt: a restarted run's repeat of a step replaces the
    earlier one, as in ``wide_steps`` (a missing attempt is 0)."""
    attempt = pc.fill_null(spans.column("attempt"), 0)
    if pc.max(attempt).as_py() in (None, 0):
        return spans
    frame = pd.DataFrame({"step": spans.column("step").to_numpy(), "attempt": attempt.to_numpy()})
    latest = frame.groupby("step")["attempt"].transform("max")
    return spans.filter(pa.array((frame["attempt"] == latest).to_numpy()))


def _step_windows(
    step: np.ndarray, phase: np.ndarray, phases: np.ndarray, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps (ascending) and the ``start`` and ``end`` of each one's wall window, from its
    spans (their ``step``, ``phase`` codes into ``phases``, ``start`` and ``end``): its ``step``
    span (verl's step timer), else from its first span's start to its last span's end.

    With one-step overlap or async streaming a step's ``gen`` span began steps earlier, so
    the spans' union would stretch the window over earlier steps and count their samples twice.
    """
    rows = kept(step == step)  # a span without a step is in no step's window
    steps, inverse = np.unique(step[rows], return_inverse=True)
    phase, start, end = phase[rows], start[rows], end[rows]
    whole = np.isin(phase, np.flatnonzero(phases == "step"))
    windows = []
    for spans in (slice(None), whole):  # every span of the step, then its step spans where it has some
        first, last = np.full(steps.size, np.inf), np.full(steps.size, -np.inf)
        np.minimum.at(first, inverse[spans], start[spans])
        np.maximum.at(last, inverse[spans], end[spans])
        windows.append((first, last))
    (first, last), (step_first, step_last) = windows
    timed = np.bincount(inverse[whole], minlength=steps.size) > 0
    return steps, np.where(timed, step_first, first), np.where(timed, step_last, last)


def analyze(run: RunReader | str | os.PathLike[str]) -> GpuIdleResult:
    """Idle shares from a run's NVML samples, joined to its phase spans when it has them."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    samples = _samples(reader)
    if samples is None:
        return GpuIdleResult(available=False)
    # per role alone: every sample in one window
    by_role = samples.aggregate(None, None, np.zeros(1, dtype=np.intp), np.zeros(1), "window")
    result = GpuIdleResult(True, by_role.drop(columns="window").set_index("role"))

    spans = _latest_attempt(
        _timed(reader.read("spans", ["step", "attempt", "phase", "start", "end"], dictionary=["phase"]))
    )
    if spans.num_rows == 0:
        return result
    phase, phases = labels(spans.column("phase"))  # a span without a phase (-1) counts in no phase
    starts, ends = numbers(spans.column("start")), numbers(spans.column("end"))
    steps, step_starts, step_ends = _step_windows(numbers(spans.column("step")), phase, phases, starts, ends)
    result.by_step = samples.aggregate(step_starts, step_ends, np.arange(steps.size), steps, "step")
    result.by_phase = samples.aggregate(starts, ends, phase, phases, "phase")
    result.findings = _findings(result.by_step, RunFacts.from_meta(reader.meta))
    return result


def _learner_waits(facts: RunFacts) -> str:
    """Why the learner GPUs wait and what to do, for the run's topology: a run that already
    overlaps rollout with training is not told to overlap them."""
    if facts.shares_gpus:
        return (
            "rollout and training take turns on the same GPUs, so the learner idles while they decode. "
            "Cut the long tail (a lower max response length or turn limit; verl's colocate_async already stops "
            "unfinished requests at each sample) or move to separate pools with async streaming;"
        )
    if facts.kind == "one_step_overlap":
        return (
            "rollout already overlaps training, so the learner waits because a batch takes longer to generate on "
            "the rollout pool, tail included, than to train on the training pool. Move GPUs from training to rollout "
            "or cut the long tail, which one-step overlap still waits for;"
        )
    if facts.kind == "async_streaming":
        return (
            "rollout already streams beside training, so the trainer waits for samples the rollout pool makes too "
            "slowly. Move GPUs from training to rollout until the trainer idles little (and verl's rollouter idle "
            "ratio, where logged, stays low);"
        )
    return "they wait for rollout to finish. Overlap rollout with training (one-step overlap or async streaming) or cut the long tail;"


def _findings(by_step: pd.DataFrame, facts: RunFacts | None = None) -> list[Finding]:
    role = learner_role(by_step["role"])
    if role is None:
        return []
    rows = by_step[by_step["role"] == role].sort_values("step")
    recent = rows.iloc[-max(1, int(np.ceil(len(rows) * RECENT_FRACTION))) :]
    idle = float((recent["idle_share"] * recent["samples"]).sum() / recent["samples"].sum())
    if idle < GPU_IDLE_SHARE_WARN:
        return []
    severity = Severity.CRITICAL if idle >= GPU_IDLE_SHARE_CRITICAL else Severity.WARN
    if role == _TIME_SHARED:
        why = (
            "their engines empty while the slowest trajectories finish, and they wait between phases. "
            "Partial rollout or async streaming keep them decoding;"
        )
    else:
        why = _learner_waits(facts or RunFacts())
    return [
        finding(
            "gpu-idle-in-training",
            severity,
            {"role": role, "idle_share": idle, "steps": len(recent), "util_threshold_pct": GPU_IDLE_UTIL_PCT},
            f"{role} GPUs are idle (< {GPU_IDLE_UTIL_PCT:g}% utilisation) for {idle:.0%} of each recent step: "
            f"{why} the topology what-if, where the run has one, predicts the step time.",
        )
    ]
