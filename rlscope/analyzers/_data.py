"""Shared inputs of the analyzers: a run's tables as pandas frames, its facts, and trends.

``load(run)`` accepts a ``RunReader``, a run-directory path or ready ``RunFrames`` (tests
and the facade pass frames so a run is read once). The long ``steps`` table becomes one
wide row per step; only the trajectory columns the analyzers use are read, their text
columns as categoricals. A run has millions of trajectory rows, so the analyzers walk them
with :func:`group_rows` and :func:`labels` (numpy) rather than pandas groupby.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from rlscope.advice.thresholds import RECENT_FRACTION
from rlscope.analyzers.gpus import peak_flops
from rlscope.collectors.verl_metrics import canonical_metric
from rlscope.trace.reader import RunReader

__all__ = [
    "REWARD_COLUMNS",
    "TOPOLOGIES",
    "TRAJECTORY_COLUMNS",
    "Groups",
    "RunFacts",
    "RunFrames",
    "Trend",
    "cells",
    "group_rows",
    "kept",
    "labels",
    "load",
    "numbers",
    "recent",
    "topology_kind",
    "trend",
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

# read with the trajectory columns when the frames come from a reader, for the rewards analyzer
REWARD_COLUMNS = ("data_source", "reward", "reward_status", "reward_error")

# text columns that repeat a few values over millions of rows: read dictionary-encoded
_TEXT_COLUMNS = ("engine", "data_source", "reward_status", "reward_error")

# the topologies the analyzers model, in meta.json's wording normalised by topology_kind()
TOPOLOGIES = ("colocated", "separated_sync", "one_step_overlap", "async_streaming")


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


def wide_steps(steps: pa.Table | pd.DataFrame) -> pd.DataFrame:
    """Pivot the long ``steps`` table to one row per step and one float column per key.

    A step logged again by a restarted run (higher ``attempt``) replaces the earlier attempt
    as a whole, so timings of two attempts are never mixed; within an attempt the last value
    logged for a key wins. Text values are dropped. Keys (and values whose unit changed with
    the name) are canonicalised by ``rlscope.collectors.verl_metrics``.
    """
    df = steps.to_pandas() if isinstance(steps, pa.Table) else steps.copy()
    df = df[df["value"].notna()]
    if df.empty:
        return pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
    # one spelling per metric whatever verl version wrote it (timing/gen -> timing_s/gen, ...)
    renamed = [canonical_metric(k, v) for k, v in zip(df["key"].astype(str), df["value"], strict=True)]
    df = df.assign(
        attempt=df["attempt"].fillna(0) if "attempt" in df else 0,
        time=df["time"].fillna(-math.inf) if "time" in df else 0.0,
        key=[k for k, _ in renamed],
        value=[v for _, v in renamed],
    )
    latest = df.groupby("step")["attempt"].transform("max")
    df = df[df["attempt"] == latest].sort_values(["step", "time"], kind="stable")
    df = df.drop_duplicates(["step", "key"], keep="last")
    wide = df.pivot(index="step", columns="key", values="value").astype(float)
    wide.columns.name = None
    return wide.sort_index()


def _get(meta: Mapping[str, Any], *paths: str) -> Any:
    """The first non-null value among dotted ``paths`` in nested ``meta``."""
    for path in paths:
        node: Any = meta
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def _split(meta: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(rollout GPUs, train GPUs) from ``split`` as "46:18", [46, 18] or a dict."""
    value = _get(meta, "split", "topology.split")
    if isinstance(value, str) and ":" in value:
        value = value.split(":")
    if isinstance(value, Mapping):
        value = (value.get("rollout"), value.get("train"))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None, None
    return _get(meta, "rollout_gpus", "topology.rollout_gpus"), _get(meta, "train_gpus", "topology.train_gpus")


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

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any]) -> RunFacts:
        """Read the facts, accepting the spellings collectors write (see docs/run-directory.md)."""
        gpu_type = _get(meta, "gpu.type", "gpu_type")
        peak = _get(meta, "gpu.peak_bf16_flops", "gpu.peak_flops", "peak_bf16_flops", "peak_flops")
        n_r, n_t = _split(meta)
        topology = _get(meta, "topology.kind", "topology")
        n_gpus = _get(meta, "gpu.count", "n_gpus")
        kind = topology_kind(topology) if isinstance(topology, str) else "colocated"
        batch = _get(meta, "batch_size", "train_batch_size", "config.batch_size")
        group = _get(meta, "group_size", "rollout_n", "config.group_size")
        if n_gpus is None and n_r and n_t:
            n_gpus = n_r if kind == "colocated" else n_r + n_t  # colocated: both are all GPUs
        return cls(
            n_gpus=int(n_gpus) if n_gpus else None,
            gpu_type=gpu_type,
            peak_flops=float(peak) if peak else peak_flops(gpu_type) if gpu_type else None,
            active_params=_get(meta, "model.active_params", "model.params", "model.total_params", "active_params"),
            critic_params=_get(meta, "model.critic_params", "critic_params"),
            topology=str(topology).lower() if isinstance(topology, str) else "colocated",
            rollout_gpus=int(n_r) if n_r else None,
            train_gpus=int(n_t) if n_t else None,
            sequences_per_step=int(batch * group) if batch and group else None,
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
        return self.kind != "colocated" and bool(n_r and n_t) and n_r + n_t == self.n_gpus

    @property
    def overlapped(self) -> bool:
        """Generation runs beside the trainer's step rather than inside it."""
        return self.kind in ("one_step_overlap", "async_streaming")


@dataclass
class RunFrames:
    """A run as pandas frames: wide ``steps`` (index step), ``trajectories`` and ``meta``.

    Read from a run directory, ``trajectories`` holds :data:`TRAJECTORY_COLUMNS` and
    :data:`REWARD_COLUMNS`, text columns as categoricals.
    """

    steps: pd.DataFrame
    trajectories: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(TRAJECTORY_COLUMNS)))
    meta: dict[str, Any] = field(default_factory=dict)
    reader: RunReader | None = None  # for analyzers that read other tables (gpu, spans, logprob)

    @property
    def facts(self) -> RunFacts:
        return RunFacts.from_meta(self.meta)

    @classmethod
    def from_reader(cls, reader: RunReader) -> RunFrames:
        steps = wide_steps(reader.read("steps", ["step", "attempt", "time", "key", "value"]))
        trajectories = _read_trajectories(reader)
        return cls(steps, trajectories, dict(reader.meta), reader)


