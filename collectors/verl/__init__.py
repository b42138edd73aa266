"""Zero-code-change verl hook: importing this module makes a verl run write an rlscope run directory.

verl imports every module named in ``VERL_USE_EXTERNAL_MODULES`` (comma-separated) at the
end of ``import verl``, in every process that imports verl, Ray workers included. So::

    VERL_USE_EXTERNAL_MODULES=rlscope.collectors.verl RLSCOPE_RUN_DIR=/shared/runs/exp1 \\
        python -m verl.trainer.main_ppo ...

records, without touching the training script:

- ``steps``: every metric dict the trainer passes to ``verl.utils.tracking.Tracking.log``;
- ``spans``: start and end of each phase verl times with ``marked_timer`` (``gen``,
  ``reward``, ``old_log_prob``, ``ref``, ``adv``, ``update_actor``, ``update_weights``,
  ``step``, ...), stamped with the step of the trainer's next ``Tracking.log``;
- ``trajectories``: one row per agent-loop sample (lengths, turns, generation / tool /
  reward seconds, preemptions, reward, data source, policy versions), written by the
  agent-loop worker processes before verl reduces them to min/mean/max; for the fully async
  trainer, written by the trainer when it takes the sample, with the version its update starts from;
- ``logprob``: the per-token ``old_log_probs - rollout_log_probs`` histogram whenever
  verl computes its ``training/rollout_probs_diff_*`` debug metrics;
- ``jobs``: when the driver's job started (the process that builds verl's ``Tracking``,
  timed from its import of verl), once per ``Tracking``: the stall clock's start;
- ``meta.json``: framework ``verl``, its version, and batch size, group size, max
  response length, GPU count and model path when the trainer's config states them.

Every patch calls verl's original first and returns its result unchanged; whatever the
hook itself fails at is caught, counted per feature in ``status()["faults"]`` and logged
once (logger ``rlscope``). A target missing from the running verl version is logged once
and the other patches still work. Without ``RLSCOPE_RUN_DIR`` nothing is patched.
See ``docs/verl-hook.md`` for Ray ``runtime_env`` settings and the patched functions.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from rlscope.collectors.verl import _agent_loop, _consumed, _logprob, _timers, _tracking
from rlscope.collectors.verl._hook import Hook, set_process_hook
from rlscope.collectors.verl._patch import Target, install_targets

__all__ = ["ENV_RUN_DIR", "TARGETS", "flush", "install", "status"]

ENV_RUN_DIR = "RLSCOPE_RUN_DIR"

_AGENT_LOOP = "verl.experimental.agent_loop.agent_loop"

TARGETS: tuple[Target, ...] = (
    Target("metrics", "verl.utils.tracking", "Tracking.log", _tracking.wrap_log),
    Target("meta", "verl.utils.tracking", "Tracking.__init__", _tracking.wrap_init),
    # Trainers do ``from verl.utils.debug import marked_timer``; both names are the profiler's
    # function (NVTX, MSTX or plain, chosen at import), wrapped once.
    Target("spans", "verl.utils.profiler", "marked_timer", _timers.wrap_marked_timer, rebind=True),
    Target("spans", "verl.utils.debug", "marked_timer", _timers.wrap_marked_timer, rebind=True),
    Target(
        "logprob",
        "verl.utils.debug.metrics",
        "calculate_debug_metrics",
        _logprob.wrap_calculate_debug_metrics,
        rebind=True,
    ),
    # the one-step-off trainer's batches: which step trains each (see _agent_loop)
    Target("trajectories", _AGENT_LOOP, "AgentLoopWorker.generate_sequences", _agent_loop.wrap_generate_sequences),
    Target("trajectories", _AGENT_LOOP, "AgentLoopWorker._run_agent_loop", _agent_loop.wrap_run_agent_loop),
    Target("trajectories", _AGENT_LOOP, "AgentLoopWorker._agent_loop_postprocess", _agent_loop.wrap_postprocess),
    Target(
        "trajectories",
        "verl.trainer.ppo.v1.agent_loop_tq",
        "AgentLoopWorkerTQ._agent_loop_postprocess",
        _agent_loop.wrap_postprocess,
    ),
    # the fully async trainer: a sample's row is written when the trainer takes it for an update
    Target(
        "trajectories",
        "verl.experimental.fully_async_policy.fully_async_trainer",
        "FullyAsyncTrainer._collect_metrics_from_samples",
        _consumed.wrap_collect_metrics_from_samples,
    ),
)
"""What is patched: ``feature``, ``module``, ``attr``. A module verl never imports stays pending."""

log = logging.getLogger("rlscope")

_installed: Hook | None = None


def install() -> Hook | None:
    """Install the hook for ``$RLSCOPE_RUN_DIR`` (once per process); None when the variable is unset."""
    global _installed
    if _installed is not None:
        return _installed
    run_dir = os.environ.get(ENV_RUN_DIR, "").strip()
    if not run_dir:
        log.warning("rlscope verl hook: %s is not set; nothing is recorded in this process", ENV_RUN_DIR)
        return None
    _installed = Hook(run_dir)
    set_process_hook(_installed)
    install_targets(_installed, TARGETS)
    return _installed


def status() -> dict[str, Any]:
    """What is patched, pending or missing, the faults caught per feature, and the Recorder's counters."""
    if _installed is None:
        return {"installed": False, "run_dir": None}
    return _installed.status()


def flush(timeout: float = 10.0) -> None:
    """Wait until what this process recorded is on disk (the Recorder also flushes every few seconds)."""
    if _installed is not None:
        _installed.flush(timeout)


try:
    install()
except Exception as _exc:  # noqa: BLE001 - importing the hook must never stop verl from importing
    log.warning("rlscope verl hook: not installed (%s: %s)", type(_exc).__name__, _exc)
