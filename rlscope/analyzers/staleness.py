"""Staleness: how many policy versions old are the samples the trainer consumes, and is dropping the stale ones biased?

Evidence: the ``trajectories`` table's ``policy_version_start`` (version that began the
sample), ``trainer_version`` (version of the update that consumed it) and
``response_tokens``. lag = trainer_version - policy_version_start.

The expected staleness of a sample is s ~ floor((generation time + wait) / T_sync): long
answers take longer, so they are staler, and dropping samples with lag above a threshold
(verl's default: 8 versions) removes long answers first. The length bias of such a drop is
mean length of the dropped samples / mean length of the kept ones.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_seconds
from rlscope.advice.thresholds import (
    DROP_LENGTH_BIAS_WARN,
    DROP_SHARE_MIN,
    STALENESS_DROP_THRESHOLD,
    STALENESS_P90_WARN,
    STALENESS_UNEXPLAINED_VERSIONS,
)
from rlscope.analyzers import anatomy as _anatomy
from rlscope.analyzers._data import (
    Groups,
    RunFrames,
    chunks,
    group_counts,
    group_rows,
    kept,
    load,
    off_policy_threshold,
    recent,
    segment_ids,
)
from rlscope.trace.reader import RunReader

# verl's v1 trainer (trainer_base._compute_metrics) logs the mean, max and min over a step's samples
# of two lags behind the update taking them (version global_steps - 1): against the oldest weights
# that generated a sample, (global_steps - 1) - min_global_steps, the lag rlscope measures from
# policy_version_start; and against the newest, (global_steps - 1) - max_global_steps, which a
# sample generated across weight syncs (partial rollout) has smaller
VERL_WORST_LAG = "training/off_policy/trajectory_staleness_worst/"
VERL_END_LAG = "training/off_policy/trajectory_staleness/"
# verl's key -> the per-step column it fills
VERL_LAG_COLUMNS: dict[str, str] = {
    **{VERL_WORST_LAG + stat: stat for stat in ("mean", "max", "min")},
    **{VERL_END_LAG + stat: "end_" + stat for stat in ("mean", "max", "min")},
}

# per-step quantiles of integer lags come from counting each lag when the (steps x lags) table of
# counts has at most this many cells per lag counted, else from sorting
_COUNTED_CELLS_PER_ROW = 4

__all__ = [
    "VERL_END_LAG",
    "VERL_LAG_COLUMNS",
    "VERL_WORST_LAG",
    "DropBias",
    "ExpectedLag",
    "StalenessResult",
    "analyze",
    "drop_length_bias",
    "expected_lag",
    "expected_staleness",
    "recent_mean_lag",
    "sync_interval",
    "verl_lags",
]


def expected_staleness(gen_s: float | np.ndarray, wait_s: float | np.ndarray, t_sync_s: float) -> np.ndarray:
    """Policy versions a sample falls behind: floor((generation time + wait) / T_sync)."""
    return np.floor((np.asarray(gen_s, dtype=float) + np.asarray(wait_s, dtype=float)) / t_sync_s)


@dataclass(frozen=True)
class DropBias:
    """What dropping samples with lag > ``threshold`` would remove, by length."""

    threshold: int
    dropped_share: float
    mean_len_dropped: float
    mean_len_kept: float

    @property
    def bias(self) -> float:
        """Mean dropped length / mean kept length (1 = neutral, > 1 = drops long answers)."""
        return self.mean_len_dropped / self.mean_len_kept if self.mean_len_kept > 0 else math.nan


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (pandas' ``rank()``), of values without NaN.

    Lags and token counts are small integers: ranked by counting each value, in one pass
    instead of a sort of millions of samples.
    """
    x = np.asarray(x)
    if x.size and x.dtype.kind in "iuf" and x.max() - x.min() <= 4 * x.size and np.array_equal(x, np.floor(x)):
        value = (x - x.min()).astype(np.intp)
        counts = np.bincount(value)
        return (np.cumsum(counts) - (counts - 1) / 2)[value]
    order = np.argsort(x, kind="stable")
    ordered = x[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]]) if x.size else np.zeros(0, dtype=np.intp)
    ends = np.r_[starts[1:], x.size]
    ranks = np.empty(x.size)
    ranks[order] = ((starts + ends + 1) / 2)[segment_ids(ends - starts)]
    return ranks


