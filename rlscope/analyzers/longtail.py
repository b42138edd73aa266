"""Long tail: how much of each rollout is spent waiting for the slowest trajectories?

Evidence: the ``trajectories`` table's ``finish_time`` (seconds since the step's rollout
began; aborted trajectories are left out, they finish in a later step). Per step:

- rollout time = max(finish_time);
- t90 = the time by which 90% of the trajectories have finished: the k-th smallest finish
  time with k = ceil(0.9 n) (10 trajectories finishing at 1..10 s give t90 = 9 s);
- T_thr = t90 (the throughput part), T_tail = max - t90;
- tail share f = T_tail / (T_thr + T_tail): the share of rollout time taken by the slowest 10%.

With fewer than 10 trajectories the slowest 10% is 0.1 n of one trajectory, and ceil(0.9 n) = n
would make every tail 0, a straggler's too. t90 is then read off the finish times at 0.9 n,
between the last two: T_tail = 0.1 n (t_n - t_(n-1)), the slowest trajectory's time alone past
the one before, pro rata. Finishes spread evenly give 10%, as with many trajectories; 9 at
30..44 s and one at 300 s give T_tail = 0.9 x 256 = 230 s. For n >= 10, 0.9 n falls on or
before the ceil(0.9 n)-th, so nothing changes there. A step with a single trajectory has no
tail to measure (NaN). The long-tail finding says when recent steps hold fewer than 10.

Without trajectories the split is estimated from verl's ``response_length/mean``,
``/max``, ``/min``, ``/clip_ratio`` and ``timing_s/gen`` (``estimated`` is then True). If all
responses decode in one wave (they start together and each decode step serves every one still
running), finish time grows with length, so f = 1 - L90 / L_max (L90: the 90th-percentile length).
A batch that shrinks decodes faster per token, which only shortens the tail, so this f is the
most it can be. The four statistics do not give L90; what they do give:

- more than 10% of responses at the length cap (clip ratio > 0.1): the slowest 10% all have the
  cap length and finish together, so f = 0 (at exactly 0.1 the 90th percentile can sit below it).
  That 0 is the cap cutting the tail short, not a run without one: such a step is "capped", and
  the trend that ``long-tail-growing`` judges leaves it out (a run capped early and not later would
  else read as a tail grown from 0%). Growth is judged only where no recent step is capped and,
  where some step is, at least two are not;
- a bound, whatever the lengths' shape: the fastest 90% are no longer than L90 and the rest no
  longer than L_max, so mean <= 0.9 L90 + 0.1 L_max, and L90 >= min; f <= min((L_max - mean) /
  (0.9 L_max), 1 - min / L_max) (``tail_share_max``; mean 239, max 256 gives at most 7.4%);
- an estimate, only with a shape assumed: lengths exponential around their mean give L90 =
  mean * ln 10. Where that reaches L_max the lengths are bunched near the max, not spread as
  assumed, and the estimate is unknown (NaN; the bound stands). The recent share is then unknown
  too, and neither finding is judged: a growth whose last quarter is not now would mislead. Rough (one wave, no queueing):
  the 8B example (mean 8K, max 32K) gives f = 0.42 against 0.33 measured.

Several engines, or more requests than an engine runs at once, break the one wave: the bound and
the 0 hold only for it.

A step whose ``finish_time`` or ``submit_time`` holds a clock's time (``CLOCK_TIME_S`` or more, as
``time.time()`` gives, not seconds since its rollout began) has no finish times measured: it is
left out of the measured split (a run with no other step measured is estimated as one without
trajectories), and ``clock_times`` names such steps for the reports' warnings.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_seconds
from rlscope.advice.thresholds import LONG_TAIL_CRITICAL, LONG_TAIL_GROWTH_WARN, LONG_TAIL_WARN
from rlscope.analyzers._data import (
    Groups,
    Pieces,
    RunFacts,
    RunFrames,
    Trajectories,
    Trend,
    kept,
    load,
    recent,
    steps_text,
    trend,
)
from rlscope.trace.reader import RunReader

__all__ = [
    "LongTailResult",
    "TailSplit",
    "analyze",
    "at_length_cap",
    "capped_note",
    "estimate_tail_share",
    "tail_share_bound",
    "tail_split",
]

_COLUMNS = ["n", "rollout_s", "t_thr_s", "t_tail_s", "tail_share"]
_ESTIMATED_COLUMNS = [*_COLUMNS, "tail_share_max", "clip_ratio"]
# more than this share of responses at the length cap puts the slowest 10% all at the cap
_CAPPED_CLIP_RATIO = 0.1


@dataclass(frozen=True)
class TailSplit:
    """One rollout split into its throughput part (``t_thr_s`` = t90) and its tail."""

    rollout_s: float
    t_thr_s: float
    t_tail_s: float

    @property
    def tail_share(self) -> float:
        if math.isnan(self.t_tail_s):
            return math.nan
        return self.t_tail_s / self.rollout_s if self.rollout_s > 0 else 0.0


def tail_split(finish_times: Iterable[float]) -> TailSplit:
    """Split one step's trajectory finish times (seconds since rollout start) at t90.

    Missing (None, NaN) and infinite times are left out.
    """
    values = finish_times if isinstance(finish_times, (np.ndarray, pd.Series)) else list(finish_times)
    t = np.asarray(values, dtype=float)  # None reads as NaN
    return _split(t[np.isfinite(t)])


def _split(t: np.ndarray) -> TailSplit:
    """:func:`tail_split` of finite times."""
    if t.size == 0:
        return TailSplit(math.nan, math.nan, math.nan)
    n = t.size
    if n == 1:  # nothing waits for the one trajectory: no tail to measure
        return TailSplit(float(t[0]), math.nan, math.nan)
    if n < 10:  # the slowest 10% is 0.1 n of the slowest one: its time past the one before, pro rata
        t = np.partition(t, (n - 2, n - 1))
        last = float(t[-1])
        tail = 0.1 * n * (last - float(t[-2]))
        return TailSplit(last, last - tail, tail)
    k = (9 * n + 9) // 10  # ceil(0.9 n) in integers: 0.9 * 70 is 63.00000000000001
    # the k-th time without a full sort; the last one apart, as numpy's partition at two places
    # takes several times one place's work
    t90, last = float(np.partition(t, k - 1)[k - 1]), float(t.max())
    return TailSplit(last, t90, last - t90)


def estimate_tail_share(mean_len: float, max_len: float, clip_ratio: float | None = None) -> float:
    """Tail share from response lengths alone, NaN where they cannot give one (see the module
    docstring for the model)."""
    if not (mean_len > 0 and max_len > 0):
        return math.nan
    if clip_ratio is not None and clip_ratio > _CAPPED_CLIP_RATIO:  # the slowest 10% all stop at the cap together
        return 0.0
    l90 = mean_len * math.log(10)
    if l90 >= max_len:  # lengths bunched near the max: not the exponential spread assumed
        return math.nan
    return 1.0 - l90 / max_len


def tail_share_bound(mean_len: float, max_len: float, min_len: float | None = None) -> float:
    """The most the tail share can be, whatever the lengths' shape, in one wave (module docstring)."""
    if not (mean_len > 0 and max_len >= mean_len):
        return math.nan
    bound = (max_len - mean_len) / (0.9 * max_len)
    if min_len is not None and not math.isnan(min_len):
        bound = min(bound, 1.0 - min_len / max_len)
    return min(1.0, max(0.0, bound))


