"""Engine balance and sync bubble: do the rollout engines share the work, and how long does the trainer stall on weight sync?

Evidence: the ``trajectories`` table's ``engine`` column with ``response_tokens`` (else
``gen_s``) as each trajectory's load; the anatomy's weight-sync and update seconds.

Engine balance, per step: load of an engine = sum of its trajectories' loads; CV = population
standard deviation / mean of the per-engine loads; utilisation = mean / max (a synchronous
rollout waits for the heaviest engine). Dressage example: 8 engines whose heaviest runs 2600
equivalent steps where 1600 would be balanced: utilisation 1600/2600 = 61.5%, throughput
800 -> 492 steps/s.

Sync bubble = T_sync / (k T_mb + T_sync) for k mini-batch updates of T_mb seconds per sync.
Over a window of steps that is total sync seconds over total update + sync seconds, which
also holds when a sync happens only every few steps. It is a finding only for pooled
topologies, where the training pool stalls during sync; a colocated step also holds the
whole rollout, and the anatomy reports weight sync as its share of that.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity, fmt_last_steps, fmt_seconds, fmt_steps
from rlscope.advice.thresholds import ENGINE_CV_CRITICAL, ENGINE_CV_WARN, SYNC_BUBBLE_CRITICAL, SYNC_BUBBLE_WARN
from rlscope.analyzers import anatomy as _anatomy
from rlscope.analyzers._data import Pieces, RunFrames, Trajectories, group_counts, kept, load, recent
from rlscope.trace.reader import RunReader

__all__ = ["EngineBalance", "SyncBalanceResult", "analyze", "engine_balance", "sync_bubble"]


@dataclass(frozen=True)
class EngineBalance:
    """Per-engine load spread of one rollout: ``utilisation`` = mean / max, ``cv`` = std / mean."""

    n_engines: int
    mean_load: float
    max_load: float
    cv: float

    @property
    def utilisation(self) -> float:
        return self.mean_load / self.max_load if self.max_load > 0 else math.nan


def engine_balance(loads: Mapping[str, float] | pd.Series) -> EngineBalance:
    """Balance of one rollout from each engine's total load (tokens, steps or seconds)."""
    x = np.asarray(list(loads.values()) if isinstance(loads, Mapping) else loads, dtype=float)
    mean = float(x.mean()) if x.size else math.nan
    cv = float(x.std() / mean) if mean > 0 else math.nan
    return EngineBalance(int(x.size), mean, float(x.max()) if x.size else math.nan, cv)


def sync_bubble(t_sync_s: float, t_mb_s: float, k: float) -> float:
    """Share of trainer time spent syncing weights: T_sync / (k T_mb + T_sync)."""
    return t_sync_s / (k * t_mb_s + t_sync_s)


@dataclass(frozen=True)
class SyncBalanceResult:
    """Per-step engine balance and the recent sync bubble.

    ``engines``: index step; ``n_engines`` (every engine between the first and last step it served),
    ``mean_load``, ``max_load``, ``cv``, ``utilisation``, ``heaviest`` engine and its
    ``heaviest_share`` of the load, and the ``starved`` engines that served nothing in the
    step (empty without an ``engine`` column). ``load_unit``: ``response_tokens``
    or ``gen_s``. ``bubble``: recent sync bubble (NaN without weight-sync timers), with
    ``t_sync_s`` per sync, ``k`` steps per sync and ``t_mb_s`` update seconds per step.
    """

    engines: pd.DataFrame
    load_unit: str | None
    bubble: float
    t_sync_s: float
    k: float
    t_mb_s: float
    findings: list[Finding] = field(default_factory=list)


def _engines(traj: Trajectories) -> tuple[pd.DataFrame, str | None]:
    columns = ["n_engines", "mean_load", "max_load", "cv", "utilisation", "heaviest", "heaviest_share", "starved"]
    if not traj.has("engine"):
        return pd.DataFrame(columns=columns), None
    unit = "response_tokens" if traj.has("response_tokens") else "gen_s"
    engine, names = traj.labels("engine", ordered=False)
    rows = kept(engine >= 0)
    g = traj.step_groups(rows)
    # load and row count of every (step, engine) cell; an engine without rows is not in its step
    engine = engine[rows]
    # every row has an engine, in step order as read: the loads are sliced from their chunks
    whole = isinstance(rows, slice) and g.order is None
    load: np.ndarray | Pieces = traj.in_step_order(unit) if whole else traj.numbers(unit)[rows]
    if load.dtype.kind == "f":  # a gap adds 0 (an infinite load stays one)
        load = load[:]
        load = np.where(np.isnan(load), 0.0, load)
    by_name = np.argsort(names, kind="stable")  # ties for the heaviest go to the first name
    loads = group_counts(g, engine, names.size, load)
    # which cells have rows, from their sums rather than a second pass counting every row: a cell
    # without rows sums to 0, one with rows only if it holds a load <= 0 (loads above 0 add up to
    # more), and those rows alone are looked up
    served = loads != 0
    if any(a.size and a.min() <= 0 for a in (load.arrays if isinstance(load, Pieces) else (load,))):
        load = load[:]
        odd = np.flatnonzero(load <= 0)
        served[np.searchsorted(g.keys, traj.numbers("step")[rows][odd]), engine[odd]] = True
    loads, served = loads[:, by_name], served[:, by_name]
    # an engine counts from the first step it serves to the last: one that gets nothing in a step
    # between is starved (load 0), the worst imbalance. Before and after it is not there (a
    # restart or a scale-down renames or removes engines). engine_balance() of every step at once.
    step_no = np.arange(len(served))[:, None]
    first = np.where(served.any(axis=0), served.argmax(axis=0), len(served))
    last = len(served) - 1 - served[::-1].argmax(axis=0)
    present = (step_no >= first) & (step_no <= last)
    n = present.sum(axis=1)
    total = loads.sum(axis=1)
    mean = total / n
    with np.errstate(invalid="ignore"):  # an infinite load's spread is NaN, as its cv
        spread = np.sqrt(np.where(present, (loads - mean[:, None]) ** 2, 0.0).sum(axis=1) / n)
    high = np.where(present, loads, -np.inf)
    heaviest = high.argmax(axis=1)
    top = high[np.arange(n.size), heaviest]
    with np.errstate(divide="ignore", invalid="ignore"):
        frame = pd.DataFrame(
            {
                "n_engines": n,
                "mean_load": mean,
                "max_load": top,
                "cv": np.where(mean > 0, spread / mean, np.nan),
                "utilisation": np.where(top > 0, mean / top, np.nan),
                "heaviest": names[by_name][heaviest],
                "heaviest_share": np.where(total > 0, top / total, np.nan),
                "starved": (present & ~served).sum(axis=1),
            },
            index=pd.Index(g.keys, name="step"),
        )
    return frame, unit