def drop_length_bias(lag: pd.Series | np.ndarray, length: pd.Series | np.ndarray, threshold: int) -> DropBias:
    """Length of the samples a lag > ``threshold`` drop removes versus those it keeps."""
    lag, length = np.asarray(lag), np.asarray(length, dtype=float)
    if lag.dtype.kind not in "iu":  # whole-number lags compare as they are
        lag = lag.astype(float)
    dropped = lag > threshold
    n_dropped = int(np.count_nonzero(dropped))
    share = n_dropped / lag.size if lag.size else math.nan
    # a drop of none or all of them takes no copy of the lengths to average
    mean_dropped = math.nan if not n_dropped else float((length if n_dropped == lag.size else length[dropped]).mean())
    mean_kept = math.nan if n_dropped == lag.size else float((length[~dropped] if n_dropped else length).mean())
    return DropBias(threshold, share, mean_dropped, mean_kept)


@dataclass(frozen=True)
class ExpectedLag:
    """The ``s ~ floor((gen + wait) / T_sync)`` check over the last quarter of steps.

    A sample's generation plus wait runs from its submission to its step's last finish (when
    the trainer can take the batch). Weight syncs every ``t_sync_s`` seconds fall into that time
    ``floor`` or ``ceil`` of ``(gen + wait) / T_sync`` times, depending on where the syncs fall
    against the consumption; averaged over samples, the count is within 0.5 of the continuous
    ``mean_expected``, which is compared with the ``mean_observed`` lag (the finding allows
    for that: see ``STALENESS_UNEXPLAINED_VERSIONS``). ``within_one``: share of samples whose
    lag is within one version of their own expectation.
    """

    t_sync_s: float
    mean_observed: float
    mean_expected: float
    within_one: float

    @property
    def excess(self) -> float:
        """Versions of lag that generation and wait do not explain (negative: fewer than they imply)."""
        return self.mean_observed - self.mean_expected


def expected_lag(lag: np.ndarray, submit: np.ndarray, consumed: np.ndarray, t_sync_s: float) -> ExpectedLag | None:
    """:class:`ExpectedLag` of samples with their submit and consume times (one clock, seconds)."""
    known = ~(np.isnan(submit) | np.isnan(consumed))
    if not known.any() or not t_sync_s > 0:
        return None
    lag = lag[known].astype(float)
    expected = (consumed[known] - submit[known]) / t_sync_s
    return ExpectedLag(
        float(t_sync_s), float(lag.mean()), float(expected.mean()), float((np.abs(lag - expected) <= 1).mean())
    )


@dataclass(frozen=True)
class StalenessResult:
    """Per-step lag distribution and, over the last quarter of steps, its link to length.

    ``per_step``: index step; ``n``, ``mean``, ``p50``, ``p90``, ``max`` (lag in versions; a
    percentile is the smallest lag that share of samples is at or below), ``over_threshold``
    (share with lag > threshold), ``min``, and ``end_mean``, ``end_max``, ``end_min``: the lag
    behind the newest weights that generated a sample instead of the oldest, known from verl
    only. ``length_correlation``: Spearman rank correlation of lag with response tokens.
    ``drop``: the length bias of dropping lag > threshold. ``expected``: the
    ``s ~ floor((gen + wait) / T_sync)`` check, when samples are stale at all and their submit
    and finish times and the step times are known. ``source``: ``trajectories`` (each sample's
    versions), ``verl`` (no sample has a ``trainer_version``: the columns in ``verl_keys`` are
    verl's own per-step metrics, the rest is unknown), or None when neither exists.
    ``verl_keys``: each per-step column taken from verl, with the verl metric it came from.
    """

    per_step: pd.DataFrame
    length_correlation: float
    drop: DropBias | None
    findings: list[Finding] = field(default_factory=list)
    expected: ExpectedLag | None = None
    source: str | None = None
    verl_keys: dict[str, str] = field(default_factory=dict)


