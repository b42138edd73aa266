"""Prometheus exporter: a run directory's health as metrics, for alerting while a run trains.

``rlscope export RUN_DIR [RUN_DIR ...] --port 9400`` serves ``/metrics``; inside a training
process ``rlscope.exporter.serve(run_dir, port)`` does the same from a daemon thread and
returns a handle with ``stop()``. Both read only the run directory, like every other reader,
so the exporter works the same beside a live run, on a finished one, or from another host.

Each scrape reads only the segments added since the previous one (through a ``Cursor``)
and updates running aggregates, so its cost does not grow with the run's length; several
scrapers within ``min_refresh_s`` (default 1 s) share one read. What is exported, with a
``run`` label on every series (the full table is :data:`METRICS`):

- progress: ``rlscope_last_step``, ``rlscope_last_step_timestamp_seconds``,
  ``rlscope_step_median_seconds``, ``rlscope_step_seconds{phase}`` (verl's stage timers);
- balance: ``rlscope_idle_ratio{role}`` (async trainer / rollouter), ``rlscope_tail_share``,
  ``rlscope_mfu_ratio``, ``rlscope_configured_gpus{role}``, ``rlscope_recommended_gpus{role}``,
  ``rlscope_gpu_utilization_ratio{host,gpu,role}`` (the recommended split of an async run on
  separate pools leaves out the steps ``rlscope diagnose`` leaves out: its pipeline fills, the
  run's first training step and each job's first, not the window's first step);
- rewards by source: ``rlscope_reward_mean``, ``rlscope_reward_zero_ratio`` (and its
  ``_baseline``), ``rlscope_reward_error_ratio``, ``rlscope_reward_errors_total{source,code}``,
  ``rlscope_reward_trajectories_total``; and over all samples, verl's score range
  ``rlscope_reward_score{stat}`` (``max``, ``min``) and ``rlscope_reward_flat_steps``, the latest
  steps in a row whose range was empty;
- off-policy health: ``rlscope_staleness{quantile}``, ``rlscope_logprob_abs_delta{quantile}``
  and the limit for the run's precision, ``rlscope_logprob_abs_delta_threshold``.

Labels taken from the run are cleaned (no control characters, at most 64 characters) and
bounded: at most 50 reward sources and 20 error codes per run keep their own series, the
rest share ``__other__``. The alert and recording rules over these metrics are in
``rules/`` of the repository, with a runbook; ``docs/prometheus.md`` shows the setup.
"""

from rlscope.exporter._labels import OTHER, sanitize_label
from rlscope.exporter._metrics import METRICS, MetricSpec
from rlscope.exporter.collector import RLScopeCollector
from rlscope.exporter.server import DEFAULT_HOST, DEFAULT_PORT, ExporterServer, ServeError, serve

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "METRICS",
    "OTHER",
    "ExporterServer",
    "MetricSpec",
    "RLScopeCollector",
    "ServeError",
    "sanitize_label",
    "serve",
]
