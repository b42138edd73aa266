"""How far apart are the trainer's and the rollout engine's log-probs of the same tokens?

The engine samples with one numeric path (bf16 or fp8 kernels, MoE routing) and the
trainer scores with another, so per-token |log p_trainer - log p_rollout| is never zero.
What is normal depends on precision and model type: dense bf16 ~1e-3, fp8 ~1e-2, and
MoE routing flips can exceed 1 for single tokens. Beyond that, the off-policy correction
(truncated importance weights min(w, 2)) starts discarding signal. Evidence: the
``logprob`` table's per-step histograms; without it, verl's ``training/rollout_probs_diff_*``
scalars, which are differences of probabilities (not log-probs) and so only a lower bound.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import (
    IS_CLIP_SHARE_WARN,
    MISMATCH_CRITICAL_FACTOR,
    MISMATCH_LEVEL_BF16,
    MISMATCH_LEVEL_FP8,
    MOE_FLIP_DELTA,
    RECENT_FRACTION,
)
from rlscope.analyzers._data import group_rows, wide_steps
from rlscope.trace.reader import RunReader
from rlscope.trace.schema import LOGPROB_BIN_EDGES, whole_histograms

log = logging.getLogger("rlscope")

__all__ = ["MismatchResult", "abs_quantile", "analyze", "expected_level"]

_VERL_SCALARS = (
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_std",
)


@dataclass
class MismatchResult:
    """Per-step mismatch: |delta| quantiles, shares above the thresholds, IS clip share."""

    source: str  # "histogram", "verl-scalars" or "none"
    precision: str
    model_type: str
    level: float  # normal per-token |delta| for this precision
    per_step: pd.DataFrame = field(default_factory=pd.DataFrame)
    histogram: pd.DataFrame = field(default_factory=pd.DataFrame)  # step x bin counts (for heatmaps)
    findings: list[Finding] = field(default_factory=list)


def expected_level(meta: Mapping[str, Any]) -> tuple[str, str, float]:
    """(precision, model type, normal |delta| per token) from meta.json's ``precision``/``model_type``."""
    precision = str(meta.get("precision") or "bf16").lower()
    model_type = str(meta.get("model_type") or "dense").lower()
    level = MISMATCH_LEVEL_FP8 if "fp8" in precision else MISMATCH_LEVEL_BF16
    return precision, model_type, level


def _bin_index(edge: float) -> int:
    """Index of the first bin whose lower edge is >= ``edge`` (edges are log-spaced, so compare in log)."""
    lows = LOGPROB_BIN_EDGES[:-1]
    with np.errstate(divide="ignore"):
        close = np.isclose(np.log10(np.maximum(lows, 1e-300)), math.log10(edge), atol=1e-9)
    hits = np.flatnonzero(close | (lows > edge))
    return int(hits[0]) if len(hits) else len(lows)


def abs_quantile(counts: np.ndarray, q: float) -> float:
    """The q-quantile of |delta| from bin counts, interpolated log-linearly inside the bin."""
    total = counts.sum()
    if total == 0:
        return math.nan
    cum = np.cumsum(counts)
    i = int(np.searchsorted(cum, q * total, side="left"))
    lo, hi = LOGPROB_BIN_EDGES[i], LOGPROB_BIN_EDGES[i + 1]
    before = cum[i - 1] if i else 0
    frac = (q * total - before) / counts[i] if counts[i] else 0.0
    if lo == 0:
        return float(hi * frac)
    if math.isinf(hi):
        return float(lo)
    return float(lo * (hi / lo) ** frac)