@dataclass(frozen=True)
class LongTailResult:
    """Per-step tail split, its trend and the recent (last-quarter) mean.

    ``per_step``: index step; ``n`` (trajectories with a finite finish time, NaN when
    estimated), ``rollout_s``, ``t_thr_s``, ``t_tail_s``, ``tail_share``. ``t_thr_s``,
    ``t_tail_s``, ``tail_share``: means over the last quarter of steps (share = mean tail /
    mean rollout; all NaN when any of those steps' estimate is unknown). ``estimated``:
    True when derived from response lengths rather than trajectories; ``per_step`` then also has
    ``tail_share_max`` and ``clip_ratio``, and ``tail_share_max`` is the most the recent share can be
    (NaN when measured). ``capped_steps``: the steps whose estimate of 0 is set by the length cap
    (clip ratio > 0.1), ``recent_capped_steps`` those of the last quarter; ``trend`` leaves them out,
    and ``growth_judged`` says whether it is up to now (see the module docstring). ``clock_times``:
    per trajectory time column, the steps that logged a clock's time in it, each with its first such
    value (``Trajectories.clock_times``): those steps have no finish times measured.
    """

    per_step: pd.DataFrame
    estimated: bool
    trend: Trend
    t_thr_s: float
    t_tail_s: float
    tail_share: float
    findings: list[Finding] = field(default_factory=list)
    tail_share_max: float = math.nan
    capped_steps: tuple[int, ...] = ()
    recent_capped_steps: tuple[int, ...] = ()
    growth_judged: bool = False
    clock_times: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)

    @property
    def clock_time_steps(self) -> tuple[int, ...]:
        """The steps whose trajectory times are a clock's, in either column: no finish times measured."""
        return tuple(sorted({step for logged in self.clock_times.values() for step, _ in logged}))


