"""One JSON-ready document per diagnosis: what every report format renders, and the JSON output.

The document is versioned (``SCHEMA``) and documented in ``docs/diagnose-json.md``. Numbers
that are not known are ``null`` (never NaN), so any JSON parser reads it.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rlscope import __version__
from rlscope.advice.finding import fmt_count, fmt_steps
from rlscope.analyzers import Diagnosis, RunFacts
from rlscope.analyzers._data import meta_problems, recent
from rlscope.analyzers.gpu_idle import learner_role
from rlscope.analyzers.mfu import VERL_MFU_KEYS
from rlscope.collectors.verl_metrics import STEP_TIMER
from rlscope.trace.reader import RunReader

__all__ = ["NAMED_STEPS", "SCHEMA", "build_document", "clean", "read_warnings"]

SCHEMA = "rlscope.diagnose/2"

NAMED_STEPS = 5
"""Steps a warning about a timer logged as inf or NaN names; it counts the rest."""


def clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None, numpy scalars -> Python, frames -> records."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, pd.DataFrame):
        named = value.index.name is not None and value.index.name not in value.columns
        return _records(value.reset_index() if named else value)
    if isinstance(value, pd.Series):
        return clean(value.to_dict())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer, int)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return None if not math.isfinite(value) else float(value)
    if value is None or isinstance(value, str):
        return value
    return str(value)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``clean(frame.to_dict(orient="records"))``, a column at a time: per-step tables of long
    runs hold hundreds of thousands of values, too many to clean one by one."""
    keys = [str(k) for k in frame.columns]
    columns = [_cleaned(frame.iloc[:, i]) for i in range(frame.shape[1])]
    if not keys:
        return [{} for _ in range(len(frame))]
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]


def _cleaned(column: pd.Series) -> list[Any]:
    """A column's values as :func:`clean` makes them of ``to_dict(orient="records")``."""
    kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else None
    if kind is not None and kind in "iub":
        return column.to_numpy().tolist()
    if kind == "f":
        values = column.to_numpy()
        out = values.tolist()
        for i in np.flatnonzero(~np.isfinite(values)):
            out[i] = None
        return out
    if isinstance(column.dtype, pd.StringDtype) and column.dtype.na_value is np.nan:
        # pandas' default text: tolist() gives what to_dict() does (str, NaN where missing), without a
        # dict per row
        return [value if type(value) is str else clean(value) for value in column.tolist()]
    return [clean(next(iter(row.values()))) for row in column.to_frame().to_dict(orient="records")]


def _num(x: Any) -> float | None:
    return clean(float(x)) if x is not None else None


def _run_section(reader: RunReader, d: Diagnosis, source: str) -> dict[str, Any]:
    meta = reader.meta
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    facts = RunFacts.from_meta(meta)  # the values the analyzers used, not ones they had to ignore
    steps = d.anatomy.seconds.index
    return {
        "source": source,
        "framework": meta.get("framework"),
        "framework_version": meta.get("framework_version"),
        "scenario": meta.get("scenario"),
        "model": model.get("name"),
        "active_params": facts.active_params,
        "gpu_type": facts.gpu_type,
        "gpu_count": facts.n_gpus,
        "batch_size": facts.batch_size,
        "group_size": facts.group_size,
        "topology": "colocate_async" if d.topology.shared else d.topology.current,
        "split": None
        if d.topology.n_rollout is None
        else {"rollout": d.topology.n_rollout, "train": d.topology.n_train},
        "steps": len(steps),
        "first_step": int(steps.min()) if len(steps) else None,
        "last_step": int(steps.max()) if len(steps) else None,
        # what was read in part or not at all: a report saved to a file says so as the terminal did
        "warnings": read_warnings(
            meta,
            d.anatomy.unfinite,
            reader.warnings,
            out_of_range=d.topology.out_of_range,
            clock_times=d.longtail.clock_times,
        ),
    }


