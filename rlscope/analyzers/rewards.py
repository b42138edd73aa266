"""Is a reward source failing, or merely scoring zero?

A reward of 0 is a legal reward; a reward service that cannot score must say so with an
error code. So rewards are judged per data source: the mean of the rewards that were
scored, the share of legitimate zeros among them, and the error rate by error code.
A failing source has errors; a collapsed source has no errors but now scores zero far
more often than it did earlier in the run (a hard source that always scored mostly
zeros has not collapsed). Evidence: the ``trajectories`` table
(``data_source``, ``reward``, ``reward_status``, ``reward_error``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import (
    RECENT_FRACTION,
    REWARD_ERROR_CRITICAL,
    REWARD_ERROR_WARN,
    REWARD_ZERO_COLLAPSE,
    REWARD_ZERO_RISE_MIN,
)
from rlscope.analyzers._data import Trajectories, chunks
from rlscope.trace.reader import RunReader

__all__ = ["RewardResult", "analyze"]

_UNKNOWN_SOURCE = "(unknown)"


@dataclass
class RewardResult:
    """Reward by source: per (step, source) rows, per-source summary, errors by code."""

    available: bool
    by_step: pd.DataFrame = field(default_factory=pd.DataFrame)  # step, source, n, mean_reward, zero_share, error_rate
    by_source: pd.DataFrame = field(default_factory=pd.DataFrame)  # index source: recent and whole-run rates
    errors: pd.DataFrame = field(default_factory=pd.DataFrame)  # source, code, count, first_step
    findings: list[Finding] = field(default_factory=list)


def _trajectories(run: RunReader | Trajectories | pd.DataFrame | str | os.PathLike[str]) -> Trajectories:
    if isinstance(run, Trajectories):
        return run
    if isinstance(run, pd.DataFrame):
        return Trajectories(run)
    return Trajectories(run if isinstance(run, RunReader) else RunReader(run))


def analyze(run: RunReader | Trajectories | pd.DataFrame | str | os.PathLike[str]) -> RewardResult:
    """Reward by data source from a run (or its trajectories, with the columns above)."""
    traj = _trajectories(run)
    if traj.empty:
        return RewardResult(available=False)
    g = traj.step_groups()
    reward = g.take(traj.numbers("reward")).astype(float, copy=False)
    status, status_names = traj.labels("reward_status", ordered=False)
    status = g.take(status)
    # code -1 (a missing status) reads as ok
    error_of = np.array([str(name).lower() != "ok" for name in status_names] + [False])
    source, names = traj.labels("data_source", missing=_UNKNOWN_SOURCE, ordered=False)
    source = g.take(source)
    # every row falls in one (step, source) cell and one class of (error, rewarded, zero): a
    # bincount over cells x classes per chunk of steps gives all the counts
    width = names.size * 8
    counts = np.empty((g.keys.size, width), dtype=np.int64)
    totals = np.empty((g.keys.size, width))
    errors_at: list[np.ndarray] = []
    said = False
    for steps, rows, local in chunks(g):
        r = reward[rows]
        rated = ~np.isnan(r)
        error = error_of[status[rows]]
        cell = local * width + source[rows] * 8 + error + 2 * rated + 4 * (r == 0)
        size = (steps.stop - steps.start) * width
        counts[steps] = np.bincount(cell, minlength=size).reshape(-1, width)
        totals[steps] = np.bincount(cell, weights=np.where(rated, r, 0.0), minlength=size).reshape(-1, width)
        said = said or bool(rated.any() or error.any())
        errors_at.append(np.flatnonzero(error) + rows.start)
    if not said:
        return RewardResult(available=False)
    grid = (g.keys.size, names.size, 8)
    counts, totals = counts.reshape(grid), totals.reshape(grid)
    by_name = np.argsort(names, kind="stable")  # cells in (step, source) order, as a groupby gives them
    counts, totals = counts[:, by_name].reshape(-1, 8), totals[:, by_name].reshape(-1, 8)
    n = counts.sum(axis=1)
    present = np.flatnonzero(n)
    counts = counts[present]
    by_step = pd.DataFrame(
        {
            "step": g.keys[present // names.size],
            "source": names[by_name][present % names.size],
            "n": n[present],
            "errors": counts[:, [1, 3, 5, 7]].sum(axis=1),
            "scored": counts[:, [2, 6]].sum(axis=1),  # rewarded without an error
            "zeros": counts[:, 6],
            # pandas' sum(min_count=1): NaN where no reward was given
            "reward_sum": np.where(counts[:, [2, 3, 6, 7]].sum(axis=1) > 0, totals[present].sum(axis=1), np.nan),
        }
    )
    by_step["mean_reward"] = by_step["reward_sum"] / by_step["scored"].replace(0, np.nan)
    by_step["zero_share"] = by_step["zeros"] / by_step["scored"].replace(0, np.nan)
    by_step["error_rate"] = by_step["errors"] / by_step["n"]

    recent_from = g.keys[len(g.keys) - max(1, int(np.ceil(len(g.keys) * RECENT_FRACTION)))]
    summary = _summary_table(by_step, recent_from)

    error = np.concatenate(errors_at)  # rows in step order
    codes, code_names = traj.labels("reward_error", missing="unknown", ordered=False)
    errors = _errors(g.take(traj.numbers("step"))[error], source[error], g.take(codes)[error], names, code_names)
    result = RewardResult(True, by_step.drop(columns=["reward_sum"]), summary, errors)
    result.findings = _findings(summary, by_step, errors, recent_from)
    return result


def _errors(
    step: np.ndarray, source: np.ndarray, code: np.ndarray, sources: np.ndarray, code_names: np.ndarray
) -> pd.DataFrame:
    """Errors per (source, code): count and first step, most frequent first within a source."""
    cell = source.astype(np.int64) * max(code_names.size, 1) + code
    count = np.bincount(cell, minlength=sources.size * max(code_names.size, 1))
    present = np.flatnonzero(count)
    first = np.full(count.size, np.iinfo(np.int64).max)
    np.minimum.at(first, cell, step.astype(np.int64))
    out = pd.DataFrame(
        {
            "source": sources[present // max(code_names.size, 1)],
            "code": code_names[present % max(code_names.size, 1)] if code_names.size else [],
            "count": count[present],
            "first_step": first[present],
        }
    )
    return out.sort_values(["source", "count"], ascending=[True, False], kind="stable").reset_index(drop=True)


def _summary_table(by_step: pd.DataFrame, recent_from: int) -> pd.DataFrame:
    """Per source: recent error rate, zero share and mean reward, and the earlier mean."""
    out = {}
    for source, rows in by_step.groupby("source"):
        recent, earlier = rows[rows["step"] >= recent_from], rows[rows["step"] < recent_from]
        out[source] = {
            "samples": int(rows["n"].sum()),
            "recent_error_rate": _ratio(recent["errors"].sum(), recent["n"].sum()),
            "recent_zero_share": _ratio(recent["zeros"].sum(), recent["scored"].sum()),
            "recent_mean_reward": _ratio(recent["reward_sum"].sum(), recent["scored"].sum()),
            "earlier_mean_reward": _ratio(earlier["reward_sum"].sum(), earlier["scored"].sum()),
            "earlier_zero_share": _ratio(earlier["zeros"].sum(), earlier["scored"].sum()),
            "error_rate": _ratio(rows["errors"].sum(), rows["n"].sum()),
            "zero_share": _ratio(rows["zeros"].sum(), rows["scored"].sum()),
        }
    return pd.DataFrame.from_dict(out, orient="index").rename_axis("source")


def _ratio(num: float, den: float) -> float:
    return float(num) / float(den) if den else float("nan")


def _findings(summary: pd.DataFrame, by_step: pd.DataFrame, errors: pd.DataFrame, recent_from: int) -> list[Finding]:
    findings = []
    for source, row in summary.iterrows():
        failing = by_step[(by_step["source"] == source) & (by_step["error_rate"] >= REWARD_ERROR_WARN)]
        if len(failing):
            findings.append(_failing(source, row, failing, errors[errors["source"] == source], recent_from))
            continue
        rise = row["recent_zero_share"] - row["earlier_zero_share"]  # NaN without earlier steps
        if row["recent_zero_share"] >= REWARD_ZERO_COLLAPSE and rise >= REWARD_ZERO_RISE_MIN:
            evidence = {
                "source": source,
                "zero_share": float(row["recent_zero_share"]),
                "error_rate": float(row["recent_error_rate"]),
                "earlier_zero_share": float(row["earlier_zero_share"]),
                "earlier_mean_reward": float(row["earlier_mean_reward"]),
            }
            findings.append(
                finding(
                    "reward-source-zero-collapse",
                    Severity.WARN,
                    evidence,
                    f"{source!r} scores 0 on {evidence['zero_share']:.0%} of recent samples with no errors "
                    f"(earlier {evidence['earlier_zero_share']:.0%}, mean {evidence['earlier_mean_reward']:.3g}): the service answers, so this is not "
                    "an outage. Check the data and the reward function's version (answer format, parser) "
                    "before assuming the policy collapsed.",
                )
            )
    return findings


def _failing(source: str, row: pd.Series, failing: pd.DataFrame, codes: pd.DataFrame, recent_from: int) -> Finding:
    """A source with steps whose error rate reached the warn level: an outage, ongoing or past."""
    first, last = int(failing["step"].min()), int(failing["step"].max())
    rate = float(failing["errors"].sum() / failing["n"].sum())
    ongoing = last >= recent_from
    top = codes.iloc[0] if len(codes) else None
    evidence = {
        "source": source,
        "error_rate": rate,
        "first_step": first,
        "last_step": last,
        "ongoing": ongoing,
        "recent_error_rate": float(row["recent_error_rate"]),
        "top_code": None if top is None else str(top["code"]),
        "codes": {str(c): int(n) for c, n in zip(codes["code"], codes["count"], strict=True)},
    }
    critical = ongoing and row["recent_error_rate"] >= REWARD_ERROR_CRITICAL
    when = "and is still failing" if ongoing else f"and recovered after step {last}"
    return finding(
        "reward-source-failing",
        Severity.CRITICAL if critical else Severity.WARN,
        evidence,
        f"the reward service for {source!r} failed on {rate:.0%} of samples in steps {first}-{last} "
        f"(mostly {evidence['top_code']}) {when}: those samples carried no reward signal. Fix or scale "
        "the service before touching the policy; triage data -> version -> async -> implementation.",
    )