def recent_mean_lag(result: StalenessResult) -> float:
    """The samples' mean policy lag over the last quarter of steps (0 when not measured)."""
    per_step = result.per_step
    if per_step.empty or "mean" not in per_step:
        return 0.0
    last = recent(per_step)
    weights = last["n"].to_numpy(dtype=float)
    means = last["mean"].to_numpy(dtype=float)
    if result.source == "verl":  # verl's per-step means: steps of one batch size
        weights = np.ones_like(means)
    ok = np.isfinite(means) & (weights > 0)
    return float(np.average(means[ok], weights=weights[ok])) if ok.any() else 0.0


def _quantile(x: pd.Series | np.ndarray, q: float) -> float:
    return float(np.quantile(np.asarray(x, dtype=float), q, method="inverted_cdf"))


def _per_step(g: Groups, lag: np.ndarray, threshold: int) -> dict[str, np.ndarray]:
    """step, n, mean, p50, p90, max, the share over ``threshold`` and min of each group's lags
    (``lag`` in key order, no group empty)."""
    n = g.sizes
    low, high = np.minimum.reduceat(lag, g.starts), np.maximum.reduceat(lag, g.starts)
    # a step whose lags are all equal (every sample of a synchronous step) has them as quantiles
    quantiles = np.repeat(low.astype(float)[:, None], 2, axis=1)
    varied = np.flatnonzero(low < high)
    span = int(high.max() - low.min()) + 1 if lag.size else 0
    # numpy's inverted_cdf: the q quantile of n sorted lags is the ceil(q n)-th
    rank = {q: np.ceil(q * n[varied] - 1e-9).astype(np.int64) for q in (0.5, 0.9)}
    if not varied.size:
        pass
    elif lag.dtype.kind in "iu" and span * n.size <= _COUNTED_CELLS_PER_ROW * lag.size:
        # small integer lags: per step, the count of each lag; a quantile is the first lag whose
        # running count reaches its rank
        counts = group_counts(replace(g, order=None), lag - low.min(), span)  # lag is in key order already
        running = np.cumsum(counts[varied], axis=1)
        for j, q in enumerate((0.5, 0.9)):
            quantiles[varied, j] = low.min() + np.argmax(running >= rank[q][:, None], axis=1)
    else:
        ordered = lag[np.lexsort((lag, g.ids))]  # each step's lags sorted, steps in order
        for j, q in enumerate((0.5, 0.9)):
            quantiles[varied, j] = ordered[g.starts[varied] + rank[q] - 1]
    if varied.size or lag.dtype.kind == "f":
        total, over = (
            np.add.reduceat(lag, g.starts),
            np.add.reduceat((lag > threshold).view(np.uint8), g.starts, dtype=np.int64),
        )
    else:  # whole-number lags, each step's all equal: its n samples of its one lag
        total, over = low * n, np.where(low > threshold, n, 0)
    return {
        "step": g.keys,
        "n": n,
        "mean": total / n,
        "p50": quantiles[:, 0],
        "p90": quantiles[:, 1],
        "max": high.astype(float),
        "over_threshold": over / n,
        "min": low.astype(float),
    }


