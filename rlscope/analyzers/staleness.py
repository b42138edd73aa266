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
from dataclasses import dataclass, field

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
from rlscope.analyzers._data import RunFrames, load, recent
from rlscope.trace.reader import RunReader

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


def _quantile(x: pd.Series, q: float) -> float:
    return float(np.quantile(x.to_numpy(dtype=float), q, method="inverted_cdf"))


def analyze(run: RunReader | RunFrames | str | os.PathLike[str], threshold: int | None = None) -> StalenessResult:
    """Lag per trajectory, its per-step distribution, its correlation with length and the drop bias.

    ``threshold`` defaults to ``meta.json``'s ``max_off_policy_threshold``, else verl's 8.
    """
    frames = load(run)
    if threshold is None:
        threshold = int(frames.meta.get("max_off_policy_threshold") or STALENESS_DROP_THRESHOLD)
    traj = frames.trajectories
    df = traj.dropna(subset=["trainer_version", "policy_version_start"]) if not traj.empty else traj
    columns = ["n", "mean", "p50", "p90", "max", "over_threshold"]
    if df.empty:
        return StalenessResult(pd.DataFrame(columns=columns), math.nan, None)
    df = df.assign(lag=(df["trainer_version"] - df["policy_version_start"]).astype(float))
    per_step = df.groupby("step")["lag"].agg(
        n="size",
        mean="mean",
        p50=lambda x: _quantile(x, 0.5),
        p90=lambda x: _quantile(x, 0.9),
        max="max",
        over_threshold=lambda x: float((x > threshold).mean()),
    )
    window = df[df["step"].isin(recent(per_step).index)]
    sized = window.dropna(subset=["response_tokens"])
    corr = math.nan
    if len(sized) > 2 and sized["lag"].nunique() > 1 and sized["response_tokens"].nunique() > 1:
        # Spearman = Pearson of average ranks (pandas' method="spearman" would import scipy)
        corr = float(np.corrcoef(sized["lag"].rank(), sized["response_tokens"].rank())[0, 1])
    drop = drop_length_bias(sized["lag"], sized["response_tokens"], threshold) if not sized.empty else None
    result = StalenessResult(per_step, corr, drop)
    result.findings.extend(_findings(result, window["lag"]))
    return result


def _findings(r: StalenessResult, lags: pd.Series) -> list[Finding]:
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
