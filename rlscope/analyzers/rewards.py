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
from rlscope.analyzers._data import CHUNK_ROWS, Trajectories, chunks, recent, wide_steps
from rlscope.trace.reader import RunReader

__all__ = ["RewardResult", "analyze"]

_UNKNOWN_SOURCE = "(unknown)"
# verl's per-step reward and advantage ranges
_SCORE_MAX, _SCORE_MIN = "critic/score/max", "critic/score/min"
_ADVANTAGE_MAX, _ADVANTAGE_MIN = "critic/advantages/max", "critic/advantages/min"
# cells of (step, source, class) counted at a time: a chunk of steps is sized to about this many
_CHUNK_CELLS = 1 << 18
# a row's class within its (step, source) cell: its reward is NaN (0), nonzero or zero, plus
# _ERROR when its status is an error
_NONZERO, _ZERO, _ERROR = 1, 2, 3
_CLASSES = 6


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


def analyze(
    run: RunReader | Trajectories | pd.DataFrame | str | os.PathLike[str], steps: pd.DataFrame | None = None
) -> RewardResult:
    """Reward by data source from a run (or its trajectories, with the columns above), and
    whether the recent steps had any reward signal at all (from ``steps``, the wide step
    metrics; read from the run when not given and ``run`` is one)."""
    traj = _trajectories(run)
    if steps is None and not isinstance(run, (Trajectories, pd.DataFrame)):
        reader = run if isinstance(run, RunReader) else RunReader(run)
        steps = wide_steps(reader.read("steps", ["step", "attempt", "time", "key", "value"]))
    signal = [] if steps is None else _no_signal(steps)
    result = _by_source(traj)
    result.findings = signal + result.findings
    return result


def _no_signal(steps: pd.DataFrame) -> list[Finding]:
    """Recent steps whose every sample got the same reward (verl's critic/score max = min).

    With advantages logged, the finding is that they were all 0: the policy got no gradient
    from reward, whatever the estimator. Without them, a constant reward gives a group-relative
    estimator (GRPO, RLOO) nothing to learn from.
    """
    if not {_SCORE_MAX, _SCORE_MIN} <= set(steps.columns):
        return []
    scores = steps[[_SCORE_MAX, _SCORE_MIN]].dropna()
    now = recent(scores) if len(scores) else scores
    if now.empty or not (now[_SCORE_MAX] == now[_SCORE_MIN]).all():
        return []
    advantages = [k for k in (_ADVANTAGE_MAX, _ADVANTAGE_MIN) if k in steps.columns]
    flat = steps.loc[now.index, advantages].abs().max(axis=1) if advantages else pd.Series(dtype=float)
    if len(advantages) == 2 and not (flat.notna().all() and (flat <= 1e-9).all()):
        return []  # a critic (PPO) still gives advantages when rewards are flat
    value, first, last = float(now[_SCORE_MAX].iloc[-1]), int(now.index[0]), int(now.index[-1])
    zero_advantages = len(advantages) == 2
    evidence = {"steps": len(now), "first_step": first, "last_step": last, "reward": value}
    evidence["advantages_zero"] = zero_advantages
    where = f"step {last}" if first == last else f"steps {first}-{last}"
    if zero_advantages:
        consequence = "its advantages are all 0, so the policy learns nothing from reward"
    else:
        consequence = "a group-relative estimator (GRPO, RLOO) gets no advantage from it"
    return [
        finding(
            "reward-no-signal",
            Severity.CRITICAL if zero_advantages else Severity.WARN,
            evidence,
            f"every sample of {where} got reward {value:g} (critic/score max = min): {consequence}. A reward "
            "stuck at 0 is usually an answer-format or parser mismatch, or a reward service that never "
            "scores; at the maximum, the prompts are too easy. Check a few samples against the reward "
            "function before tuning anything else.",
        )
    ]