def analyze(
    run: RunReader | RunFrames | str | os.PathLike[str],
    threshold: int | None = None,
    anatomy: _anatomy.AnatomyResult | None = None,
) -> StalenessResult:
    """Lag per trajectory, its per-step distribution, its correlation with length, the drop
    bias, and whether generation plus wait explain it.

    ``threshold`` defaults to ``meta.json``'s ``max_off_policy_threshold``, else verl's 8.
    """
    frames = load(run)
    if threshold is None:
        stated = off_policy_threshold(frames.meta)
        threshold = STALENESS_DROP_THRESHOLD if stated is None else stated
    traj = frames.trajectories
    columns = ["n", "mean", "p50", "p90", "max", "over_threshold", "min", "end_mean", "end_max", "end_min"]
    if traj.empty:
        return _from_verl(frames.steps, columns)
    g = traj.step_groups()
    version, start = traj.in_step_order("trainer_version"), traj.in_step_order("policy_version_start")
    # a chunk of whole steps at a time: no table-sized temporaries
    parts = []
    for steps, rows, _ in chunks(g):
        lag, part = version[rows] - start[rows], g.part(steps)  # lags are ints when both versions are
        if lag.dtype.kind == "f":
            known = ~np.isnan(lag)
            if not known.all():
                lag, part = lag[known], group_rows(part.keys[part.ids][known])
            if np.array_equal(lag, np.floor(lag)):  # versions with a gap elsewhere: still whole numbers
                lag = lag.astype(np.int64)
        if lag.size:
            parts.append(_per_step(part, lag, threshold))
    if not parts:
        return _from_verl(frames.steps, columns)
    per_step = pd.DataFrame({c: np.concatenate([p[c] for p in parts]) for c in parts[0]}).set_index("step")
    per_step = per_step.reindex(columns=columns)  # the lags behind the newest weights: verl's only
    # the last quarter of steps: the tail of the step-sorted rows
    window = slice(int(g.starts[np.searchsorted(g.keys, recent(per_step).index[0])]), len(traj))
    window_lag = version[window] - start[window]
    known = ~np.isnan(window_lag) if window_lag.dtype.kind == "f" else slice(None)
    window_lag = window_lag[known]
    tokens = traj.in_step_order("response_tokens")
    window_len = tokens[window][known].astype(float)
    sized = kept(~np.isnan(window_len)) if tokens.dtype.kind == "f" else slice(None)  # ints: none missing
    lag_s, len_s = window_lag[sized], window_len[sized]
    corr = math.nan
    if lag_s.size > 2 and lag_s.min() < lag_s.max() and len_s.min() < len_s.max():  # both vary
        # Spearman = Pearson of average ranks (pandas' method="spearman" would import scipy)
        corr = float(np.corrcoef(average_ranks(lag_s), average_ranks(len_s))[0, 1])
    drop = drop_length_bias(lag_s, len_s, threshold) if lag_s.size else None
    expected = None
    if window_lag.size and window_lag.max() > 0 and traj.has("submit_time") and traj.has("finish_time"):
        # only samples that are stale at all: a synchronous run has no syncs during generation
        w = group_rows(g.take(traj.numbers("step"))[window][known])
        # the trainer can take a step's batch once its last sample has finished
        last = np.fmax.reduceat(g.take(traj.numbers("finish_time"))[window][known].astype(float), w.starts)
        consumed = last[w.ids]
        submit = g.take(traj.numbers("submit_time"))[window][known].astype(float, copy=False)
        # a step whose submit or finish times are a clock's (time.time()) has no wait measured: the
        # other column's seconds since the rollout began do not subtract from it
        clocked = [s for logged in traj.clock_times().values() for s, _ in logged]
        if clocked:
            submit = np.where(np.isin(w.keys, clocked)[w.ids], np.nan, submit)
        anatomy = anatomy or _anatomy.analyze(frames)
        expected = expected_lag(window_lag, submit, consumed, sync_interval(anatomy))
    result = StalenessResult(per_step, corr, drop, expected=expected, source="trajectories")
    result.findings.extend(_findings(result, window_lag.astype(float)))
    return result


def verl_lags(steps: pd.DataFrame) -> pd.DataFrame:
    """verl's own per-step lags from the wide step metrics, as the columns of
    ``VERL_LAG_COLUMNS`` it logs, for the steps that log any; no columns when it logs none."""
    keys = [k for k in VERL_LAG_COLUMNS if k in steps.columns]
    return steps[keys].rename(columns=VERL_LAG_COLUMNS).dropna(how="all")


