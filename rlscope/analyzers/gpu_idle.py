"""How much of each step do the GPUs of each role sit idle, and in which phase?

NVML samples say how busy each GPU was; phase spans say what the job was doing then.
Joining the two by time shows the sawtooth: learner GPUs near 0% while rollout decodes
the tail, engines idle while the trainer updates. A sample counts as idle below
``GPU_IDLE_UTIL_PCT``. Evidence: the ``gpu`` table (``time``, ``role``, ``util_pct``)
and the ``spans`` table (``step``, ``phase``, ``start``, ``end``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import GPU_IDLE_SHARE_CRITICAL, GPU_IDLE_SHARE_WARN, GPU_IDLE_UTIL_PCT, RECENT_FRACTION
from rlscope.trace.reader import RunReader

__all__ = ["GpuIdleResult", "analyze"]

# Roles whose idleness is the training job's bill: the learner in separated/async runs, or
# every GPU when they are time-shared (colocated runs often label them all "trainer").
_LEARNER_ROLES = ("trainer", "actor", "learner")


@dataclass
class GpuIdleResult:
    """Idle share per role, per (step, role) and per (phase, role), from NVML samples."""

    available: bool
    by_role: pd.DataFrame = field(default_factory=pd.DataFrame)  # role: samples, mean_util_pct, idle_share
    by_step: pd.DataFrame = field(default_factory=pd.DataFrame)  # step, role, samples, idle_share
    by_phase: pd.DataFrame = field(default_factory=pd.DataFrame)  # phase, role, samples, mean_util_pct, idle_share
    findings: list[Finding] = field(default_factory=list)


def _join(gpu: pd.DataFrame, windows: pd.DataFrame, label: str) -> pd.DataFrame:
    """Samples inside each window [``start``, ``end``), tagged with the window's ``label``.

    ``gpu`` is sorted by time, so each window is one slice; the slices are gathered with
    one index array instead of a frame per window (runs have thousands of spans).
    """
    times = gpu["time"].to_numpy()
    lo = np.searchsorted(times, windows["start"].to_numpy(), side="left")
    hi = np.searchsorted(times, windows["end"].to_numpy(), side="left")
    lengths = np.maximum(hi - lo, 0)
    offsets = np.repeat(np.cumsum(lengths) - lengths, lengths)
    index = np.arange(lengths.sum()) - offsets + np.repeat(lo, lengths)
    return gpu.iloc[index].assign(**{label: np.repeat(windows[label].to_numpy(), lengths)})


def _aggregate(samples: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    g = samples.groupby(keys, sort=True)
    return pd.DataFrame(
        {"samples": g.size(), "mean_util_pct": g["util_pct"].mean(), "idle_share": g["idle"].mean()}
    ).reset_index()


def analyze(run: RunReader | str | os.PathLike[str]) -> GpuIdleResult:
    """Idle shares from a run's NVML samples, joined to its phase spans when it has them."""
    reader = run if isinstance(run, RunReader) else RunReader(run)
    gpu = reader.read("gpu", ["time", "host", "gpu", "role", "util_pct"]).to_pandas()
    gpu = gpu[gpu["util_pct"].notna()]
    if gpu.empty:
        return GpuIdleResult(available=False)
    gpu = gpu.assign(role=gpu["role"].fillna("unknown"), idle=gpu["util_pct"] < GPU_IDLE_UTIL_PCT)
    gpu = gpu.sort_values("time", kind="stable").reset_index(drop=True)
    result = GpuIdleResult(True, _aggregate(gpu, ["role"]).set_index("role"))

    spans = reader.read("spans", ["step", "phase", "start", "end"]).to_pandas().dropna(subset=["start", "end"])
    if spans.empty:
        return result
    steps = spans.groupby("step").agg(start=("start", "min"), end=("end", "max")).reset_index()
    result.by_step = _aggregate(_join(gpu, steps, "step"), ["step", "role"])
    result.by_phase = _aggregate(_join(gpu, spans[["phase", "start", "end"]], "phase"), ["phase", "role"])
    result.findings = _findings(result.by_step)
    return result


def _findings(by_step: pd.DataFrame) -> list[Finding]:
    roles = set(by_step["role"])
    learner = [r for r in _LEARNER_ROLES if r in roles]
    if not learner:
        return []
    role = learner[0]
    rows = by_step[by_step["role"] == role].sort_values("step")
    recent = rows.iloc[-max(1, int(np.ceil(len(rows) * RECENT_FRACTION))) :]
    idle = float((recent["idle_share"] * recent["samples"]).sum() / recent["samples"].sum())
    if idle < GPU_IDLE_SHARE_WARN:
        return []
    severity = Severity.CRITICAL if idle >= GPU_IDLE_SHARE_CRITICAL else Severity.WARN
    return [
        finding(
            "gpu-idle-in-training",
            severity,
            {"role": role, "idle_share": idle, "steps": len(recent), "util_threshold_pct": GPU_IDLE_UTIL_PCT},
            f"{role} GPUs are idle (< {GPU_IDLE_UTIL_PCT:g}% utilisation) for {idle:.0%} of each recent step: "
            "they wait for rollout to finish. Overlap rollout with training (one-step overlap or async "
            "streaming) or cut the long tail; see the topology what-if for the predicted step time.",
        )
    ]