def read_warnings(
    meta: dict[str, Any],
    unfinite: Mapping[str, Sequence[int]],
    unreadable: list[str],
    counts: Mapping[str, int] | None = None,
    *,
    out_of_range: Mapping[str, Sequence[tuple[int, float]]] | None = None,
    clock_times: Mapping[str, Sequence[tuple[int, float]]] | None = None,
) -> list[str]:
    """What a run was read with in part or not at all, as diagnose's "Read with warnings" lists it: ignored
    meta.json values, what its import left out, timers logged as inf or NaN, shares of time logged
    outside [0, 1], trajectory times logged as a clock's, and unreadable segments, by path (the dashboard's notices
    list the same, in the same words; of the steps that left its window they keep only a count and the
    first steps of timers and shares, see ``counts``).

    ``unfinite``: per timer, its steps logged so in order (the first :data:`NAMED_STEPS` are named);
    ``out_of_range``: per share, its steps logged so in order, each with its value (the first is
    named, as ``RunFrames.out_of_range``); ``counts``: per timer or share, how many such steps there
    are where ``unfinite`` or ``out_of_range`` lists only the first of them (the live dashboard keeps
    no more of the steps that left its window); ``clock_times``: per trajectory time column, its steps
    logged so in order, each with its first such value (``LongTailResult.clock_times``)."""
    counts = counts or {}
    return (
        [f"meta.json: {p}; ignored" for p in meta_problems(meta)]
        + _import_warnings(meta)
        + _unfinite_warnings(unfinite, counts)
        + _out_of_range_warnings(out_of_range or {}, counts)
        + _clock_warnings(clock_times or {})
        + sorted(unreadable)  # by path: analyzers on two threads read the tables in no fixed order
    )


def _clock_warnings(clock_times: Mapping[str, Sequence[tuple[int, float]]]) -> list[str]:
    """One warning per trajectory time column logged as a clock's time (``time.time()``) in some steps,
    whose finish times the long tail then leaves out: else unseen, but for the tail they leave unknown."""
    out = []
    for column, logged in sorted(clock_times.items()):
        step, value = logged[0]
        n = len(logged)
        where = f"{fmt_steps(n)} ({'step' if n == 1 else 'first step'} {step}: {value:.0f} s)"
        out.append(
            f"trajectories' {column} was logged as a clock's time (time.time()) in {where}: those steps' finish "
            "times are read as not measured; log seconds since the step's rollout began"
        )
    return out


def _out_of_range_warnings(
    out_of_range: Mapping[str, Sequence[tuple[int, float]]], counts: Mapping[str, int]
) -> list[str]:
    """One warning per share of time (verl's idle ratios, its occupancy share) logged outside [0, 1]
    in some steps: read as not logged there, which would otherwise go unseen (an idle ratio of 1.1
    leaves the rollout pool negative busy time)."""
    out = []
    for key, logged in sorted(out_of_range.items()):
        n = counts.get(key, len(logged))
        where = fmt_steps(n)
        if logged:  # else the dashboard knows how many, not which
            step, value = logged[0]
            where += f" ({'step' if n == 1 else 'first step'} {step}: {value!r})"
        out.append(f"{key}, a share, was logged outside [0, 1] in {where}: read as not logged there")
    return out


def _unfinite_warnings(unfinite: Mapping[str, Sequence[int]], counts: Mapping[str, int]) -> list[str]:
    """One warning per timer the run logged as inf or NaN in some steps: values the analyzers
    cannot use, which would otherwise go unseen (a step timer's would shorten the mean step)."""
    out = []
    for key, steps in sorted(unfinite.items()):
        named = list(steps[:NAMED_STEPS])
        more = counts.get(key, len(steps)) - len(named)
        plural = "s" if len(named) + more > 1 else ""
        if named:
            where = f"step{plural} {', '.join(map(str, named))}" + (f" and {more} more" if more else "")
        else:  # the dashboard knows how many, not which
            where = f"{more} step{plural}"
        if key == STEP_TIMER:
            out.append(
                f"{key} was logged as inf or NaN in {where}: time unknown, left out of the step analysis "
                "rather than timed by the sum of the stage timers"
            )
        else:
            out.append(f"{key} was logged as inf or NaN in {where}: read as untimed there")
    return out


# skip reasons that lose no value of a step: a pprinted dict that repeats a step line (verl's validation
# before training prints both) is in nearly every log, and so is, in a fully async run that ends after
# a version not due for validation, the rollouter's window after the last update; calling either a
# warning would cry wolf
_NOTHING_LOST = frozenset({"duplicate_of_step_line", "fully_async_final_window"})