def _by_source(traj: Trajectories) -> RewardResult:
    if traj.empty:
        return RewardResult(available=False)
    g = traj.step_groups()
    reward = traj.in_step_order("reward")
    status, status_names = traj.labels("reward_status", ordered=False)
    status = g.take(status)
    # code -1 (a missing status) reads as ok
    error_codes = [code for code, name in enumerate(status_names) if str(name).lower() != "ok"]
    source, names = traj.labels("data_source", missing=_UNKNOWN_SOURCE, ordered=False)
    source = g.take(source)
    # every row falls in one (step, source) cell and one of six classes (NaN, _NONZERO or _ZERO,
    # plus _ERROR if it is one): a bincount over cells x classes per chunk of steps gives all
    # the counts, and one weighted by the reward the sums (a NaN lands in an unrated class, an
    # error's reward in an error class: neither is read). A chunk holds few enough steps that its
    # table of cells stays small however many sources there are; only the cells with rows are kept.
    width = names.size * _CLASSES
    rows_per_chunk = max(1, _CHUNK_CELLS * len(traj) // (g.keys.size * width))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # step index, source, counts, sums
    errors_at: list[np.ndarray] = []
    said = False
    for steps, rows, local in chunks(g, min(rows_per_chunk, CHUNK_ROWS)):
        r = reward[rows].astype(float, copy=False)
        rated = r == r  # not NaN
        # the row's source and class first, in the source codes' narrower type, then its step's offset
        within = source[rows] * _CLASSES
        within += rated  # _NONZERO
        within += r == 0  # _ZERO, rated too
        if error_codes:
            error = _among(status[rows], error_codes)
            within += error * _ERROR
            errors_at.append(np.flatnonzero(error) + rows.start)
            said = said or bool(error.any())
        cell = local * width
        cell += within
        size = (steps.stop - steps.start) * width
        counts = np.bincount(cell, minlength=size).reshape(-1, _CLASSES)
        sums = np.bincount(cell, weights=r, minlength=size).reshape(-1, _CLASSES)
        present = np.flatnonzero(counts.any(axis=1))
        parts.append((steps.start + present // names.size, present % names.size, counts[present], sums[present]))
        said = said or bool(rated.any())
    if not said:
        return RewardResult(available=False)
    step_index, cell_source, counts, sums = (np.concatenate([p[i] for p in parts]) for i in range(4))
    # cells in (step, source name) order, as a groupby gives them
    rank = np.empty(names.size, dtype=np.int64)
    rank[np.argsort(names, kind="stable")] = np.arange(names.size)
    order = np.lexsort((rank[cell_source], step_index))
    step_index, cell_source, counts, sums = step_index[order], cell_source[order], counts[order], sums[order]
    scored = counts[:, _NONZERO] + counts[:, _ZERO]  # rewarded without an error
    by_step = pd.DataFrame(
        {
            "step": g.keys[step_index],
            "source": names[cell_source],
            "n": counts.sum(axis=1),
            "errors": counts[:, _ERROR:].sum(axis=1),
            "scored": scored,
            "zeros": counts[:, _ZERO],
            # the rewards of scored rows (a reward beside an error is not a score; a zero adds
            # nothing); NaN where none was
            "reward_sum": np.where(scored > 0, sums[:, _NONZERO], np.nan),
        }
    )
    by_step["mean_reward"] = by_step["reward_sum"] / by_step["scored"].replace(0, np.nan)
    by_step["zero_share"] = by_step["zeros"] / by_step["scored"].replace(0, np.nan)
    by_step["error_rate"] = by_step["errors"] / by_step["n"]

    recent_from = g.keys[len(g.keys) - max(1, int(np.ceil(len(g.keys) * RECENT_FRACTION)))]
    summary = _summary_table(by_step, recent_from)

    error = np.concatenate(errors_at) if errors_at else np.zeros(0, dtype=np.intp)  # rows in step order
    # error codes of the error rows alone: a few among millions of rows
    codes, code_names = traj.labels_at("reward_error", error if g.order is None else g.order[error], "unknown")
    error_steps = g.keys[np.searchsorted(g.starts, error, side="right") - 1]  # the groups the rows lie in
    errors = _errors(error_steps, source[error], codes, names, code_names)
    result = RewardResult(True, by_step.drop(columns=["reward_sum"]), summary, errors)
    result.findings = _findings(summary, by_step, errors, recent_from)
    return result


def _among(codes: np.ndarray, chosen: list[int]) -> np.ndarray:
    """Whether each code is one of ``chosen`` (a few): a comparison per code costs a small
    fraction of a table lookup by int32 codes, which numpy casts and bounds-checks per row."""
    out = codes == chosen[0]
    for code in chosen[1:]:
        out |= codes == code
    return out


def _errors(
    step: np.ndarray, source: np.ndarray, code: np.ndarray, sources: np.ndarray, code_names: np.ndarray
) -> pd.DataFrame:
    """Errors per (source, code): count and first step, most frequent first within a source
    (then by code)."""
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
    return out.sort_values(["source", "count", "code"], ascending=[True, False, True]).reset_index(drop=True)


def _summary_table(by_step: pd.DataFrame, recent_from: int) -> pd.DataFrame:
    """Per source: recent error rate, zero share and mean reward, and the earlier mean."""
    columns = ["n", "errors", "zeros", "scored", "reward_sum"]
    # grouped by each source's place among the sorted names: pandas groups numbers several times
    # faster than text, in the same order and with the same sums
    code, sources = pd.factorize(by_step["source"], sort=True)
    values = by_step[columns].set_axis(code)
    total = values.groupby(level=0).sum()
    later = by_step["step"].to_numpy() >= recent_from
    now, before = (values[rows].groupby(level=0).sum().reindex(total.index, fill_value=0) for rows in (later, ~later))

    def ratio(num: pd.Series, den: pd.Series) -> np.ndarray:
        den = den.to_numpy()
        return num.to_numpy() / np.where(den != 0, den, np.nan)

    return pd.DataFrame(
        {
            "samples": total["n"].to_numpy(dtype=int),
            "recent_error_rate": ratio(now["errors"], now["n"]),
            "recent_zero_share": ratio(now["zeros"], now["scored"]),
            "recent_mean_reward": ratio(now["reward_sum"], now["scored"]),
            "earlier_mean_reward": ratio(before["reward_sum"], before["scored"]),
            "earlier_zero_share": ratio(before["zeros"], before["scored"]),
            "error_rate": ratio(total["errors"], total["n"]),
            "zero_share": ratio(total["zeros"], total["scored"]),
        },
        index=sources[total.index].rename("source"),
    )


def _findings(summary: pd.DataFrame, by_step: pd.DataFrame, errors: pd.DataFrame, recent_from: int) -> list[Finding]:
    findings = []
    failing_rows = by_step[by_step["error_rate"] >= REWARD_ERROR_WARN]
    # split by source only when some step failed: most runs have none
    failing_steps = dict(tuple(failing_rows.groupby("source"))) if len(failing_rows) else {}
    steps_of = dict(tuple(by_step.groupby("source"))) if failing_steps else {}
    codes_of = dict(tuple(errors.groupby("source"))) if failing_steps else {}
    for source, row in summary.iterrows():
        failing = failing_steps.get(source)
        if failing is not None:
            codes = codes_of.get(source, errors.iloc[:0])
            findings.append(_failing(source, row, failing, steps_of[source], codes, recent_from))
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


def _failing(
    source: str, row: pd.Series, failing: pd.DataFrame, steps: pd.DataFrame, codes: pd.DataFrame, recent_from: int
) -> Finding:
    """A source with steps whose error rate reached the warn level: an outage, ongoing or past.

    ``failing``: the source's steps at that level; ``steps``: all its steps. The error rate is
    over every sample of the source from the first failing step to the last, so an outage that
    came back once is not told as one that lasted; it is still failing when the source's
    latest step with samples is a failing one among the recent steps."""
    first, last = int(failing["step"].min()), int(failing["step"].max())
    span = steps[(steps["step"] >= first) & (steps["step"] <= last)]
    rate = float(span["errors"].sum() / span["n"].sum())
    still = int(steps["step"].max()) == last
    ongoing = bool(last >= recent_from)
    top = codes.iloc[0] if len(codes) else None
    evidence = {
        "source": source,
        "error_rate": rate,
        "first_step": first,
        "last_step": last,
        "steps_text": f"steps {first}-{last}" if first != last else f"step {first}",
        "failing_steps": len(failing),
        "steps": len(span),
        "ongoing": ongoing,
        "recent_error_rate": float(row["recent_error_rate"]),
        "top_code": None if top is None else str(top["code"]),
        "codes": {str(c): int(n) for c, n in zip(codes["code"], codes["count"], strict=True)},
    }
    critical = ongoing and row["recent_error_rate"] >= REWARD_ERROR_CRITICAL
    if still and ongoing:
        when = "and is still failing"
    elif still:
        when = f"and has had no samples since step {last}"
    elif ongoing:
        when = f"and failed as late as step {last} ({evidence['recent_error_rate']:.0%} of recent samples)"
    else:
        when = f"and recovered after step {last}"
    where = evidence["steps_text"]
    detail = f"mostly {evidence['top_code']}"
    if len(failing) < len(span):
        detail += f"; {len(failing)} of those {len(span)} steps at {REWARD_ERROR_WARN:.0%} errors or more"
    return finding(
        "reward-source-failing",
        Severity.CRITICAL if critical else Severity.WARN,
        evidence,
        f"the reward service for {source!r} failed on {rate:.0%} of samples in {where} ({detail}) {when}: "
        "those samples carried no reward signal. Fix or scale "
        "the service before touching the policy; triage data -> version -> async -> implementation.",
    )
