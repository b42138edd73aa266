"""Shared inputs of the analyzers: a run's tables as pandas frames, its facts, and trends.

``load(run)`` accepts a ``RunReader``, a run-directory path or ready ``RunFrames`` (tests
and the facade pass frames so a run is read once). The long ``steps`` table becomes one
wide row per step; only the trajectory columns the analyzers use are read.
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
    "TOPOLOGIES",
    "TRAJECTORY_COLUMNS",
    "RunFacts",
    "RunFrames",
    "Trend",
    "load",
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
    """A run as pandas frames: wide ``steps`` (index step), ``trajectories`` and ``meta``."""

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
        trajectories = reader.read("trajectories", list(TRAJECTORY_COLUMNS)).to_pandas()
        return cls(steps, trajectories, dict(reader.meta), reader)


def load(run: RunReader | RunFrames | str | os.PathLike[str]) -> RunFrames:
    """The run's frames, read once from a reader or path, or passed through."""
    if isinstance(run, RunFrames):
        return run
    if not isinstance(run, RunReader):
        run = RunReader(run)
    return RunFrames.from_reader(run)


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
