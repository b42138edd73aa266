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
from concurrent.futures import Future, ThreadPoolExecutor
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
    the thread that runs that stage: GPU idle, the rewards and the engine balance run on a
    second thread beside the others.
    """
    tick = on_stage or (lambda _name: None)
    if not isinstance(run, (RunReader, RunFrames)):
        run = RunReader(run)
    reader = run if isinstance(run, RunReader) else run.reader
    done: dict[str, Future[Any]] = {name: Future() for name in STAGES}

    def result(name: str) -> Any:
        """An analyzer's result, waited for: the analyzer reusing it may run on the other thread."""
        return done[name].result()

    def read() -> RunFrames:
        frames = load(run)
        # read from a run directory, the trajectories are decoded in the background meanwhile
        # (begun here, or before the analysis was imported: ``cli.diagnose.reading_run``)
        frames.trajectories.prefetch(ANALYZED_TRAJECTORIES)
        return frames

    def rewards_of(frames: RunFrames) -> Any:
        # trajectories read from the run hold the reward columns: the rewards analyzer reuses them
        reward_input = frames.trajectories if "reward" in frames.trajectories.columns else reader
        return rewards.analyze(reward_input, frames.steps) if reader else None

    # two threads, each in dependency order, balanced in time on a large run; numpy and Arrow
    # leave the GIL in their loops over millions of rows. GPU idle needs the reader alone.
    beside: list[tuple[str, Callable[[], Any]]] = [
        ("gpu_idle", lambda: gpu_idle.analyze(reader) if reader else None),
        ("rewards", lambda: rewards_of(result("read"))),
        ("sync_balance", lambda: sync_balance.analyze(result("read"), result("anatomy"))),
    ]
    chain: list[tuple[str, Callable[[], Any]]] = [
        ("read", read),
        ("anatomy", lambda: anatomy.analyze(result("read"))),
        ("longtail", lambda: longtail.analyze(result("read"))),
        ("mfu", lambda: mfu.analyze(result("read"), result("anatomy"), result("longtail"))),
        ("topology", lambda: topology.analyze(result("read"), result("anatomy"), result("longtail"))),
        (
            "drift",
            lambda: drift.analyze(result("read"), result("anatomy"), result("longtail"), result("topology")),
        ),
        ("staleness", lambda: staleness.analyze(result("read"), anatomy=result("anatomy"))),
        (
            "mismatch",
            lambda: mismatch.analyze(reader, staleness.recent_mean_lag(result("staleness"))) if reader else None,
        ),
    ]

    def run_all(plan: list[tuple[str, Callable[[], Any]]]) -> None:
        try:
            for name, analyze in plan:
                tick(name)
                done[name].set_result(analyze())
        except BaseException as exc:  # Ctrl-C too: the other thread's analyzers waiting on these fail with it
            for name, _ in plan:
                if not done[name].done():
                    done[name].set_exception(exc)
            raise

    pool = ThreadPoolExecutor(1, thread_name_prefix="rlscope-analyze")
    try:
        side = pool.submit(run_all, beside)
        run_all(chain)
        side.result()
    finally:
        pool.shutdown(wait=False)
    r = {name: result(name) for name in STAGES if name != "read"}
    return Diagnosis(**r)