def _import_warnings(meta: dict[str, Any]) -> list[str]:
    """What the import that wrote the run (``meta.json["importer"]``) left out or read in part."""
    record = meta.get("importer")
    if not isinstance(record, dict):
        return []
    name = record.get("name", "?")
    skipped = record.get("skipped") if isinstance(record.get("skipped"), dict) else {}
    # where each reason first happened, so that a user can find what was left out (older imports lack it)
    first = record.get("skipped_first") if isinstance(record.get("skipped_first"), dict) else {}
    counts = ", ".join(
        f"{n} {reason}"
        + (f" (first at {first[reason]})" if isinstance(first.get(reason), str) and first[reason] else "")
        for reason, n in sorted(skipped.items())
        if type(n) is int and n > 0 and reason not in _NOTHING_LOST  # not True
    )
    out = [f"the import ({name}) left out {counts}"] if counts else []
    restarts = record.get("restarts")
    if type(restarts) is int and restarts > 0:
        out.append(
            f"the log restarted {fmt_count(restarts, 'time')} (steps logged again): each step is read from its latest attempt"
        )
    notes = record.get("notes")
    return out + [str(n) for n in notes] if isinstance(notes, list) else out


def _recent_shares(seconds: pd.DataFrame) -> pd.Series | dict[str, float]:
    """Each phase's recent mean seconds over the recent mean step: ratios of means, as the
    headline's generation_share, so the two agree when step times vary."""
    if seconds.empty:
        return {}
    means = recent(seconds).mean()
    step = means["step"]
    return means.drop("step") / step if step > 0 else means.drop("step") * math.nan


def _headline(d: Diagnosis) -> dict[str, Any]:
    seconds = d.anatomy.seconds
    step_s = float(recent(seconds["step"]).mean()) if "step" in seconds else math.nan
    # generation no recent step timed is unmeasured (its time, if any, is in other), not 0 s
    timed_gen = "gen" in seconds and "gen" in d.anatomy.logged_recent
    gen_s = float(recent(seconds["gen"]).mean()) if timed_gen else math.nan
    # the ratio of the two means shown beside it (as the generation-dominates finding and the
    # dashboard take it), not a mean of per-step ratios that those two numbers would not give
    gen_share = gen_s / step_s if step_s > 0 else math.nan
    best = None
    t = d.topology
    if not t.what_if.empty:
        row, n_r, n_t, best_s = t.best()
        best = {
            "topology": row,
            "n_rollout": None if math.isnan(n_r) else int(n_r),
            "n_train": None if math.isnan(n_t) else int(n_t),
            "step_s": _num(best_s),
            "speedup": _num(t.step_now_s / best_s),
            # a gain only if shorter than the model's step now (model against model, as the speedup)
            "improves": t.improves(best_s),
        }
    trainer_idle = None
    if d.gpu_idle is not None and d.gpu_idle.available and not d.gpu_idle.by_step.empty:
        rows = d.gpu_idle.by_step[d.gpu_idle.by_step["role"] == learner_role(d.gpu_idle.by_step["role"])]
        if len(rows):
            trainer_idle = _num((rows["idle_share"] * rows["samples"]).sum() / rows["samples"].sum())
    timed = recent(d.anatomy.timed)
    basis = "step timer" if timed.all() else "sum of stage timers" if not timed.any() else "mixed"
    return {
        "step_s": _num(step_s),
        "step_s_basis": basis if not math.isnan(step_s) else None,
        "step_s_model": _num(t.step_now_s),
        "generation_share": _num(gen_share),
        "generation_s": _num(gen_s),
        "generation_overlapped": bool(d.anatomy.overlapped),
        "tail_share": _num(d.longtail.tail_share),
        "tail_estimated": bool(d.longtail.estimated),
        "tail_share_max": _num(d.longtail.tail_share_max),
        "tail_capped_steps": list(d.longtail.recent_capped_steps),
        "t_thr_s": _num(d.longtail.t_thr_s),
        "t_tail_s": _num(d.longtail.t_tail_s),
        "mfu": _num(d.mfu.mfu),
        "async_speedup": _num(t.async_speedup),
        "async_speedup_max": _num(t.async_speedup_max),
        "overlap_bound": _num(t.overlap_bound),
        "best_topology": best,
        "trainer_gpu_idle_share": trainer_idle,
    }