def _read_trajectories(reader: RunReader) -> pd.DataFrame:
    """The trajectory columns as pandas, converted a column at a time with each column's Arrow
    memory handed back once converted: the Arrow and pandas copies of millions of rows are never
    both resident. (Only this frame may hold the table, or nothing could be freed.)"""
    table = reader.read("trajectories", [*TRAJECTORY_COLUMNS, *REWARD_COLUMNS], dictionary=_TEXT_COLUMNS)
    pool = pa.default_memory_pool()
    columns = {}
    for name in table.column_names:
        columns[name] = table.column(name).to_pandas()
        table = table.drop_columns([name])
        pool.release_unused()
    return pd.DataFrame(columns, copy=False)


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


def group_rows(keys: np.ndarray) -> Groups:
    """Group rows by ``keys`` (ascending, stable within a key) without pandas' groupby.

    Trajectories arrive in step order, so the usual cost is one pass that checks it.
    """
    keys = np.asarray(keys)
    order = None
    if keys.size > 1 and not np.all(keys[1:] >= keys[:-1]):
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, dtype=np.int64)
    ends = np.r_[starts[1:], keys.size].astype(np.int64)
    return Groups(keys[starts], starts, ends, order)


def cells(groups: Groups, codes: np.ndarray, n_codes: int) -> np.ndarray:
    """Per row (in key order), its cell ``group * n_codes + code`` of a (group, code) grid.

    ``codes`` are in the rows' original order. The cells are ``intp``, which ``np.bincount``
    takes without a converted copy.
    """
    index = np.repeat(np.arange(groups.keys.size, dtype=np.intp), groups.sizes) * n_codes
    index += groups.take(codes)
    return index


def numbers(values: pd.Series) -> np.ndarray:
    """A numeric column as numpy, without a copy when it can: ints stay ints, a gap is NaN."""
    if isinstance(values.dtype, np.dtype) and values.dtype.kind in "iuf":
        return values.to_numpy()
    return values.to_numpy(dtype=float, na_value=np.nan)


def kept(mask: np.ndarray) -> np.ndarray | slice:
    """``mask`` as an index; ``slice(None)`` when it keeps every row, which indexes without a copy."""
    return slice(None) if mask.all() else mask


def labels(values: pd.Series, missing: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, names)`` of a text column: ``names`` sorted as pandas' groupby sorts them and
    ``codes`` indexing ``names`` per row; a missing value is -1, or ``missing`` if given.

    A categorical is mapped through its categories, so millions of rows cost one lookup.
    """
    if isinstance(values.dtype, pd.CategoricalDtype):
        raw = values.cat.codes.to_numpy()
        names = values.cat.categories.to_numpy(dtype=object)
    else:
        raw, uniques = pd.factorize(values)
        names = np.asarray(uniques, dtype=object)
    if missing is not None and (raw < 0).any():
        names = np.append(names, missing) if missing not in set(names) else names
        raw = np.where(raw < 0, list(names).index(missing), raw)
    order = np.argsort(names, kind="stable")
    if np.array_equal(order, np.arange(names.size)):
        return raw, names
    rank = np.append(np.empty(names.size, dtype=np.int32), np.int32(-1))  # code -1 stays -1
    rank[order] = np.arange(names.size)
    return rank[raw], names[order]


def recent(frame: pd.DataFrame | pd.Series) -> pd.DataFrame | pd.Series:
    """The last quarter of the rows (at least one): the run as it is now."""
    n = len(frame)
    return frame.iloc[n - max(1, math.ceil(n * RECENT_FRACTION)) :]


@dataclass(frozen=True)
class Trend:
    """How a per-step quantity moved: first vs last quarter of steps and the fitted slope."""

    first: float
    last: float
    slope_per_step: float

    @property
    def change(self) -> float:
        return self.last - self.first


def trend(series: pd.Series) -> Trend:
    """Means of the first and last quarter of ``series`` (index = step) and its least-squares slope."""
    s = series.dropna()
    if s.empty:
        return Trend(math.nan, math.nan, math.nan)
    q = max(1, math.ceil(len(s) * RECENT_FRACTION))
    x = s.index.to_numpy(dtype=float)
    slope = float(np.polyfit(x, s.to_numpy(dtype=float), 1)[0]) if len(s) >= 2 and np.ptp(x) > 0 else math.nan
    return Trend(float(s.iloc[:q].mean()), float(s.iloc[-q:].mean()), slope)
