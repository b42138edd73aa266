"""Analyzers: one module per question about a run, each returning data and Findings.

=================  ==============================================================
module             question
=================  ==============================================================
``anatomy``        Where does each step's wall-clock go, and how does it drift?
``longtail``       How much of each rollout waits for the slowest 10% of trajectories?
``mfu``            Whole-step MFU, and which cause each lost point goes to.
``topology``       What would colocated / separated / overlapped / async take, at which split?
``drift``          How has the balanced split moved over the run; how many GPUs to move now?
``sync_balance``   Are rollout engines evenly loaded; how long does weight sync stall training?
``staleness``      How stale are consumed samples, and is dropping stale ones length-biased?
``gpu_idle``       How much of each step do the GPUs of each role sit idle, in which phase?
``mismatch``       How far apart are trainer and rollout log-probs, for this precision?
``rewards``        Is a reward source failing, or legitimately scoring zero?
=================  ==============================================================

Every module has ``analyze(run, ...)`` taking a ``RunReader``, a run-directory path or
``RunFrames`` (read once with :func:`load`), and returning a frozen dataclass of pandas
frames and numbers plus ``findings``; none prints or plots. The formulas are plain
functions in each module, so a dashboard or a what-if notebook can call them directly.

:func:`analyze_run` runs them all on one read of the run and gathers the findings, most
severe first (``gpu_idle``, ``mismatch`` and ``rewards`` read their own tables, so they run
only when the frames came from a reader or a path; ``rewards`` then reuses the trajectory
columns read for the frames, which are decoded in the background while the analyzers that
need none of them run). ``mismatch`` runs after ``staleness``: a stale sample's log-prob gap
holds its policy's drift too. Analyzers that lack their evidence (no trajectories, no GPU count in
``meta.json``) return empty frames and no findings rather than failing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rlscope.advice.finding import Finding
from rlscope.analyzers import (
    anatomy,
    drift,
    gpu_idle,
    longtail,
    mfu,
    mismatch,
    rewards,
    staleness,
    sync_balance,
    topology,
)
from rlscope.analyzers._data import RunFacts, RunFrames, load
from rlscope.trace.reader import RunReader
from rlscope.trace.schema import ANALYZED_TRAJECTORIES

__all__ = [
    "STAGES",
    "Diagnosis",
    "RunFacts",
    "RunFrames",
    "analyze_run",
    "anatomy",
    "drift",
    "gpu_idle",
    "load",
    "longtail",
    "mfu",
    "mismatch",
    "rewards",
    "staleness",
    "sync_balance",
    "topology",
]


@dataclass(frozen=True)
class Diagnosis:
    """The results of every analyzer on one run, and all their findings (most severe first)."""

    anatomy: anatomy.AnatomyResult
    longtail: longtail.LongTailResult
    mfu: mfu.MFUResult
    topology: topology.TopologyResult
    drift: drift.DriftResult
    sync_balance: sync_balance.SyncBalanceResult
    staleness: staleness.StalenessResult
    gpu_idle: gpu_idle.GpuIdleResult | None = None
    mismatch: mismatch.MismatchResult | None = None
    rewards: rewards.RewardResult | None = None

    @property
    def findings(self) -> list[Finding]:
        results = (
            self.anatomy,
            self.longtail,
            self.mfu,
            self.topology,
            self.drift,
            self.sync_balance,
            self.staleness,
            self.gpu_idle,
            self.mismatch,
            self.rewards,
        )
        found = [f for r in results if r is not None for f in r.findings]
        return sorted(found, key=lambda f: -f.severity.rank)


STAGES = (
    "read",
    "gpu_idle",
    "anatomy",
    "longtail",
    "mfu",
    "topology",
    "drift",
    "sync_balance",
    "staleness",
    "mismatch",
    "rewards",
)


def analyze_run(
    run: RunReader | RunFrames | str | os.PathLike[str],
    on_stage: Callable[[str], None] | None = None,
) -> Diagnosis:
    """Run every analyzer on ``run``, reading its tables once.

    ``on_stage(name)`` is called before each of :data:`STAGES` (a progress bar's hook), from
    the thread that runs that stage: GPU idle and the rewards run beside the others.
    """
    tick = on_stage or (lambda _name: None)
    tick("read")
    frames = load(run)
    # read from a run directory, the trajectories are decoded in the background while the
    # analyzers that need none of them (GPU idle, the step anatomy) run
    frames.trajectories.prefetch(ANALYZED_TRAJECTORIES)
    reader = frames.reader
    # trajectories read from the run hold the reward columns: the rewards analyzer reuses them
    reward_input = frames.trajectories if "reward" in frames.trajectories.columns else reader
    r: dict[str, Any] = {}
    # GPU idle and the rewards need no other analyzer's result: they run on a second thread beside
    # the others (numpy and Arrow leave the GIL in their loops over millions of rows)
    beside: list[tuple[str, Callable[[], Any]]] = [
        ("gpu_idle", lambda: gpu_idle.analyze(reader) if reader else None),
        ("rewards", lambda: rewards.analyze(reward_input, frames.steps) if reader else None),
    ]
    # in dependency order: later analyzers reuse the anatomy's and the long tail's results
    chain: list[tuple[str, Callable[[], Any]]] = [
        ("anatomy", lambda: anatomy.analyze(frames)),
        ("longtail", lambda: longtail.analyze(frames)),
        ("mfu", lambda: mfu.analyze(frames, r["anatomy"], r["longtail"])),
        ("topology", lambda: topology.analyze(frames, r["anatomy"], r["longtail"])),
        ("drift", lambda: drift.analyze(frames, r["anatomy"], r["longtail"], r["topology"])),
        ("sync_balance", lambda: sync_balance.analyze(frames, r["anatomy"])),
        ("staleness", lambda: staleness.analyze(frames, anatomy=r["anatomy"])),
        ("mismatch", lambda: mismatch.analyze(reader, staleness.recent_mean_lag(r["staleness"])) if reader else None),
    ]

    def run(plan: list[tuple[str, Callable[[], Any]]]) -> None:
        for name, run_analyzer in plan:
            tick(name)
            r[name] = run_analyzer()

    pool = ThreadPoolExecutor(1, thread_name_prefix="rlscope-analyze")
    try:
        side = pool.submit(run, beside)
        run(chain)
        side.result()
    finally:
        pool.shutdown(wait=False)
    return Diagnosis(**r)