def _from_verl(steps: pd.DataFrame, columns: list[str]) -> StalenessResult:
    """Per-step lags from verl's own metrics, for runs whose samples carry no ``trainer_version``
    (the v1 trainer's async modes log them); empty without them too."""
    lags = verl_lags(steps)
    if lags.empty:
        return StalenessResult(pd.DataFrame(columns=columns), math.nan, None)
    table = lags.reindex(columns=columns).astype(float).rename_axis("step")
    taken = {column: key for key, column in VERL_LAG_COLUMNS.items() if column in lags}
    return StalenessResult(table, math.nan, None, source="verl", verl_keys=taken)


def sync_interval(anatomy: _anatomy.AnatomyResult) -> float:
    """Seconds between weight syncs over the recent steps: their step time, spread over the
    steps that synced when a weight-sync timer shows syncs on only some of them."""
    if anatomy.seconds.empty:
        return math.nan
    g = recent(_anatomy.group_seconds(anatomy.seconds))
    syncs = int((g["weight_sync"] > 0).sum())
    return float(g["step"].sum() / syncs) if syncs else float(g["step"].mean())


def _findings(r: StalenessResult, lags: np.ndarray) -> list[Finding]:
    out: list[Finding] = []
    p90 = _quantile(lags, 0.9)
    if p90 > STALENESS_P90_WARN:
        out.append(
            finding(
                "staleness-high",
                Severity.WARN,
                {"p90": p90, "max": float(lags.max()), "mean": float(lags.mean())},
                f"recent samples are {lags.mean():.1f} versions stale on average and 10% are more than {p90:.0f}: "
                f"beyond the {STALENESS_P90_WARN} reported lossless with correction; sync more often or lower "
                "the staleness bound, and watch the importance-weight clipping rate",
            )
        )
    e = r.expected
    if e is not None and abs(e.excess) >= STALENESS_UNEXPLAINED_VERSIONS:
        evidence = {
            "mean_observed": e.mean_observed,
            "mean_expected": e.mean_expected,
            "excess": e.excess,
            "t_sync_s": e.t_sync_s,
            "within_one": e.within_one,
        }
        said = (
            f"samples are {e.mean_observed:.1f} versions stale on average where their generation and wait explain "
            f"{e.mean_expected:.1f} (a weight sync every {fmt_seconds(e.t_sync_s)} s): "
        )
        if e.excess > 0:
            out.append(
                finding(
                    "staleness-unexplained",
                    Severity.WARN,
                    evidence,
                    said + "they wait past their own step before training (a queue deeper than the batch), or "
                    "policy_version_start is stamped before generation really starts; lower the staleness bound "
                    "if the extra lag costs accuracy",
                )
            )
        else:
            out.append(
                finding(
                    "staleness-unexplained",
                    Severity.INFO,
                    evidence,
                    said + "the weights sync less often than the step times suggest, or versions are stamped "
                    "after generation starts; check the sync trigger before trusting the staleness figures",
                )
            )
    d = r.drop
    if d is not None and d.dropped_share >= DROP_SHARE_MIN and d.bias >= DROP_LENGTH_BIAS_WARN:
        out.append(
            finding(
                "stale-drop-length-bias",
                Severity.WARN,
                {
                    "threshold": d.threshold,
                    "bias": d.bias,
                    "dropped_share": d.dropped_share,
                    "mean_len_dropped": d.mean_len_dropped,
                    "mean_len_kept": d.mean_len_kept,
                    "length_correlation": r.length_correlation,
                },
                f"a drop at lag > {d.threshold} would remove {d.dropped_share:.0%} of samples averaging "
                f"{d.mean_len_dropped:,.0f} tokens against {d.mean_len_kept:,.0f} kept: use the 'wait' strategy or "
                "partial rollout instead of 'drop'",
            )
        )
    return out