def analyze(
    run: RunReader | RunFrames | str | os.PathLike[str], anatomy: _anatomy.AnatomyResult | None = None
) -> SyncBalanceResult:
    """Measure engine load balance per step and the weight-sync bubble of recent steps."""
    frames = load(run)
    anatomy = anatomy or _anatomy.analyze(frames)
    engines, unit = _engines(frames.trajectories)
    bubble = t_sync = k = t_mb = math.nan
    if not anatomy.seconds.empty:
        g = recent(_anatomy.group_seconds(anatomy.seconds))
        syncs = int((g["weight_sync"] > 0).sum())
        if syncs:
            t_sync, k, t_mb = g["weight_sync"].sum() / syncs, len(g) / syncs, g["training"].mean()
            if t_mb > 0:  # no update timer: no evidence of what the sync stalls
                bubble = sync_bubble(t_sync, t_mb, k)
    result = SyncBalanceResult(engines, unit, bubble, t_sync, k, t_mb)
    result.findings.extend(_findings(result, pooled=frames.facts.is_pooled))
    return result


def _starved_note(recent_engines: pd.DataFrame) -> str:
    """A sentence on engines that served nothing in recent steps, or ''."""
    starved = recent_engines["starved"]
    if not (starved > 0).any():
        return ""
    most, steps = int(starved.max()), int((starved > 0).sum())
    who = "1 engine" if most == 1 else f"up to {most} engines"
    when = fmt_last_steps(1) if len(starved) == 1 else f"{steps} of {fmt_last_steps(len(starved))}"
    return f"{who} served nothing in {when} (dead, or not routed to?). "


def _findings(r: SyncBalanceResult, *, pooled: bool) -> list[Finding]:
    out: list[Finding] = []
    if not r.engines.empty:
        last = recent(r.engines)
        now = last.drop(columns=["heaviest"]).mean()
        if now["cv"] >= ENGINE_CV_WARN:
            heaviest = last["heaviest"].mode().iloc[0]  # the engine most often heaviest lately
            share = float(last.loc[last["heaviest"] == heaviest, "heaviest_share"].mean())
            util = now["mean_load"] / now["max_load"]
            out.append(
                finding(
                    "engine-imbalanced",
                    Severity.CRITICAL if now["cv"] >= ENGINE_CV_CRITICAL else Severity.WARN,
                    {
                        "cv": now["cv"],
                        "utilisation": util,
                        "mean_load": now["mean_load"],
                        "max_load": now["max_load"],
                        "n_engines": now["n_engines"],
                        "load_unit": r.load_unit,
                        "heaviest": str(heaviest),
                        "heaviest_share": share,
                    },
                    _starved_note(last)
                    + f"{heaviest} is the heaviest of {now['n_engines']:.0f} engines ({share:.0%} of the load, fair "
                    f"{100 / now['n_engines']:.3g}%); the heaviest carries {now['max_load']:,.0f} {r.load_unit} "
                    f"against a mean of {now['mean_load']:,.0f}: the rollout waits for it with engines "
                    f"{util:.0%} utilised; per-step load balancing would cut the load-bound rollout by up to {1 - util:.0%}",
                )
            )
    if pooled and r.bubble >= SYNC_BUBBLE_WARN:
        out.append(
            finding(
                "sync-bubble",
                Severity.CRITICAL if r.bubble >= SYNC_BUBBLE_CRITICAL else Severity.WARN,
                {"bubble": r.bubble, "t_sync_s": r.t_sync_s, "k": r.k, "t_mb_s": r.t_mb_s},
                f"each weight sync stalls the trainer {fmt_seconds(r.t_sync_s)} s per {fmt_steps(r.k)} of {fmt_seconds(r.t_mb_s)} s "
                f"updates ({r.bubble:.0%}): use delta or multi-source sync, or sync every {fmt_steps(2 * r.k)} "
                f"({sync_bubble(r.t_sync_s, r.t_mb_s, 2 * r.k):.0%}, at the price of staler samples)",
            )
        )
    return out