def _measured(trajectories: Trajectories, unmeasured: Sequence[int]) -> pd.DataFrame:
    """The split of each step with finish times, but the ``unmeasured`` steps'."""
    aborted = trajectories.flags("aborted")
    in_order = trajectories.in_step_order("finish_time")
    if (
        not unmeasured
        and isinstance(in_order, Pieces)
        and not aborted.any()
        and all(np.isfinite(a).all() for a in in_order.arrays)
    ):  # every row counts, in step order as read: each step's times sliced from the chunks
        g = trajectories.step_groups()
        return _split_table(g, _splits(in_order, g))
    finish = trajectories.numbers("finish_time").astype(float, copy=False)
    # n counts what the split reads: a missing or infinite time says nothing of when it finished
    usable = np.isfinite(finish) & ~aborted
    if unmeasured:
        usable &= ~np.isin(trajectories.numbers("step"), unmeasured)
    rows = kept(usable)
    g = trajectories.step_groups(rows)
    return _split_table(g, _splits(Pieces([g.take(finish[rows])]), g))


def _splits(times: Pieces, g: Groups) -> np.ndarray:
    """Per group of ``g`` over ``times`` (finite, in group order), :func:`_split`'s rollout, t90
    and tail as three rows. Consecutive groups of one size (10 or more) within one chunk are split
    together, as the rows of a 2-D array: one partition for a chunk's steps, where a step at a
    time cost a Python call and a partition each, 1,000 of them on a 1,000-step run."""
    out = np.full((3, g.keys.size), np.nan)
    if not g.keys.size:
        return out
    ends = np.cumsum([a.size for a in times.arrays])
    sizes = g.sizes
    chunk = np.searchsorted(ends, g.starts, side="right")
    together = (chunk == np.searchsorted(ends, g.ends - 1, side="right")) & (sizes >= 10)
    changes = (chunk[1:] != chunk[:-1]) | (sizes[1:] != sizes[:-1]) | (together[1:] != together[:-1])
    bounds = np.r_[0, np.flatnonzero(changes) + 1, g.keys.size]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if together[a]:
            n, array = int(sizes[a]), times.arrays[chunk[a]]
            at = g.starts[a] - (ends[chunk[a]] - array.size)
            block = array[at : at + (b - a) * n].reshape(b - a, n).astype(float, copy=False)
            k = (9 * n + 9) // 10  # as _split
            last = block.max(axis=1)
            t90 = np.partition(block, k - 1, axis=1)[:, k - 1]
            out[:, a:b] = last, t90, last - t90
        else:
            for i in range(a, b):
                s = _split(times[int(g.starts[i]) : int(g.ends[i])].astype(float, copy=False))
                out[:, i] = s.rollout_s, s.t_thr_s, s.t_tail_s
    return out


def _split_table(g: Groups, splits: np.ndarray) -> pd.DataFrame:
    rollout, t_thr, t_tail = splits
    with np.errstate(divide="ignore", invalid="ignore"):  # as TailSplit.tail_share
        share = np.where(np.isnan(t_tail), np.nan, np.where(rollout > 0, t_tail / rollout, 0.0))
    return pd.DataFrame(
        {"n": g.sizes, "rollout_s": rollout, "t_thr_s": t_thr, "t_tail_s": t_tail, "tail_share": share},
        index=pd.Index(g.keys, name="step"),
    )


def _estimated(steps: pd.DataFrame) -> pd.DataFrame:
    need = ["response_length/mean", "response_length/max", "timing_s/gen"]
    if not set(need) <= set(steps.columns):
        return pd.DataFrame(columns=_ESTIMATED_COLUMNS, index=pd.Index([], name="step"))
    df = steps.dropna(subset=need)
    nan = pd.Series(np.nan, df.index)
    clip = df["response_length/clip_ratio"] if "response_length/clip_ratio" in df else nan
    low = df["response_length/min"] if "response_length/min" in df else nan
    mean, top = df["response_length/mean"], df["response_length/max"]
    f = [estimate_tail_share(m, x, None if math.isnan(c) else c) for m, x, c in zip(mean, top, clip, strict=True)]
    bound = [tail_share_bound(m, x, lo) for m, x, lo in zip(mean, top, low, strict=True)]
    out = pd.DataFrame({"n": np.nan, "rollout_s": df["timing_s/gen"], "tail_share": f}, index=df.index)
    out["t_tail_s"] = out["rollout_s"] * out["tail_share"]
    out["t_thr_s"] = out["rollout_s"] - out["t_tail_s"]
    out["tail_share_max"] = bound
    out["clip_ratio"] = clip
    return out[_ESTIMATED_COLUMNS].rename_axis("step")


