"""Shared inputs of the analyzers: a run's steps and trajectories, its facts, and trends.

``load(run)`` accepts a ``RunReader``, a run-directory path or ready ``RunFrames`` (tests
and the facade pass frames so a run is read once). The long ``steps`` table becomes one
wide pandas row per step. A run has millions of trajectory rows, so they stay numpy
columns (:class:`Trajectories`, each read on first use, text as dictionary codes) that the
analyzers walk with :func:`group_rows` and :func:`group_counts` rather than pandas groupby.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rlscope.advice.thresholds import RECENT_FRACTION
from rlscope.analyzers.gpus import peak_flops
from rlscope.collectors.verl_metrics import (
    SHARE_KEYS,
    STEP_TIMER,
    canonical_metric,
    in_share_range,
    is_validation_key,
    read_rows,
    training_rows,
)
from rlscope.errors import RunDirError
from rlscope.trace.reader import RunReader, SegmentInfo
from rlscope.trace.schema import CLOCK_TIME_S, TABLES, TRAJECTORY_TIMES

# group_counts() loops over groups averaging at least this many rows (a Python step per group)
_ROWS_PER_GROUP_LOOPED = 256
# rows chunks() hands out at a time: each temporary column a few hundred kB
CHUNK_ROWS = 1 << 16

__all__ = [
    "CHUNK_ROWS",
    "TOPOLOGIES",
    "TRAJECTORY_COLUMNS",
    "Groups",
    "Pieces",
    "RunFacts",
    "RunFrames",
    "Trajectories",
    "Trend",
    "chunks",
    "early",
    "group_counts",
    "group_pieces",
    "group_rows",
    "imported_job_firsts",
    "job_first_steps",
    "kept",
    "labels",
    "last_attempt_rows",
    "last_attempt_table",
    "load",
    "number_chunks",
    "numbers",
    "out_of_range_of",
    "out_of_range_shares",
    "pipeline_fills",
    "pivot_placed",
    "placed_step_rows",
    "readings_of",
    "recent",
    "share_readings",
    "steps_text",
    "timer_finiteness",
    "topology_kind",
    "training_attempts",
    "training_records",
    "trend",
    "unfinite_of",
    "unfinite_timers",
    "usable_step_rows",
    "wide_steps",
]

TRAJECTORY_COLUMNS = (
    "step",
    "prompt_tokens",
    "response_tokens",
    "gen_s",
    "submit_time",
    "finish_time",
    "engine",
    "policy_version_start",
    "trainer_version",
    "aborted",
)

# the topologies the analyzers model, in meta.json's wording normalised by topology_kind()
TOPOLOGIES = ("colocated", "separated_sync", "one_step_overlap", "async_streaming")


def _known_topology(wording: str) -> bool:
    """Whether :func:`topology_kind` understands ``wording`` (else it falls back to colocated)."""
    t = wording.lower().replace("-", "_").replace(" ", "_")
    return topology_kind(t) != "colocated" or any(w in t for w in ("coloc", "hybrid", "shared"))


def topology_kind(wording: str) -> str:
    """Map ``meta.json``'s topology (``separated``, ``separate_async``, ...) onto :data:`TOPOLOGIES`."""
    t = wording.lower().replace("-", "_").replace(" ", "_")
    if "async" in t:
        return "async_streaming"
    if "one_step" in t or "overlap" in t:
        return "one_step_overlap"
    if "separat" in t or "disagg" in t:
        return "separated_sync"
    return "colocated"


