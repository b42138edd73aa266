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
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import (
    DROP_LENGTH_BIAS_WARN,
    DROP_SHARE_MIN,
    STALENESS_DROP_THRESHOLD,
    STALENESS_P90_WARN,
)
from rlscope.analyzers._data import Groups, RunFrames, group_counts, kept, load, recent, segment_ids
from rlscope.trace.reader import RunReader

# integer lags spanning at most this many versions get their per-step quantiles by counting
_COUNTED_SPAN = 1024

__all__ = ["DropBias", "StalenessResult", "analyze", "drop_length_bias", "expected_staleness"]


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
    lag, length = np.asarray(lag, dtype=float), np.asarray(length, dtype=float)
    dropped = lag > threshold
    share = float(dropped.mean()) if lag.size else math.nan
    mean_dropped = float(length[dropped].mean()) if dropped.any() else math.nan
    mean_kept = float(length[~dropped].mean()) if (~dropped).any() else math.nan
    return DropBias(threshold, share, mean_dropped, mean_kept)


@dataclass(frozen=True)
class StalenessResult:
    """Per-step lag distribution and, over the last quarter of steps, its link to length.

    ``per_step``: index step; ``n``, ``mean``, ``p50``, ``p90``, ``max`` (lag in versions; a
    percentile is the smallest lag that share of samples is at or below) and ``over_threshold``
    (share with lag > threshold). ``length_correlation``: Spearman rank correlation of lag
    with response tokens. ``drop``: the length bias of dropping lag > threshold.
    """

    per_step: pd.DataFrame
    length_correlation: float
    drop: DropBias | None
    findings: list[Finding] = field(default_factory=list)


def _quantile(x: pd.Series | np.ndarray, q: float) -> float:
    return float(np.quantile(np.asarray(x, dtype=float), q, method="inverted_cdf"))


def _per_step(g: Groups, lag: np.ndarray, threshold: int) -> pd.DataFrame:
    """n, mean, p50, p90, max and the share over ``threshold`` of each step's lags (in step order, not empty)."""
    n = g.sizes
    low, high = np.minimum.reduceat(lag, g.starts), np.maximum.reduceat(lag, g.starts)
    # a step whose lags are all equal (every sample of a synchronous step) has them as quantiles
    quantiles = np.repeat(low.astype(float)[:, None], 2, axis=1)
    varied = np.flatnonzero(low < high)
    span = int(high.max() - low.min()) + 1 if lag.size else 0
    if varied.size and lag.dtype.kind in "iu" and span <= _COUNTED_SPAN:
        # integer lags: per step, the count of each lag; a quantile is the first lag whose
        # running count reaches q * n (numpy's inverted_cdf)
        counts = group_counts(replace(g, order=None), lag - low.min(), span)  # lag is in key order already
        running = np.cumsum(counts, axis=1)
        for j, q in enumerate((0.5, 0.9)):
            quantiles[varied, j] = low.min() + np.argmax(running[varied] >= np.ceil(q * n[varied, None] - 1e-9), axis=1)
    else:
        for i in varied:
            quantiles[i] = np.quantile(lag[g.starts[i] : g.ends[i]].astype(float), (0.5, 0.9), method="inverted_cdf")
    return pd.DataFrame(
        {
            "n": n,
            "mean": np.add.reduceat(lag, g.starts) / n,
            "p50": quantiles[:, 0],
            "p90": quantiles[:, 1],
            "max": high.astype(float),
            "over_threshold": np.add.reduceat((lag > threshold).view(np.uint8), g.starts, dtype=np.int64) / n,
        },
        index=pd.Index(g.keys, name="step"),
    )


def analyze(run: RunReader | RunFrames | str | os.PathLike[str], threshold: int | None = None) -> StalenessResult:
    """Lag per trajectory, its per-step distribution, its correlation with length and the drop bias.

    ``threshold`` defaults to ``meta.json``'s ``max_off_policy_threshold``, else verl's 8.
    """
    frames = load(run)
    if threshold is None:
        threshold = int(frames.meta.get("max_off_policy_threshold") or STALENESS_DROP_THRESHOLD)
    traj = frames.trajectories
    columns = ["n", "mean", "p50", "p90", "max", "over_threshold"]
    if traj.empty:
        return StalenessResult(pd.DataFrame(columns=columns), math.nan, None)
    lag = traj.numbers("trainer_version") - traj.numbers("policy_version_start")  # ints when both are
    keep = ~np.isnan(lag) if lag.dtype.kind == "f" else np.ones(lag.size, dtype=bool)
    if not keep.any():
        return StalenessResult(pd.DataFrame(columns=columns), math.nan, None)
    rows = kept(keep)
    g = traj.step_groups(rows)
    lag = g.take(lag[rows])
    per_step = _per_step(g, lag, threshold)
    # the last quarter of steps is the tail of the step-sorted rows
    first = g.starts[len(per_step) - len(recent(per_step))]
    window_lag = lag[first:]
    window_len = g.take(traj.numbers("response_tokens")[rows])[first:].astype(float)
    sized = ~np.isnan(window_len)
    lag_s, len_s = window_lag[sized], window_len[sized]
    corr = math.nan
    if lag_s.size > 2 and lag_s.min() < lag_s.max() and len_s.min() < len_s.max():  # both vary
        # Spearman = Pearson of average ranks (pandas' method="spearman" would import scipy)
        corr = float(np.corrcoef(average_ranks(lag_s), average_ranks(len_s))[0, 1])
    drop = drop_length_bias(lag_s, len_s, threshold) if lag_s.size else None
    result = StalenessResult(per_step, corr, drop)
    result.findings.extend(_findings(result, window_lag.astype(float)))
    return result


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