def at_length_cap(per_step: pd.DataFrame) -> pd.Series:
    """Per step of a ``per_step`` frame, whether its estimate is the length cap's 0 (an unknown
    estimate is not the cap's); all False when measured."""
    if "clip_ratio" not in per_step:
        return pd.Series(False, per_step.index)
    return (per_step["clip_ratio"] > _CAPPED_CLIP_RATIO) & per_step["tail_share"].notna()


def capped_note(steps: Sequence[int]) -> str:
    """How every report says that steps' estimated share of 0 is the length cap's, not a missing tail."""
    one = len(steps) == 1
    return (
        f"{steps_text(steps)} at the length cap count{'s' if one else ''} 0: over 10% of "
        f"{'its' if one else 'their'} responses hit it and finish together"
    )


def analyze(run: RunReader | RunFrames | str | os.PathLike[str]) -> LongTailResult:
    """Split every rollout into throughput and tail, trend the tail share, and flag a heavy tail."""
    frames = load(run)
    traj = frames.trajectories
    clock_times = traj.clock_times()
    unmeasured = sorted({step for logged in clock_times.values() for step, _ in logged})
    # measured where some trajectory the tail counts (not aborted, of a step not timed by a clock)
    # has a finish time; else estimated, as a run without finish times is
    per_step = _measured(traj, unmeasured) if traj.has("finish_time") else pd.DataFrame()
    measured = not per_step.empty
    if not measured:
        per_step = _estimated(frames.steps)
    per_step = per_step.dropna(subset=["rollout_s"]).sort_index()
    now = recent(per_step)
    t_thr, t_tail = float(now["t_thr_s"].mean()), float(now["t_tail_s"].mean())
    share = t_tail / (t_thr + t_tail) if t_thr + t_tail > 0 else math.nan
    estimated = not measured and not per_step.empty  # nothing to estimate from is no estimate
    most = math.nan
    if estimated:
        if now["tail_share"].isna().any():  # a share of the steps with an estimate is not the recent share
            t_thr = t_tail = share = math.nan
        # each step's tail is at most its bound times its rollout: so is their sum
        rollout = float(now["rollout_s"].sum())
        most = (
            float((now["tail_share_max"] * now["rollout_s"]).sum(skipna=False)) / rollout if rollout > 0 else math.nan
        )
    capped = at_length_cap(per_step)
    capped_steps = tuple(int(s) for s in per_step.index[capped])
    recent_capped = tuple(int(s) for s in now.index[capped.loc[now.index]])
    below = per_step["tail_share"].where(~capped)  # a capped 0 is the cap, not the tail: no point of its trend
    # growth up to now: the recent share known, none of it the cap's, and two steps below the cap to compare
    judged = not math.isnan(share) and not recent_capped and (not capped_steps or below.notna().sum() >= 2)
    result = LongTailResult(
        per_step,
        estimated,
        trend(below),
        t_thr,
        t_tail,
        share,
        tail_share_max=most,
        capped_steps=capped_steps,
        recent_capped_steps=recent_capped,
        growth_judged=judged,
        clock_times=clock_times,
    )
    result.findings.extend(_findings(result, frames.facts))
    return result


def _levers(facts: RunFacts) -> str:
    """What stops the wait for the slowest trajectories, for the run's topology: a run whose
    trainer already does not wait for them (async streaming) is not told to go async."""
    if facts.kind == "async_streaming" and not facts.shares_gpus:
        return (
            "Async streaming already keeps the trainer from waiting for them, but the longest answers are the "
            "stalest samples: partial rollout, a lower max response length or turn limit shortens them (see the "
            "staleness findings)"
        )
    if facts.shares_gpus:
        return (
            "Rollout and training take turns on the same GPUs, so the GPUs train only once the batch is in (verl's "
            "colocate_async already stops unfinished requests at each sample and resumes them later): async "
            "streaming on separate pools removes the wait; a lower max response length or turn limit shortens them"
        )
    if facts.kind == "one_step_overlap":
        return (
            "One-step overlap still waits for them every step: async streaming or partial rollout stops the trainer "
            "waiting; a lower max response length or turn limit shortens them"
        )
    return (
        "Async streaming or partial rollout stops the trainer waiting for them; a lower max response length or "
        "turn limit shortens them"
    )