def analyze(run: RunReader | str | os.PathLike[str]) -> MismatchResult:
    """Log-prob mismatch per step, from histograms when recorded, else from verl's scalars."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    precision, model_type, level = expected_level(reader.meta)
    table, broken = whole_histograms(
        reader.read("logprob", ["step", "n_tokens", "abs_counts", "abs_max", "abs_mean", "is_clipped"])
    )
    if broken:
        log.warning("%s: %d log-prob histogram row(s) without one count per bin; left out", reader.location, broken)
    if table.num_rows:
        return _from_histograms(table.to_pandas(), precision, model_type, level)
    steps = wide_steps(reader.read("steps", ["step", "attempt", "time", "key", "value"]))
    present = [k for k in _VERL_SCALARS if k in steps.columns]
    if not present:
        return MismatchResult("none", precision, model_type, level)
    per_step = steps[present].rename(columns=lambda k: k.rsplit("/", 1)[1].replace("rollout_probs_diff_", "prob_diff_"))
    result = MismatchResult("verl-scalars", precision, model_type, level, per_step)
    recent = per_step.iloc[-max(1, math.ceil(len(per_step) * RECENT_FRACTION)) :]
    mean = float(recent["prob_diff_mean"].mean()) if "prob_diff_mean" in recent else math.nan
    if mean > level:
        result.findings.append(_mismatch_finding(mean, level, precision, model_type, "verl-scalars", None))
    return result


def _from_histograms(df: pd.DataFrame, precision: str, model_type: str, level: float) -> MismatchResult:
    g = group_rows(df["step"].to_numpy())
    counts = np.add.reduceat(g.take(np.stack(df["abs_counts"].to_numpy())), g.starts, axis=0)
    hist = pd.DataFrame(counts, index=pd.Index(g.keys, name="step"))
    agg = df.groupby("step").agg(
        n_tokens=("n_tokens", "sum"), abs_max=("abs_max", "max"), is_clipped=("is_clipped", "sum")
    )
    above_level, above_flip = _bin_index(level), _bin_index(MOE_FLIP_DELTA)
    per_step = agg.assign(
        p50_abs=[abs_quantile(c, 0.5) for c in hist.to_numpy()],
        p99_abs=[abs_quantile(c, 0.99) for c in hist.to_numpy()],
        share_above_level=hist.iloc[:, above_level:].sum(axis=1) / agg["n_tokens"].replace(0, np.nan),
        share_above_1=hist.iloc[:, above_flip:].sum(axis=1) / agg["n_tokens"].replace(0, np.nan),
        is_clip_share=agg["is_clipped"] / agg["n_tokens"].replace(0, np.nan),
    )
    result = MismatchResult("histogram", precision, model_type, level, per_step, hist)
    recent_hist = hist.iloc[-max(1, math.ceil(len(hist) * RECENT_FRACTION)) :].sum(axis=0).to_numpy()
    p50 = abs_quantile(recent_hist, 0.5)
    tokens = recent_hist.sum()
    flips = recent_hist[above_flip:].sum() / tokens if tokens else 0.0
    if p50 > level:
        result.findings.append(_mismatch_finding(p50, level, precision, model_type, "histogram", flips))
    if model_type == "moe" and flips > 0:
        result.findings.append(
            finding(
                "moe-routing-flips",
                Severity.INFO,
                {"flip_share": flips, "flip_delta": MOE_FLIP_DELTA},
                f"{flips:.3%} of recent tokens flip (|delta| > {MOE_FLIP_DELTA:g}); keep truncated importance "
                "sampling on and watch the clip share.",
            )
        )
    elif flips > 0 and p50 <= level:
        result.findings.append(
            finding(
                "logprob-mismatch-high",
                Severity.WARN,
                {"p50_abs_delta": p50, "level": level, "precision": precision, "flip_share": flips},
                f"{flips:.2%} of tokens differ by more than {MOE_FLIP_DELTA:g} in log-prob on a {model_type} model: "
                "that is MoE routing-flip territory. Check that rollout and trainer load the same weights "
                "(weight sync finished?) and the same tokenizer and sampling parameters.",
            )
        )
    clip = per_step["is_clip_share"].iloc[-max(1, math.ceil(len(per_step) * RECENT_FRACTION)) :].mean()
    if clip >= IS_CLIP_SHARE_WARN:
        result.findings.append(
            finding(
                "is-clip-high",
                Severity.WARN,
                {"clip_share": float(clip)},
                f"{clip:.1%} of tokens have an importance weight above 2 and are truncated: the correction "
                "discards that much signal. Reduce the mismatch (precision of the rollout, staleness) "
                "before raising the cap.",
            )
        )
    return result


def _mismatch_finding(
    typical: float, level: float, precision: str, model_type: str, source: str, flips: float | None
) -> Finding:
    factor = typical / level
    severity = Severity.CRITICAL if factor >= MISMATCH_CRITICAL_FACTOR else Severity.WARN
    measure = "median |delta log p|" if source == "histogram" else "mean |delta p| (verl scalars, a lower bound)"
    return finding(
        "logprob-mismatch-high",
        severity,
        {
            "p50_abs_delta": typical,
            "level": level,
            "factor": factor,
            "precision": precision,
            "model_type": model_type,
            "flip_share": flips,
            "measure": measure,
        },
        f"{measure} is {typical:.2g}, {factor:.1f}x what {precision} {model_type} rollouts normally show "
        f"({level:g}): the samples are further off-policy than precision explains. Check that weight sync "
        "completed before generation, that rollout and trainer use the same dtype and kernels, and keep "
        "truncated importance sampling on.",
    )