def usable_step_rows(steps: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """The rows of the long ``steps`` table that say something, keys canonicalised: rows without a
    key, text values, non-finite numbers, negative stage timers and shares of time outside [0, 1] (verl's idle
    ratios and occupancy share, ``SHARE_KEYS``; :func:`out_of_range_shares`) are dropped
    (``verl_metrics.read_rows``, as the exporter and the importers read them), shares within
    rounding of it (``SHARE_SLACK``) clipped into it; keys (and values whose unit changed with
    the name) are canonicalised by ``rlscope.collectors.verl_metrics``; a missing attempt is 0.
    What :func:`wide_steps` pivots, and what decides which attempt is the latest."""
    df = steps.to_pandas() if isinstance(steps, pa.Table) else steps.copy()
    codes, uniques = pd.factorize(df["key"])  # a row without a key: code -1, which names the None after them
    keys = [str(k) for k in uniques]
    value = df["value"].astype(float).to_numpy()
    said = read_rows([*keys, None], value, codes)
    df, codes, value = df[said], codes[said], value[said]
    if df.empty:
        return df
    # one spelling per metric whatever verl version wrote it (timing/gen -> timing_s/gen, ...),
    # resolved once per distinct key: a long run logs the same few hundred keys every step
    resolved = [canonical_metric(k, 1.0) for k in keys]
    names = pa.array([name for name, _ in resolved], pa.large_string())
    factors = np.array([factor for _, factor in resolved], dtype=float)
    df = df.assign(
        attempt=df["attempt"].fillna(0) if "attempt" in df else 0,
        time=df["time"].fillna(-math.inf) if "time" in df else 0.0,
        # taken in Arrow: pandas builds a text column from an array of Python strings value by value
        key=names.take(pa.array(codes)).to_pandas().set_axis(df.index),
        value=value * factors[codes],
    )
    share = df["key"].isin(SHARE_KEYS).to_numpy()
    if not share.any():
        return df
    value = df["value"].to_numpy(dtype=float)
    return df.assign(value=np.where(share, np.clip(value, 0.0, 1.0), value))  # within rounding of [0, 1]


def out_of_range_shares(steps: pa.Table | pd.DataFrame) -> dict[str, tuple[tuple[int, float], ...]]:
    """Per share of time (canonical key of ``SHARE_KEYS``), the steps whose latest record of it
    logged no value in [0, 1] (up to ``SHARE_SLACK``; inf and NaN neither), each with the last
    value it logged (a number rather than NaN where it logged both), by step.
    :func:`usable_step_rows` reads them as not logged: these are the values the reports must say
    they set aside (an idle ratio of 1.1 would leave the rollout pool negative busy time)."""
    return out_of_range_of(share_readings(steps))


def share_readings(steps: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Of the long ``steps`` table's shares of time, per ``step``, canonical ``key`` and ``attempt``:
    whether any value logged was in [0, 1] (``ok``), and the last ``value`` logged (NaN only where
    all were). The live dashboard keeps these for its window, not the rows."""
    empty = pd.DataFrame({"step": [], "key": [], "attempt": [], "ok": [], "value": []})
    keys = steps.column("key") if isinstance(steps, pa.Table) else pa.array(steps["key"].astype(str))
    names = {k: canonical_metric(k, 1.0)[0] for k in pc.unique(keys).to_pylist() if k is not None}
    raw = [k for k, name in names.items() if name in SHARE_KEYS]
    if not raw:
        return empty
    text = keys.type.value_type if pa.types.is_dictionary(keys.type) else keys.type
    chosen = pc.is_in(keys.cast(text), value_set=pa.array(raw, text)).to_numpy(zero_copy_only=False)
    df = steps.filter(chosen).to_pandas() if isinstance(steps, pa.Table) else steps[chosen]
    if df.empty:
        return empty
    value = df["value"].astype(float)
    df = pd.DataFrame(
        {
            "step": df["step"].astype("int64"),
            "key": df["key"].astype(str).map(names),
            "attempt": df["attempt"].fillna(0) if "attempt" in df else 0,
            "ok": in_share_range(value),
            "value": value,
        }
    )
    return readings_of(df)


def readings_of(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of :func:`share_readings` (or their raw rows, in the order logged) grouped again per
    step, key and attempt: a reader that gets a step's rows in parts adds each part this way."""
    by = rows.groupby(["step", "key", "attempt"], sort=False)
    return by.agg(ok=("ok", "any"), value=("value", "last")).reset_index()


def out_of_range_of(readings: pd.DataFrame) -> dict[str, tuple[tuple[int, float], ...]]:
    """:func:`out_of_range_shares` of rows of :func:`share_readings`: a share's latest attempt decides."""
    if readings.empty:
        return {}
    latest = readings[readings["attempt"] == readings.groupby(["step", "key"])["attempt"].transform("max")]
    bad = latest[~latest["ok"].astype(bool)].sort_values("step", kind="stable")
    return {
        key: tuple((int(s), float(v)) for s, v in zip(rows["step"], rows["value"], strict=True))
        for key, rows in bad.groupby("key")
    }


def unfinite_timers(steps: pa.Table | pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """Per stage or step timer (canonical key), the steps whose latest record of it logged no
    finite number (inf or NaN; verl's file logger writes both as null). :func:`usable_step_rows`
    drops such values as saying nothing: these are the steps where that left a timer out, which
    the anatomy and the report must not take for steps that never timed it."""
    if isinstance(steps, pa.Table) and _all_finite(steps.column("value")):
        return {}  # the usual run: no value at all is inf or NaN, so no timer's is (grouping them costs 25 ms)
    return unfinite_of(timer_finiteness(steps))


def _all_finite(values: pa.ChunkedArray) -> bool:
    """Whether every value of a column of numbers is set and finite (a null reads as NaN; False for
    any other type)."""
    if not pa.types.is_floating(values.type):
        return False
    return bool(all(np.isfinite(chunk.to_numpy(zero_copy_only=False)).all() for chunk in values.chunks))


def timer_finiteness(steps: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Of the long ``steps`` table's timers, per ``step``, canonical ``key`` and ``attempt``:
    whether any value logged was ``finite`` (the live dashboard keeps these, not the rows)."""
    df = steps.to_pandas() if isinstance(steps, pa.Table) else steps
    # judged once per distinct key (the name: of the key alone), not per row
    codes, keys = pd.factorize(df["key"].astype(str))
    names = [canonical_metric(k, 1.0)[0] if "timing" in k else "" for k in keys]
    # a row without a key (code -1) takes the last entry, which is no timer
    timer = np.array([name.startswith("timing_s/") for name in names] + [False], dtype=bool)[codes]
    df, codes = df[timer], codes[timer]
    if df.empty:
        return pd.DataFrame({"step": [], "key": [], "attempt": [], "finite": []})
    df = df.assign(
        key=pa.array(names, pa.large_string()).take(pa.array(codes)).to_pandas().set_axis(df.index),
        attempt=df["attempt"].fillna(0) if "attempt" in df else 0,
        finite=np.isfinite(df["value"].astype(float)),
    )
    return df.groupby(["step", "key", "attempt"], as_index=False)["finite"].any()


def unfinite_of(finiteness: pd.DataFrame) -> dict[str, tuple[int, ...]]:
    """:func:`unfinite_timers` of rows of :func:`timer_finiteness`: a timer's latest attempt decides."""
    if finiteness.empty:
        return {}
    by = finiteness.groupby(["step", "key"])["attempt"].transform("max")
    latest = finiteness[finiteness["attempt"] == by]
    bad = latest.groupby(["step", "key"])["finite"].any()
    bad = bad[~bad].reset_index()
    return {key: tuple(sorted(int(s) for s in rows["step"])) for key, rows in bad.groupby("key")}


def wide_steps(steps: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Pivot the long ``steps`` table (its :func:`usable_step_rows`) to one row per step and one
    float column per key, of the rows :func:`placed_step_rows` keeps: a resumed run's records
    placed by whether they train."""
    return pivot_placed(placed_step_rows(usable_step_rows(steps)))


def pivot_placed(df: pd.DataFrame) -> pd.DataFrame:
    """Placed long rows (:func:`placed_step_rows`) as one row per step and one float column per key:
    the wide table of a whole run and of the live dashboard's window alike."""
    if df.empty:
        return pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    # what df.pivot gives, scattered into one array: pandas' pivot costs ~0.5 µs a row (0.3 s for a
    # long run of 300 keys a step), the scatter a tenth of that
    step_codes, steps = pd.factorize(df["step"], sort=True, use_na_sentinel=False)
    key_codes, keys = pd.factorize(df["key"], sort=True, use_na_sentinel=False)
    held = np.zeros((len(keys), len(steps)), dtype=bool)
    held[key_codes, step_codes] = True
    if held.sum() != len(df):
        raise ValueError("pivot_placed: duplicate rows of one step and key (placed_step_rows leaves one)")
    values = np.full((len(keys), len(steps)), np.nan)
    values[key_codes, step_codes] = df["value"].to_numpy(dtype=float)
    return pd.DataFrame(values.T, index=pd.Index(steps, name="step"), columns=pd.Index(keys), copy=False)


def training_attempts(usable: pd.DataFrame) -> pd.Series:
    """Each step's training attempt (index step): the highest attempt holding a metric of
    :func:`usable_step_rows` that makes a step (``makes_step``); a step none of whose records
    trains (a validation alone) is left out."""
    trains = _trains(usable)
    return usable["attempt"][trains].groupby(usable["step"][trains]).max()


def _trains(usable: pd.DataFrame) -> np.ndarray:
    """Which rows of :func:`usable_step_rows` train (``verl_metrics.training_rows``)."""
    codes, keys = pd.factorize(usable["key"])
    return training_rows(keys.tolist(), usable["value"].to_numpy(dtype=float), codes)


def training_records(usable: pd.DataFrame) -> pd.DataFrame:
    """Each (step, attempt) of :func:`usable_step_rows` that trains, with ``time``, when its first
    training row was logged (-inf when its rows carry no time): what :func:`job_first_steps` places."""
    if usable.empty:
        return pd.DataFrame({"step": pd.Series(dtype="int64"), "attempt": pd.Series(dtype="int64"), "time": []})
    rows = usable[_trains(usable)]
    return rows.groupby(["step", "attempt"], as_index=False)["time"].min()


def job_first_steps(
    records: pd.DataFrame, starts: Iterable[float], named: Iterable[tuple[int, int]] = ()
) -> frozenset[int]:
    """The first training step of each job of the run, from its start (``starts``: the ``jobs``
    table's times) and ``records`` (:func:`training_records`, all attempts), or as an importer
    ``named`` it, ``(step, attempt)`` (:func:`imported_job_firsts`: a log without times).

    A job's first training step is its record logged first at or after the job's start and
    before the next job's: after a resume from the checkpoint of step k, step k+1, under attempt
    0 if no job logged it before, or a higher one if the job redoes logged steps; a resume's
    validation of step k trains nothing and is none. It counts only while that record is still
    its step's training (:func:`training_attempts`): a later job that redid the step replaced it.
    Records without a time, or a run without job starts, give none but those ``named``: attempts
    alone do not tell which job logged a record (a resume that redoes nothing logs under attempt 0).
    """
    firsts = list(named)
    times = np.unique([t for t in starts if t is not None and math.isfinite(t)])
    placed = records[np.isfinite(records["time"].to_numpy(dtype=float))]
    if len(times) and not placed.empty:
        job = np.searchsorted(times, placed["time"].to_numpy(dtype=float), side="right") - 1
        placed = placed.assign(job=job)[job >= 0]  # before the first start: a job whose start was not logged
        first = placed.sort_values(["time", "step"], kind="stable").drop_duplicates("job")
        firsts += zip(first["step"], first["attempt"], strict=True)
    training = records.groupby("step")["attempt"].max()
    return frozenset(int(s) for s, a in firsts if s in training.index and training[s] == a)


def imported_job_firsts(meta: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The first training record, ``(step, attempt)``, of each job that an importer saw a restart
    begin where the log gave it no time to start the job at (``meta.json["importer"]
    ["job_first_steps"]``); entries that are no pair of whole numbers are left out
    (:func:`meta_problems` names them)."""
    record = meta.get("importer")
    pairs = record.get("job_first_steps") if isinstance(record, Mapping) else None
    if not isinstance(pairs, list):
        return []
    return [(pair[0], pair[1]) for pair in pairs if _step_attempt(pair)]


def _step_attempt(pair: Any) -> bool:
    """Whether ``pair`` (read from JSON) is a ``[step, attempt]`` of whole numbers."""
    return (
        isinstance(pair, list)
        and len(pair) == 2
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in pair)
    )


def pipeline_fills(
    records: pd.DataFrame,
    starts: Iterable[float],
    named: Iterable[tuple[int, int]] = (),
    first: int | None = None,
) -> frozenset[int]:
    """The steps that filled an async pipeline (``RunFrames.fills``): the run's first training
    record's step, whether or not the anatomy times it (its step timer may have been inf), and
    each job's (:func:`job_first_steps`); the other arguments as there. ``first``: the run's first
    training step where ``records`` hold only its latest ones (the exporter's), else theirs."""
    run_first = records["step"].nsmallest(1) if first is None else [first]
    return job_first_steps(records, starts, named) | frozenset(int(s) for s in run_first)


def placed_step_rows(usable: pd.DataFrame) -> pd.DataFrame:
    """Of :func:`usable_step_rows`, the one row per (step, key) that the step's wide row holds.

    A restarted run logs a step again under a higher ``attempt``; whether that record replaces
    the step's training is judged by whether it trains (``makes_step``), not by its keys' names:
    a resume validates the step it resumes from (verl's ``val_before_train``), alone or with its
    ``testing`` timer, and that repeats no training. So:

    - rows of attempts below the step's training attempt (:func:`training_attempts`) are
      dropped, its validation too: that training was redone, and timers of two trainings never mix;
    - validation metrics come whole from the highest attempt left that holds any;
    - every other key comes from the highest attempt left that holds it: a later record that
      trains nothing replaces the timers it took itself (``testing``) and leaves the training
      attempt's others (``save_checkpoint``); its step timer of zero timed nothing and is left out.

    Within an attempt the last value logged for a key wins. Records need not be told apart
    (an importer's rows carry no time), only attempts: every row above the training attempt
    belongs to a record that trains nothing. Run again over its own output plus new rows, it
    gives what it gives over all the rows (a zero step timer that a later training of its
    attempt would have outlived aside), even for a step whose training is read after a later
    attempt's validation of it: the live dashboard merges new rows so.
    """
    if usable.empty:
        return usable
    if not (usable["attempt"] > 0).any():  # a run that never restarted: one attempt, nothing to place
        return usable.sort_values(["step", "time"], kind="stable").drop_duplicates(["step", "key"], keep="last")
    df = usable.reset_index(drop=True)
    training = df["step"].map(training_attempts(df))  # NaN: the step trains in no attempt
    above = df["attempt"] > training
    df = df[~(df["attempt"] < training) & ~(above & (df["key"] == STEP_TIMER))]
    validation = df["key"].map({k: is_validation_key(k) for k in df["key"].unique()}).to_numpy(dtype=bool)
    latest = df["attempt"].where(validation).groupby(df["step"]).transform("max")
    df = df[~validation | (df["attempt"] == latest)]
    df = df.sort_values(["step", "attempt", "time"], kind="stable")
    return df.drop_duplicates(["step", "key"], keep="last")


def _get(meta: Mapping[str, Any], *paths: str) -> Any:
    """The first non-null value among dotted ``paths`` in nested ``meta``."""
    for path in paths:
        node: Any = meta
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


# the numeric meta.json fields the analyzers read (docs/run-directory.md), by spelling
_COUNT_FIELDS = (
    "gpu.count",
    "n_gpus",
    "batch_size",
    "train_batch_size",
    "config.batch_size",
    "group_size",
    "rollout_n",
    "config.group_size",
    "rollout_gpus",
    "topology.rollout_gpus",
    "train_gpus",
    "topology.train_gpus",
)
_AMOUNT_FIELDS = (
    "gpu.peak_bf16_flops",
    "gpu.peak_flops",
    "peak_bf16_flops",
    "peak_flops",
    "model.active_params",
    "model.params",
    "model.total_params",
    "active_params",
    "model.critic_params",
    "critic_params",
)
_MAX_COUNT = 1 << 31


def _finite(value: Any) -> float | None:
    """``value`` as a finite float if it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)  # an int past 1e308 overflows
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _valid(value: Any, *, count: bool) -> bool:
    """A positive finite number (a whole one below 2^31 for a count)."""
    number = _finite(value)
    if number is None or number <= 0:
        return False
    return not count or (number.is_integer() and number < _MAX_COUNT)


def _number(meta: Mapping[str, Any], *paths: str) -> Any:
    """The first valid value among ``paths`` (invalid ones are reported by :func:`meta_problems`)."""
    for path in paths:
        value = _get(meta, path)
        if value is not None and _valid(value, count=path in _COUNT_FIELDS):
            return int(value) if path in _COUNT_FIELDS else float(value)
    return None


# fields that must be JSON objects when present, and what they hold
_OBJECTS = {"gpu": '{"type": "H100", "count": 8}', "model": '{"name": "...", "active_params": 7e9}'}


def meta_problems(meta: Mapping[str, Any]) -> list[str]:
    """One line per field of ``meta`` the analyzers read but cannot use (they ignore it)."""
    out = []
    for key, example in _OBJECTS.items():
        if key in meta and meta[key] is not None and not isinstance(meta[key], Mapping):
            out.append(f"{key} is {meta[key]!r}, not an object like {example}")
    topology = meta.get("topology")
    if topology is not None and not isinstance(topology, (str, Mapping)):
        out.append(f'topology is {topology!r}, not a name such as "async" or an object')
    for path in _COUNT_FIELDS + _AMOUNT_FIELDS:
        value = _get(meta, path)
        count = path in _COUNT_FIELDS
        if value is not None and not _valid(value, count=count):
            out.append(f"{path} is {_shown(value)}, not a positive {'whole number' if count else 'number'}")
    kind = _get(meta, "topology.kind", "topology")
    if isinstance(kind, str) and not _known_topology(kind):
        out.append(f"topology is {_shown(kind)}, not colocated, separated, one_step_overlap or async")
    split = _get(meta, "split", "topology.split")
    if split is not None and _split(meta) == (None, None):
        out.append(
            f'split is {_shown(split)}, not rollout:train GPUs ("46:18", [46, 18] or {{"rollout": 46, "train": 18}})'
        )
    facts = RunFacts.from_meta(meta)
    n_r, n_t = facts.rollout_gpus, facts.train_gpus
    if facts.shares_gpus and n_r and n_t and facts.n_gpus and not n_r == n_t == facts.n_gpus:
        # colocate_async: both sides are all GPUs, taking turns
        out.append(
            f"split {n_r}:{n_t} of a colocate_async run, whose rollout and training share all {facts.n_gpus} GPUs"
        )
    elif (
        not facts.shares_gpus
        and facts.kind != "colocated"
        and n_r
        and n_t
        and facts.n_gpus
        and n_r + n_t != facts.n_gpus
    ):
        out.append(f"split {n_r}:{n_t} adds up to {n_r + n_t} GPUs, not the run's {facts.n_gpus}")
    threshold = meta.get("max_off_policy_threshold")
    if threshold is not None and off_policy_threshold(meta) is None:
        out.append(f"max_off_policy_threshold is {_shown(threshold)}, not a whole number of versions")
    importer = meta.get("importer")
    firsts = importer.get("job_first_steps") if isinstance(importer, Mapping) else None
    if firsts is not None and not (isinstance(firsts, list) and all(_step_attempt(pair) for pair in firsts)):
        out.append(f"importer.job_first_steps is {_shown(firsts)}, not a list of [step, attempt] pairs")
    return out


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def off_policy_threshold(meta: Mapping[str, Any]) -> int | None:
    """``max_off_policy_threshold``: how many versions stale a sample may be before it is dropped."""
    number = _finite(meta.get("max_off_policy_threshold"))
    return int(number) if number is not None and number.is_integer() and 0 <= number < _MAX_COUNT else None


def _split(meta: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(rollout GPUs, train GPUs) from ``split`` as "46:18", [46, 18] or a dict."""
    value = _get(meta, "split", "topology.split")
    if isinstance(value, str) and ":" in value:
        value = value.split(":")
    if isinstance(value, Mapping):
        value = (value.get("rollout"), value.get("train"))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        pair = []
        for v in value:
            if isinstance(v, str):
                try:
                    v = float(v)
                except ValueError:
                    return None, None
            pair.append(v)
        if all(_valid(v, count=True) for v in pair):
            return int(pair[0]), int(pair[1])
        return None, None
    return _number(meta, "rollout_gpus", "topology.rollout_gpus"), _number(meta, "train_gpus", "topology.train_gpus")


@dataclass(frozen=True)
class RunFacts:
    """What ``meta.json`` says about the hardware, the model and the topology (None if unsaid)."""

    n_gpus: int | None = None
    gpu_type: str | None = None
    peak_flops: float | None = None
    active_params: float | None = None
    critic_params: float | None = None
    topology: str = "colocated"
    rollout_gpus: int | None = None
    train_gpus: int | None = None
    sequences_per_step: int | None = None
    batch_size: int | None = None  # prompts a step
    group_size: int | None = None  # samples a prompt

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RunFacts:
        """Read the facts, accepting the spellings collectors write (see docs/run-directory.md)."""
        gpu_type = _get(meta, "gpu.type", "gpu_type")
        gpu_type = str(gpu_type) if gpu_type is not None else None
        peak = _number(meta, "gpu.peak_bf16_flops", "gpu.peak_flops", "peak_bf16_flops", "peak_flops")
        n_r, n_t = _split(meta)
        topology = _get(meta, "topology.kind", "topology")
        n_gpus = _number(meta, "gpu.count", "n_gpus")
        kind = topology_kind(topology) if isinstance(topology, str) else "colocated"
        batch = _number(meta, "batch_size", "train_batch_size", "config.batch_size")
        group = _number(meta, "group_size", "rollout_n", "config.group_size")
        if n_gpus is None and n_r and n_t:  # colocated (colocate_async too): both pools are all GPUs
            shared = kind == "colocated" or "coloc" in str(topology).lower()
            n_gpus = max(n_r, n_t) if shared else n_r + n_t
        return cls(
            n_gpus=int(n_gpus) if n_gpus else None,
            gpu_type=gpu_type,
            peak_flops=float(peak) if peak else peak_flops(gpu_type) if gpu_type else None,
            active_params=_number(meta, "model.active_params", "model.params", "model.total_params", "active_params"),
            critic_params=_number(meta, "model.critic_params", "critic_params"),
            topology=str(topology).lower() if isinstance(topology, str) else "colocated",
            rollout_gpus=int(n_r) if n_r else None,
            train_gpus=int(n_t) if n_t else None,
            sequences_per_step=int(batch * group) if batch and group else None,
            batch_size=batch,
            group_size=group,
        )

    @property
    def kind(self) -> str:
        """The topology as one of :data:`TOPOLOGIES`."""
        return topology_kind(self.topology)

    @property
    def is_pooled(self) -> bool:
        """Rollout and training run on separate GPU pools of known sizes that add up to all GPUs.

        (verl's ``colocate_async`` is async on shared GPUs: not pooled.)
        """
        n_r, n_t = self.rollout_gpus, self.train_gpus
        return self.kind != "colocated" and not self.shares_gpus and bool(n_r and n_t) and n_r + n_t == self.n_gpus

    @property
    def shares_gpus(self) -> bool:
        """An async run whose rollout and training take turns on the same GPUs (verl's
        ``colocate_async``): async in its samples, colocated in its GPU time."""
        return self.kind != "colocated" and "coloc" in self.topology

    @property
    def overlapped(self) -> bool:
        """Generation runs beside the trainer's step rather than inside it: not so on shared
        GPUs (verl's ``colocate_async`` wakes its engines while the step waits in ``gen`` and
        puts them to sleep before training, so ``gen`` times the rollout inside the step)."""
        return self.kind in ("one_step_overlap", "async_streaming") and not self.shares_gpus


class Trajectories:
    """The trajectory table as numpy columns, each read when an analyzer first asks for it.

    A run has millions of trajectory rows: a column nobody asks for (a fallback such as
    ``gen_s`` when ``response_tokens`` is logged) is never read, and nothing is converted to
    pandas. Built from a reader (over the segments listed when built, or those a prefetch of the
    reader's reads, so a segment landing meanwhile cannot misalign the columns), an Arrow table
    or a pandas frame. A column the
    source lacks reads as all missing, as a column of a run that never logged it does.

    A segment whose data does not read (the reader warns) loses only what it must: if its
    ``step`` column is unreadable its rows are left out of every column, else only the
    columns that do not read are missing for its rows.

    A step generated again by a restarted run keeps only its last ``attempt``'s rows (see
    :func:`last_attempt_rows`); the ``attempt`` column is read only where a segment's footer
    says it may hold one above 0, so a run that never restarted pays nothing for it.
    """

    def __init__(self, source: RunReader | pa.Table | pd.DataFrame | None = None):
        self._reader: RunReader | None = None
        self._frame: pa.Table | None = None
        self._cache: dict[tuple[str, Any], Any] = {}
        self._making: dict[tuple[str, Any], threading.Lock] = {}
        self._settle_lock = threading.Lock()
        self._settled = False  # the step column, read first, settles which segments count
        self._step: pa.ChunkedArray | None = None  # until read() takes it
        self._keep: pa.Array | None = None  # the rows of each step's last attempt; None: every row
        if isinstance(source, RunReader):
            self._reader = source
            self._segments = source.prefetched_segments("trajectories") or source.segments("trajectories")
            self._rows = -1  # until the step column is read
            self._names = frozenset(TABLES["trajectories"].names)
        else:
            if isinstance(source, pd.DataFrame):  # converted once, a column at a time (mixed types become text)
                source = pa.table({str(c): _from_pandas(source[c]) for c in source.columns})
            self._frame = pa.table({}) if source is None else source
            if "attempt" in self._frame.column_names and "step" in self._frame.column_names:
                self._frame = last_attempt_table(self._frame)
            self._rows = self._raw_rows = self._frame.num_rows
            self._names = frozenset(self._frame.column_names) if self._rows else frozenset()

    def __len__(self) -> int:
        self._settle()
        return self._rows

    @property
    def empty(self) -> bool:
        return len(self) == 0

    @property
    def columns(self) -> frozenset[str]:
        """The columns the source has (a run's: every column of the schema)."""
        return self._names

    def prefetch(self, names: Iterable[str]) -> None:
        """Start reading these columns from the run in the background (see
        :meth:`RunReader.prefetch`), so that their decoding overlaps the analyzers that need
        no trajectories; columns the table lacks are left out."""
        if self._reader is None:
            return
        wanted = [n for n in names if n in self._names]
        text = [n for n in wanted if _is_text(n)]
        self._reader.prefetch("trajectories", wanted, dictionary=text, segments=self._segments)

    def _settle(self) -> None:
        """Read the step column, leaving out the segments whose steps do not read."""
        if self._reader is None or self._settled:
            return
        with self._settle_lock:
            if not self._settled:
                self._step, left_out = self._read_segments("step", text=False)
                if left_out:
                    self._segments = [s for s in self._segments if s.path not in left_out]
                self._rows = self._raw_rows = sum(s.rows for s in self._segments)
                if any(s.attempts for s in self._segments):
                    self._keep_last_attempts()
                self._settled = True

    def _keep_last_attempts(self) -> None:
        """Settle which rows count when some segment holds a restarted run's attempts."""
        attempt, left_out = self._read_segments("attempt", text=False)
        if left_out:  # unreadable attempts: those rows count as attempt 0
            attempt = _with_gaps(attempt, self._segments, left_out)
        assert self._step is not None
        keep = last_attempt_rows(numbers(self._step), numbers(attempt))
        if keep is not None:
            self._keep = pa.array(keep)
            self._rows = int(keep.sum())

    def _read_segments(self, name: str, *, text: bool) -> tuple[pa.ChunkedArray, set[str]]:
        assert self._reader is not None
        try:
            table, left_out = self._reader.read_available(
                "trajectories", [name], dictionary=[name] if text else [], segments=self._segments
            )
        except FileNotFoundError as exc:
            raise RunDirError(
                f"a trajectories segment went away while it was being read (compacted meanwhile?): {exc}; run again"
            ) from None
        return table.column(0), left_out

    def _read(self, name: str, *, text: bool) -> pa.ChunkedArray:
        self._settle()
        if name == "step":
            column, self._step = self._step, None
            if column is None:  # read before, and let go: read again
                column, _ = self._read_segments(name, text=text)
        else:
            column, left_out = self._read_segments(name, text=text)
            if left_out:  # the segment's steps read, this column's data did not: missing for its rows
                column = _with_gaps(column, self._segments, left_out)
        return column  # numbers() joins a column's chunks, labels() unifies their dictionaries

    def _arrow(self, name: str, *, text: bool = False) -> pa.ChunkedArray | None:
        """The column as Arrow (text dictionary-encoded), or None when the source lacks it."""
        if name not in self._names:
            return None
        if self._reader is not None:
            column = self._read(name, text=text)
        else:
            assert self._frame is not None
            column = self._frame.column(name)
        self._settle()
        if len(column) != self._raw_rows:
            raise RunDirError(
                f"trajectories column {name!r} has {len(column)} rows, expected {self._raw_rows} (a segment read "
                "differently from one column to the next: see the warnings above; run again, or move it out)"
            )
        return column if self._keep is None else column.filter(self._keep)

    def _cached(self, kind: str, name: str, arg: Any, make: Callable[[], Any]) -> Any:
        """``make()``'s value, made once: analyzers on two threads that ask for it at once wait
        for one another rather than both making it."""
        key = (kind + ":" + name, arg)
        if key not in self._cache:
            with self._making.setdefault(key, threading.Lock()):
                if key not in self._cache:
                    self._cache[key] = make()
        return self._cache[key]

    def numbers(self, name: str) -> np.ndarray:
        """A numeric column: ints (and bools) stay as they are when none is missing, else float with NaN."""

        def make() -> np.ndarray:
            joined = self._pieces(name).joined()  # read once, whichever is asked for first
            self._cache[("pieces:" + name, None)] = Pieces([joined])  # one copy held: the chunks go
            return joined

        return self._cached("numbers", name, None, make)

    def in_step_order(self, name: str) -> np.ndarray | Pieces:
        """``step_groups().take(numbers(name))``, for slices of rows (a chunk of steps at a time).
        Where the rows already are in step order, as they are written, the column's chunks as read
        (:class:`Pieces`), never joined: joining an 8.2M-row column costs 35 ms (a page fault per
        4 kB of the new array)."""
        g = self.step_groups()
        return g.take(self.numbers(name)) if g.order is not None else self._pieces(name)

    def _pieces(self, name: str) -> Pieces:
        """A numeric column's chunks as read, typed as :meth:`numbers` types them (one piece once
        it was joined)."""
        return self._cached("pieces", name, None, lambda: Pieces(number_chunks(self._arrow(name), len(self))))

    def flags(self, name: str) -> np.ndarray:
        """A boolean column; a missing value is False."""

        def make() -> np.ndarray:
            column = self._arrow(name)
            if column is None or pa.types.is_null(column.type):
                return np.zeros(len(self), dtype=bool)
            return pc.fill_null(column.cast(pa.bool_()), False).to_numpy()

        return self._cached("flags", name, None, make)

    def has(self, name: str) -> bool:
        """Whether the column holds at least one value."""
        if self.empty or name not in self._names:
            return False
        key = ("has", name)
        if key not in self._cache:
            if self._text(name):
                # read once for both; a code of 0 or more is a value (the rows are not empty)
                self._cache[key] = bool(self.labels(name, ordered=False)[0].max() >= 0)
            else:  # a NaN is as missing as a null, whatever the source; the chunks are not joined for this
                self._cache[key] = any(
                    a.size and not (a.dtype.kind == "f" and np.isnan(a).all()) for a in self._pieces(name).arrays
                )
        return self._cache[key]

    def _text(self, name: str) -> bool:
        if self._reader is not None:
            return _is_text(name)
        column = self._arrow(name)
        kind = pa.null() if column is None else column.type
        return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)

    def clock_times(self) -> dict[str, tuple[tuple[int, float], ...]]:
        """Per trajectory time column (``TRAJECTORY_TIMES``), the steps where it holds a clock's time
        (``CLOCK_TIME_S`` or more: ``time.time()``, not seconds since the step's rollout began), each
        with its first such value, by step; columns without one are left out. Read from a run, a
        column is read only where a segment's footer says it may hold one (one pass over it then)."""
        return self._cached("clock", "times", None, self._find_clock_times)

    def _find_clock_times(self) -> dict[str, tuple[tuple[int, float], ...]]:
        found = {}
        for name in TRAJECTORY_TIMES:
            if self._reader is not None:
                self._settle()
                if not any(name in s.clock_times for s in self._segments):
                    continue
            values = self.numbers(name).astype(float, copy=False)
            if not np.fmax.reduce(values, initial=-np.inf) >= CLOCK_TIME_S:  # NaN is no clock's time
                continue  # a column without one costs this pass alone
            rows = np.flatnonzero((values >= CLOCK_TIME_S) & (values < np.inf))  # an infinite time is none
            if not rows.size:
                continue
            steps, first = np.unique(self.numbers("step")[rows], return_index=True)
            found[name] = tuple((int(s), float(v)) for s, v in zip(steps, values[rows[first]], strict=True))
        return found

    def step_groups(self, rows: np.ndarray | slice = slice(None)) -> Groups:
        """The rows ``rows`` selects grouped by step; the grouping of all rows is shared."""
        if isinstance(rows, slice) and rows == slice(None):
            return self._cached("groups", "step", None, lambda: group_pieces(self._pieces("step")))
        return group_rows(self.numbers("step")[rows])

    def labels(self, name: str, missing: str | None = None, *, ordered: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, names)`` of a text column, as :func:`labels` gives them."""
        codes = self._cached("labels", name, None, lambda: _codes(self._arrow(name, text=True), len(self)))
        if missing is None and not ordered:
            return codes
        return self._cached("labels", name, (missing, ordered), lambda: _recode(*codes, missing, ordered))

    def labels_at(self, name: str, rows: np.ndarray, missing: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``labels(name, missing, ordered=False)`` of the rows at indices ``rows`` alone: codes for
        a few rows (the errors among millions) cost no pass over the whole column; no rows, not
        even its read (a run without reward errors never reads their codes)."""
        column = self._arrow(name, text=True) if len(rows) else None
        if column is None:
            return _recode(*_codes(None, len(rows)), missing, False)
        # taken from each chunk in turn: Arrow's take over a chunked column first joins all its
        # rows. Every chunk gives its part, empty or not, so the dictionaries unify as the whole
        # column's would.
        order = np.argsort(rows, kind="stable")
        ends = np.cumsum([len(chunk) for chunk in column.chunks], dtype=np.int64)
        bounds = np.searchsorted(rows[order], ends)
        parts = [
            chunk.take(pa.array(rows[order[a:b]] - (end - len(chunk)), type=pa.int64())) if b > a else chunk.slice(0, 0)
            for chunk, a, b, end in zip(column.chunks, np.r_[0, bounds[:-1]], bounds, ends, strict=True)
        ]
        raw, names = _codes(pa.chunked_array(parts, column.type), len(rows))
        codes = np.empty_like(raw)
        codes[order] = raw  # back in the order of ``rows``
        return _recode(codes, names, missing, False)


def last_attempt_rows(steps: np.ndarray, attempts: np.ndarray) -> np.ndarray | None:
    """Which rows belong to their step's last attempt (a missing attempt is 0), or None when
    every row does: a restarted run generates a step again, and its crashed attempt's rows
    must not be counted beside the redone ones. Only the steps with an attempt above 0 are
    looked at, so a run that never restarted costs one pass over ``attempts``."""
    attempts = np.nan_to_num(np.asarray(attempts, dtype=float), nan=0.0) if attempts.dtype.kind == "f" else attempts
    again = attempts > 0
    if not again.any():
        return None
    steps = np.asarray(steps)
    redone, inverse = np.unique(steps[again], return_inverse=True)
    last = np.zeros(redone.size, dtype=attempts.dtype)
    np.maximum.at(last, inverse, attempts[again])
    position = np.clip(np.searchsorted(redone, steps), 0, redone.size - 1)  # ``again`` holds some row
    in_redone = redone[position] == steps
    keep = ~in_redone | (attempts == last[position])
    return None if keep.all() else keep


def last_attempt_table(table: pa.Table) -> pa.Table:
    """``table`` (with ``step`` and ``attempt`` columns) of each step's last attempt."""
    keep = last_attempt_rows(numbers(table.column("step")), numbers(table.column("attempt")))
    return table if keep is None else table.filter(pa.array(keep))


def _with_gaps(column: pa.ChunkedArray, segments: list[SegmentInfo], left_out: set[str]) -> pa.ChunkedArray:
    """``column``, read from the ``segments`` not ``left_out`` in order, with nulls for the rows
    of those left out, so that it lines up with the other columns."""
    parts, offset = [], 0
    for seg in segments:
        if seg.path in left_out:
            parts.append(pa.nulls(seg.rows, column.type))
        else:
            parts.extend(column.slice(offset, seg.rows).chunks)
            offset += seg.rows
    return pa.chunked_array(parts, type=column.type)


def _from_pandas(values: pd.Series) -> pa.ChunkedArray:
    """A pandas column as Arrow; one of mixed types (text and numbers) becomes text."""
    try:
        array = pa.array(values, from_pandas=True)
    except pa.ArrowException:
        array = pa.array(values.astype("string"), from_pandas=True)
    if isinstance(array, pa.ChunkedArray):  # an Arrow-backed column (pandas' str): its chunks joined,
        # never wrapped whole in pa.chunked_array, which would rebuild it value by value in Python
        return pa.chunked_array([array.combine_chunks()], type=array.type)
    return pa.chunked_array([array])


def _is_text(name: str) -> bool:
    """Whether a trajectory column holds text (read dictionary-encoded, as labels)."""
    return pa.types.is_string(TABLES["trajectories"].field(name).type)


def numbers(column: pa.ChunkedArray | pa.Array | None, rows: int = 0) -> np.ndarray:
    """A numeric Arrow column as numpy: ints (and bools) as they are when none is missing, else
    float with NaN; ``None`` stands for ``rows`` missing values."""
    column = _numeric(column, rows)
    if column is None:
        return np.full(rows, np.nan)
    # one Arrow buffer viewed by numpy: ChunkedArray.to_numpy() would copy it a chunk at a time
    array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return array.to_numpy(zero_copy_only=False)


def number_chunks(column: pa.ChunkedArray | pa.Array | None, rows: int = 0) -> list[np.ndarray]:
    """:func:`numbers` of each chunk of ``column`` (all typed alike), not joined."""
    column = _numeric(column, rows)
    if column is None:
        return [np.full(rows, np.nan)]
    # a column of no chunks (no rows) still gives its type
    return [chunk.to_numpy(zero_copy_only=False) for chunk in column.chunks or [pa.array([], column.type)]]


def _numeric(column: pa.ChunkedArray | pa.Array | None, rows: int) -> pa.ChunkedArray | None:
    """``column`` chunked, as float64 where it is not numeric or has a gap (NaN then); None for
    a column of nothing but missing values."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    if column is None or pa.types.is_null(column.type):
        return None
    numeric = pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_boolean(column.type)
    if not numeric or column.null_count:
        column = column.cast(pa.float64())  # a gap becomes NaN
    return column


class Pieces:
    """A column as consecutive numpy arrays (the chunks it was read in), sliced by rows as one:
    ``pieces[a:b]`` is a view where the rows lie in one chunk, joined only where they span
    several. What a loop over a chunk of steps at a time needs, without the whole column
    joined first."""

    def __init__(self, arrays: list[np.ndarray]):
        self._arrays = [a for a in arrays if a.size] or arrays[:1]
        self._ends = np.cumsum([a.size for a in self._arrays], dtype=np.int64)
        self._starts = self._ends - [a.size for a in self._arrays]
        self.dtype = self._arrays[0].dtype if self._arrays else np.dtype(float)

    @property
    def arrays(self) -> tuple[np.ndarray, ...]:
        """The chunks, in row order (none empty, but for a column of no rows)."""
        return tuple(self._arrays)

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, rows: slice) -> np.ndarray:
        start, stop, stride = rows.indices(len(self))
        if stride != 1:
            raise ValueError("Pieces take slices of consecutive rows")
        if stop <= start:
            return np.empty(0, self.dtype)
        first, last = np.searchsorted(self._ends, [start, stop - 1], side="right")
        if first == last:
            at = self._starts[first]
            return self._arrays[first][start - at : stop - at]
        head = self._arrays[first][start - self._starts[first] :]
        tail = self._arrays[last][: stop - self._starts[last]]
        return np.concatenate([head, *self._arrays[first + 1 : last], tail])

    def joined(self) -> np.ndarray:
        """The whole column as one array (joined by Arrow, as :func:`numbers` joins a column)."""
        if len(self._arrays) == 1:
            return self._arrays[0]
        return numbers(pa.chunked_array([pa.array(a) for a in self._arrays]) if self._arrays else None)


def labels(
    column: pa.ChunkedArray | pa.Array | None, missing: str | None = None, rows: int = 0, ordered: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, names)`` of an Arrow text column (plain or dictionary-encoded): ``codes``
    index ``names`` per row; a missing value is -1, or the code of ``missing`` if given.
    ``None`` stands for ``rows`` missing values.

    Dictionary chunks are unified and their indices used as codes, so millions of rows cost
    no string comparisons. ``names`` are sorted as pandas' groupby sorts them, unless not
    ``ordered``: then they keep the dictionary's order, which spares re-coding every row
    when the caller sorts its few aggregated cells instead.
    """
    return _recode(*_codes(column, rows), missing, ordered)


def _codes(column: pa.ChunkedArray | pa.Array | None, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Codes in the dictionary's order (-1: missing) and the dictionary's values."""
    if isinstance(column, pa.Array):
        column = pa.chunked_array([column])
    if column is None or pa.types.is_null(column.type):
        rows = rows if column is None else len(column)
        return np.full(rows, -1, dtype=np.int32), np.array([], dtype=object)
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column.cast(pa.string()))
    column = column.unify_dictionaries()
    chunks = column.chunks
    names = (chunks[0].dictionary if chunks else pa.array([], pa.string())).to_numpy(zero_copy_only=False)
    indices = [c.indices.cast(pa.int32()) for c in chunks]
    raw = np.concatenate(
        [(pc.fill_null(i, -1) if i.null_count else i).to_numpy() for i in indices] or [np.zeros(0, np.int32)]
    )
    return raw, names.astype(object)


def _recode(raw: np.ndarray, names: np.ndarray, missing: str | None, ordered: bool) -> tuple[np.ndarray, np.ndarray]:
    """Missing values given the code of ``missing``; then, if ``ordered``, names sorted."""
    if missing is not None and raw.size and raw.min() < 0:
        names = np.append(names, missing) if missing not in set(names) else names
        raw = np.where(raw < 0, list(names).index(missing), raw)
    return _sorted_codes(raw, names) if ordered else (raw, names)


def _sorted_codes(raw: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes and names re-coded so ``names`` are sorted (as pandas' groupby sorts them)."""
    order = np.argsort(names, kind="stable")
    if np.array_equal(order, np.arange(names.size)):
        return raw, names
    rank = np.append(np.empty(names.size, dtype=np.int32), np.int32(-1))  # code -1 stays -1
    rank[order] = np.arange(names.size)
    return _looked_up(rank, raw), names[order]


def _looked_up(table: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``table[codes]``, a chunk of codes at a time cast to numpy's index type: indexing by int32
    codes casts them element by element, several times slower than the cast and indexing apart."""
    out = np.empty(codes.shape, dtype=table.dtype)
    for start in range(0, codes.size, CHUNK_ROWS):
        part = slice(start, start + CHUNK_ROWS)
        out[part] = table[codes[part].astype(np.intp)]
    return out


@dataclass
class RunFrames:
    """A run for the analyzers: wide ``steps`` (pandas, index step), ``trajectories`` and ``meta``.

    ``trajectories`` may be given as a pandas frame or an Arrow table; it is kept as
    :class:`Trajectories`. Read from a run directory, its columns are read on first use.
    """

    steps: pd.DataFrame
    trajectories: Trajectories | pd.DataFrame | pa.Table = field(default_factory=Trajectories)
    meta: dict[str, Any] = field(default_factory=dict)
    reader: RunReader | None = None  # for analyzers that read other tables (gpu, spans, logprob)
    unfinite: dict[str, tuple[int, ...]] = field(default_factory=dict)  # see unfinite_timers
    out_of_range: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)  # see out_of_range_shares
    # the steps that filled an async pipeline: the run's first training step and each job's
    # (pipeline_fills); None: the frames' own first step alone, for frames of the whole run
    fills: frozenset[int] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.trajectories, Trajectories):
            self.trajectories = Trajectories(self.trajectories)

    @property
    def facts(self) -> RunFacts:
        return RunFacts.from_meta(self.meta)

    @classmethod
    def from_reader(cls, reader: RunReader) -> RunFrames:
        table = reader.read("steps", ["step", "attempt", "time", "key", "value"])
        usable = usable_step_rows(table)
        starts = reader.read("jobs", ["time"]).column("time").to_pylist()
        wide = pivot_placed(placed_step_rows(usable))
        fills = pipeline_fills(training_records(usable), starts, imported_job_firsts(reader.meta))
        unfinite = unfinite_timers(table)
        return cls(wide, Trajectories(reader), dict(reader.meta), reader, unfinite, out_of_range_shares(table), fills)


def load(run: RunReader | RunFrames | str | os.PathLike[str]) -> RunFrames:
    """The run's frames, read once from a reader or path, or passed through."""
    if isinstance(run, RunFrames):
        return run
    if not isinstance(run, RunReader):
        run = RunReader(run)
    return RunFrames.from_reader(run)


@dataclass(frozen=True)
class Groups:
    """Rows grouped by an integer key: ``take(column)`` puts a column in key order, and the
    rows of ``keys[i]`` are then ``starts[i]:ends[i]``."""

    keys: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    order: np.ndarray | None  # None: the rows were already in key order

    def take(self, column: np.ndarray) -> np.ndarray:
        return column if self.order is None else column[self.order]

    @property
    def sizes(self) -> np.ndarray:
        return self.ends - self.starts

    def part(self, which: slice) -> Groups:
        """The groups ``which`` selects (as :func:`chunks` hands them out) over their own rows
        in key order, numbered from the first."""
        first = self.starts[which][:1]
        return Groups(self.keys[which], self.starts[which] - first, self.ends[which] - first, None)

    @functools.cached_property
    def ids(self) -> np.ndarray:
        """Per row in key order, the index of its group."""
        return segment_ids(self.sizes)


def segment_ids(sizes: np.ndarray) -> np.ndarray:
    """Per row of groups of ``sizes`` rows laid end to end, the index of its group."""
    sizes = np.asarray(sizes, dtype=np.intp)
    return np.repeat(np.arange(sizes.size, dtype=np.intp), sizes)


def group_rows(keys: np.ndarray) -> Groups:
    """Group rows by ``keys`` (ascending, stable within a key) without pandas' groupby.

    Trajectories arrive in step order, so the usual cost is one pass that checks it.
    """
    keys = np.asarray(keys)
    order = None
    if keys.size > 1 and not np.all(keys[1:] >= keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
    starts = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    starts = np.r_[np.zeros(min(keys.size, 1), dtype=starts.dtype), starts]
    ends = np.r_[starts[1:], keys.size].astype(np.int64) if keys.size else starts.copy()
    return Groups(keys[starts], starts, ends, order)


def group_pieces(keys: Pieces) -> Groups:
    """``group_rows(keys.joined())`` without joining them where the rows are in key order across
    the chunks, as a run writes them: each chunk is grouped alone, and a group running on into
    the next chunk continues there."""
    arrays = keys.arrays
    in_order = all(a.size < 2 or bool(np.all(a[1:] >= a[:-1])) for a in arrays)
    # not (b >= a), where b < a would let a NaN through
    if len(arrays) < 2 or not in_order or any(not b[0] >= a[-1] for a, b in itertools.pairwise(arrays)):
        return group_rows(keys.joined())
    starts, firsts, offset = [], [], 0
    for i, a in enumerate(arrays):
        local = np.flatnonzero(a[1:] != a[:-1]) + 1
        if i == 0 or a[0] != arrays[i - 1][-1]:  # a new group at the chunk's first row
            local = np.r_[0, local]
        firsts.append(a[local])
        starts.append(local + offset)
        offset += a.size
    at = np.concatenate(starts)
    return Groups(np.concatenate(firsts), at, np.r_[at[1:], offset].astype(np.int64), None)


def chunks(groups: Groups, rows: int | None = None) -> Iterator[tuple[slice, slice, np.ndarray]]:
    """Whole groups, about ``rows`` rows at a time: their slice of the groups, their rows' slice
    in key order, and each of those rows' group index within the chunk.

    Row-wise work done a chunk at a time keeps its temporaries small enough to stay in cache
    and be reused, where whole-table arrays of millions of rows are allocated afresh each time.
    """
    rows = rows or CHUNK_ROWS
    i, n = 0, groups.keys.size
    while i < n:
        j = max(i + 1, int(np.searchsorted(groups.starts, groups.starts[i] + rows, side="left")))
        j = min(j, n)
        yield slice(i, j), slice(int(groups.starts[i]), int(groups.ends[j - 1])), segment_ids(groups.sizes[i:j])
        i = j


def group_counts(
    groups: Groups, codes: np.ndarray, n_codes: int, weights: np.ndarray | Pieces | None = None
) -> np.ndarray:
    """(groups x ``n_codes``) table: per group, the rows of each code (or their summed ``weights``).

    ``codes`` (0 <= code < ``n_codes``) and ``weights`` are in the rows' original order (weights
    as :class:`Pieces` only where that is key order).
    Groups of many rows are counted one at a time: small arrays that stay in cache, where
    one bincount over all rows would first build a row-sized array of cell numbers.
    """
    codes = groups.take(codes)
    weights = None if weights is None else groups.take(weights)
    n = groups.keys.size
    if n == 0:
        return np.zeros((0, n_codes), dtype=float if weights is not None else np.int64)
    if codes.size < _ROWS_PER_GROUP_LOOPED * n:
        cell = groups.ids * n_codes
        cell += codes
        whole = None if weights is None else weights[:]
        return np.bincount(cell, weights=whole, minlength=n * n_codes).reshape(n, n_codes)
    out = np.empty((n, n_codes), dtype=float if weights is not None else np.int64)
    for i, (a, b) in enumerate(zip(groups.starts.tolist(), groups.ends.tolist(), strict=True)):
        out[i] = np.bincount(codes[a:b], None if weights is None else weights[a:b], minlength=n_codes)
    return out


def kept(mask: np.ndarray) -> np.ndarray | slice:
    """``mask`` as an index; ``slice(None)`` when it keeps every row, which indexes without a copy."""
    return slice(None) if mask.all() else mask


def quarter(n: int) -> int:
    """How many of ``n`` rows :func:`recent` and :func:`early` take."""
    return max(1, math.ceil(n * RECENT_FRACTION))


def recent(frame: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """The last quarter of the rows (at least one): the run as it is now."""
    return frame.iloc[len(frame) - quarter(len(frame)) :]


def early(frame: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """The first quarter of the rows (at least one, as many as :func:`recent`): the run as it started."""
    return frame.iloc[: quarter(len(frame))]


@dataclass(frozen=True)
class Trend:
    """How a per-step quantity moved: first vs last quarter of steps and the fitted slope."""

    first: float
    last: float
    slope_per_step: float

    @property
    def change(self) -> float:
        return self.last - self.first


def steps_text(steps: Sequence[int]) -> str:
    """Steps as runs of consecutive numbers, as every message names them: "step 4", "steps 3, 5-7"."""
    runs: list[list[int]] = []
    for step in sorted(steps):
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)
    return f"step {text}" if len(steps) == 1 else f"steps {text}"


def trend(series: pd.Series) -> Trend:
    """Means of the first and last quarter of ``series`` (index = step) and its least-squares slope."""
    s = series.dropna()
    if s.empty:
        return Trend(math.nan, math.nan, math.nan)
    return Trend(
        float(early(s).mean()), float(recent(s).mean()), slope(s.index.to_numpy(dtype=float), s.to_numpy(dtype=float))
    )


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """The least-squares slope of ``y`` over ``x`` (no NaN in either); NaN with fewer than two
    distinct ``x``."""
    return float(np.polyfit(x, y, 1)[0]) if len(x) >= 2 and np.ptp(x) > 0 else math.nan