def _findings(r: LongTailResult, facts: RunFacts | None = None) -> list[Finding]:
    facts = facts or RunFacts()
    out: list[Finding] = []
    how = " (estimated from response lengths; log trajectories to measure it)" if r.estimated else ""
    basis = "estimated from response lengths" if r.estimated else "measured"
    few = recent(r.per_step)["n"] if not r.estimated and not r.per_step.empty else pd.Series(dtype=float)
    few = few[few >= 2]  # a step of one trajectory has no tail, and none in the share
    if few.notna().any() and few.min() < 10:  # the slowest 10% is less than one trajectory
        basis += f"; as few as {few.min():.0f} trajectories a step: the tail is read off the last two finishes"
    recent_basis = basis + (f"; {capped_note(r.recent_capped_steps)}" if r.recent_capped_steps else "")
    if r.tail_share >= LONG_TAIL_WARN:
        severity = Severity.CRITICAL if r.tail_share >= LONG_TAIL_CRITICAL and not r.estimated else Severity.WARN
        rollout = r.t_thr_s + r.t_tail_s
        out.append(
            finding(
                "long-tail-dominates",
                severity,
                {
                    "tail_share": r.tail_share,
                    "t_tail_s": r.t_tail_s,
                    "t_thr_s": r.t_thr_s,
                    "rollout_s": rollout,
                    "estimated": r.estimated,
                    "basis": recent_basis,
                },
                f"the slowest 10% of trajectories hold the rollout for {fmt_seconds(r.t_tail_s)} s of {fmt_seconds(rollout)} s{how}; "
                f"more GPUs shrink only the other {fmt_seconds(r.t_thr_s)} s. {_levers(facts)}",
            )
        )
    # growth is up to the run as it is now: with the recent share unknown, or the cap's, there is none to judge,
    # as compare says
    if r.growth_judged and r.trend.change >= LONG_TAIL_GROWTH_WARN:
        evidence = {
            "first": r.trend.first,
            "last": r.trend.last,
            "slope_per_step": r.trend.slope_per_step,
            "estimated": r.estimated,
            "basis": basis,
        }
        over, left_out = "the run", ""
        if r.capped_steps:
            evidence["basis"] += f"; {steps_text(r.capped_steps)} at the length cap left out"
            evidence["capped_steps"] = list(r.capped_steps)
            over, left_out = "the steps below the length cap", _left_out(r)
        # an estimate moves with the length spread and the clip ratio, not only with the tail: information
        out.append(
            finding(
                "long-tail-growing",
                Severity.INFO if r.estimated else Severity.WARN,
                evidence,
                f"the tail share rose {r.trend.change * 100:.0f} points over {over} "
                f"({r.trend.first:.0%} -> {r.trend.last:.0%}): "
                + (
                    "the longest answers, the stalest samples, are growing"
                    if facts.kind == "async_streaming" and not facts.shares_gpus
                    else "the gain from partial rollout or async streaming is growing"
                )
                + how
                + left_out,
            )
        )
    return out


def _over_a_tenth(share: float) -> str:
    """A clip ratio above 0.1 as a percentage with the decimals that show it above 10% (0.1004: 10.04%)."""
    for decimals in range(4):
        text = f"{share:.{decimals}%}"
        if float(text[:-1]) > 10:
            return text
    return text


def _left_out(r: LongTailResult) -> str:
    """Which steps the growth leaves out for the length cap, and why their 0% is no missing tail."""
    clip = r.per_step.loc[list(r.capped_steps), "clip_ratio"]
    low, high = _over_a_tenth(clip.min()), _over_a_tenth(clip.max())
    share = low if low == high else f"{low[:-1]}-{high}"
    steps = steps_text(r.capped_steps)
    are, their = ("is", "its") if len(r.capped_steps) == 1 else ("are", "their")
    return (
        f". {steps[0].upper()}{steps[1:]} {are} left out: {share} of {their} responses hit the length cap, so "
        f"{their} slowest 10% all stop at it together and {their} estimate of 0% says the cap cut the tail short, "
        "not that there was none"
    )