def build_document(d: Diagnosis, reader: RunReader, source: str) -> dict[str, Any]:
    """The diagnosis as the versioned JSON document (see docs/diagnose-json.md)."""
    findings = [f.to_dict() for f in d.findings]
    counts = Counter(f["severity"] for f in findings)
    rewards = d.rewards
    mismatch = d.mismatch
    gpu = d.gpu_idle
    doc = {
        "schema": SCHEMA,
        "rlscope_version": __version__,
        "run": _run_section(reader, d, source),
        "headline": _headline(d),
        "findings": findings,
        "counts": {s: counts.get(s, 0) for s in ("critical", "warn", "info")},
        "phases": {
            "seconds_per_step": d.anatomy.seconds.rename(columns={"step": "step_s"}),
            "recent_shares": _recent_shares(d.anatomy.seconds),
            "logged": list(d.anatomy.logged),
            "logged_recent": list(d.anatomy.logged_recent),
            "timed_recent": d.anatomy.timed_recent,
            # which steps a step timer holds: what stage-timers-overlap judges, and where other is measured
            "step_timed": int(d.anatomy.timed.sum()),
            "step_timed_recent": int(recent(d.anatomy.timed).sum()),
        },
        "long_tail": {
            "estimated": d.longtail.estimated,
            "per_step": d.longtail.per_step,
            "capped_steps": list(d.longtail.capped_steps),
            "growth_judged": d.longtail.growth_judged,
            "clock_time_steps": list(d.longtail.clock_time_steps),
        },
        "mfu": {
            "mfu": d.mfu.mfu,
            "waterfall_points": d.mfu.waterfall,
            "tail_estimated": d.mfu.tail_estimated,
            "tail_unknown": d.mfu.tail_unknown,
            "tail_points_max": d.mfu.tail_points_max,
            "tail_unknown_steps": list(d.mfu.tail_unknown_steps),
            "cross_check": d.mfu.cross_check,
            # verl's own, kept where ``mfu`` is null too: what the reports show then
            "verl_stage_mfu": [
                {"key": key, "stage": VERL_MFU_KEYS[key], "mfu": value} for key, value in d.mfu.verl_stage.items()
            ],
            "missing": list(d.mfu.missing),
            "uncounted": list(d.mfu.uncounted),
        },
        "topology": {
            "current": d.topology.current,
            "shared": d.topology.shared,
            "missing": d.topology.missing,
            "busy_upper_bound": d.topology.busy_upper_bound,
            # GPU counts as whole numbers (null for colocated), as in best_topology
            "what_if": d.topology.what_if.astype({"n_rollout": "Int64", "n_train": "Int64"}),
            "async_speedup": d.topology.async_speedup,
            "tail_unknown": d.topology.tail_unknown,
            "async_speedup_max": d.topology.async_speedup_max,
            "overlap_bound": d.topology.overlap_bound,
        },
        "split_drift": {
            "topology": d.drift.topology,
            "first_rollout": d.drift.first_rollout,
            "last_rollout": d.drift.last_rollout,
            "tail_unknown": d.drift.tail_unknown,
            "per_step": d.drift.per_step,
        },
        "staleness": {
            "source": d.staleness.source,
            "verl_keys": d.staleness.verl_keys,
            "per_step": d.staleness.per_step,
            "length_correlation": d.staleness.length_correlation,
            "drop": None if d.staleness.drop is None else dataclasses.asdict(d.staleness.drop),
            "expected": None
            if d.staleness.expected is None
            else {**dataclasses.asdict(d.staleness.expected), "excess": d.staleness.expected.excess},
        },
        "engines": {"load_unit": d.sync_balance.load_unit, "per_step": d.sync_balance.engines},
        "weight_sync": {"bubble": d.sync_balance.bubble, "t_sync_s": d.sync_balance.t_sync_s, "k": d.sync_balance.k},
        "logprob_mismatch": None
        if mismatch is None or mismatch.source == "none"
        else {
            "source": mismatch.source,
            "precision": mismatch.precision,
            "model_type": mismatch.model_type,
            "level": mismatch.level,
            "per_step": mismatch.per_step,
        },
        "rewards": None
        if rewards is None or not rewards.available
        else {"by_source": rewards.by_source, "by_step": rewards.by_step, "errors": rewards.errors},
        "gpu_idle": None
        if gpu is None or not gpu.available
        else {"by_role": gpu.by_role, "by_phase": gpu.by_phase, "by_step": gpu.by_step},
    }
    return clean(doc)
