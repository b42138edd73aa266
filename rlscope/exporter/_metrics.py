"""The exported metrics: names, types, help text and labels, in one table.

This table is the contract with ``rules/`` and the Grafana dashboard (a test checks that
every name they use is here), so a metric is renamed here or nowhere. Every metric also
carries a ``run`` label (the run directory's name). Names end in their unit (``_seconds``,
``_ratio`` for 0-1 fractions, ``_total`` for counters).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from rlscope.advice.thresholds import MISMATCH_CRITICAL_FACTOR
from rlscope.analyzers.mismatch import expected_level

__all__ = [
    "LOGPROB_ABS_QUANTILES",
    "METRICS",
    "STALENESS_QUANTILES",
    "MetricSpec",
    "logprob_limit",
]

# Quantile label values: strings as Prometheus users write them in selectors.
STALENESS_QUANTILES: tuple[tuple[str, float], ...] = (("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99), ("1", 1.0))
LOGPROB_ABS_QUANTILES: tuple[tuple[str, float], ...] = (("0.5", 0.5), ("0.9", 0.9), ("0.99", 0.99), ("0.999", 0.999))


def logprob_limit(meta: Mapping[str, Any]) -> tuple[str, str, float]:
    """(precision, model type, limit) for the median |log p_trainer - log p_rollout|.

    The limit is ``MISMATCH_CRITICAL_FACTOR`` (10) times the normal level for the rollout
    precision (dense bf16 ~1e-3, fp8 ~1e-2): beyond it the gap is no longer a precision
    effect. MoE routing flips push single tokens past 1 but leave the median alone, so the
    model type does not change the limit.
    """
    precision, model_type, level = expected_level(meta)
    return precision, model_type, MISMATCH_CRITICAL_FACTOR * level


class _QuantileSummary(Metric):
    """A summary of quantiles (label ``quantile``) with its ``_sum`` and ``_count``: Prometheus
    reserves the ``quantile`` label for summaries, so a gauge carrying it fails ``promtool``."""

    def __init__(self, name: str, help_text: str):
        super().__init__(name, help_text, "summary")

    def add_metric(self, labels: Sequence[str], value: float, suffix: str = "") -> None:
        """``labels``: (run, quantile) for a quantile; (run,) with ``suffix`` ``_sum`` or ``_count``."""
        names = ("run", "quantile") if not suffix else ("run",)
        self.add_sample(self.name + suffix, dict(zip(names, labels, strict=True)), value)


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: full sample name, ``gauge``, ``counter`` or ``summary`` (quantiles,
    ``_sum`` and ``_count``), help, labels after ``run``."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...] = ()

    def family(self) -> Metric:
        """An empty metric family of this spec, to be filled with samples."""
        labels = ["run", *self.labels]
        if self.kind == "counter":
            return CounterMetricFamily(self.name.removesuffix("_total"), self.help, labels=labels)
        if self.kind == "summary":
            return _QuantileSummary(self.name, self.help)
        return GaugeMetricFamily(self.name, self.help, labels=labels)


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "rlscope_run_up",
        "gauge",
        "1 if the run directory was read without error at the last refresh, else 0.",
    ),
    MetricSpec(
        "rlscope_last_step",
        "gauge",
        "Training step most recently logged in the steps table (a record of validation metrics or of validation "
        "and checkpoint timers alone is no step, as in diagnose's step anatomy); a fully async trainer's training "
        "record, logged after the next step's and filed under the update it describes, does not move it back.",
    ),
    MetricSpec(
        "rlscope_last_step_timestamp_seconds",
        "gauge",
        "Unix time at which the most recent step was logged; time() minus this is how long the run has gone "
        "without a step.",
    ),
    MetricSpec(
        "rlscope_validation_timestamp_seconds",
        "gauge",
        "Unix time at which the run logged a validation or checkpoint on its own (verl's val_before_train) with no "
        "training step logged since; absent once a step follows. The run-stalled rule times the first step after "
        "it from here, unless a job start is served.",
    ),
    MetricSpec(
        "rlscope_job_start_timestamp_seconds",
        "gauge",
        "Unix time at which a job that has logged no training step yet started: the first job start (the jobs table: the verl hook's driver, Recorder.log_job_start) logged since the "
        "run's last training step, unless that job validated after it; a second start without a training step "
        "keeps the first (a job that restarts again and again without a step, validating each time or not, "
        "does not move it), unless it starts more than the stall limit of a job with no step and 10 minutes after "
        "the start before it (a relaunch after a stall that paged: its own clock); a start more than a minute "
        "after the scrape (a wrong clock) counts only once the scrape's time gets there; "
        "for a run without a jobs table, when meta.json was last written, before the run's first step or "
        "validation only. The run-stalled rule times the job's warm-up and first step from here, with the "
        "first-step limit (or the run's own limit where that is longer).",
    ),
    MetricSpec(
        "rlscope_step_median_seconds",
        "gauge",
        "Median step duration over the last 64 steps (verl timing_s/step, else the interval between step logs): "
        "the yardstick of the run-stalled alert. After a resume that went back, the crashed attempt's steps above "
        "it are left out.",
    ),
    MetricSpec(
        "rlscope_step_seconds",
        "gauge",
        "Seconds of each verl stage timer (timing_s/<phase>) in the most recent step that logged them (a fully "
        "async run logs an update's one sync late), until a resume logs another attempt; phase=step is the whole step. "
        "Timers nested in another stage (generate_sequences, generate_async, reshard, tool_calls, agent_loop) and "
        "keys under a stage (timing_s/agent_loop/...) are left out.",
        ("phase",),
    ),
    MetricSpec(
        "rlscope_idle_ratio",
        "gauge",
        "Share of time the async trainer or rollouter waited for the other side, as verl last logged it "
        "(fully_async/<role>/idle_ratio) within [0, 1]: a value outside is read as not logged.",
        ("role",),
    ),
    MetricSpec(
        "rlscope_reward_score",
        "gauge",
        "verl's critic/score/<stat> as last logged: the highest and lowest reward of any sample in the step. "
        "Equal, every sample scored the same and a group-relative advantage is 0.",
        ("stat",),
    ),
    MetricSpec(
        "rlscope_reward_flat_steps",
        "gauge",
        "How many of the run's latest steps in a row logged critic/score max equal to min (every sample scored "
        "the same), counted over the last 64 steps; 0 when the latest step's rewards differ.",
    ),
    MetricSpec(
        "rlscope_reward_mean",
        "gauge",
        "Mean reward of the successfully scored trajectories of this source in its last 5 steps with samples.",
        ("source",),
    ),
    MetricSpec(
        "rlscope_reward_zero_ratio",
        "gauge",
        "Share of this source's successfully scored trajectories whose reward is exactly 0, over its last 5 steps "
        "(errors are not zeros and are left out).",
        ("source",),
    ),
    MetricSpec(
        "rlscope_reward_zero_ratio_baseline",
        "gauge",
        "The same zero share over this source's earlier steps, served once they are 5 or more; the steps it scored "
        "0 on 90% or more of are left out when a 5-step window they were in was a collapse against the steps before "
        "it (a collapse must not become what is normal for it).",
        ("source",),
    ),
    MetricSpec(
        "rlscope_reward_error_ratio",
        "gauge",
        "Share of this source's trajectories whose reward service returned an error, over its last 5 steps.",
        ("source",),
    ),
    MetricSpec(
        "rlscope_reward_errors_total",
        "counter",
        "Trajectories whose reward service returned an error, by source and error code, since the run began.",
        ("source", "code"),
    ),
    MetricSpec(
        "rlscope_reward_trajectories_total",
        "counter",
        "Trajectories sent to this reward source (scored or errored) since the run began.",
        ("source",),
    ),
    MetricSpec(
        "rlscope_tail_share",
        "gauge",
        "Share of rollout time spent waiting for the slowest 10% of trajectories, recent complete steps "
        "(estimated from response lengths when no trajectories are logged).",
    ),
    MetricSpec(
        "rlscope_mfu_ratio",
        "gauge",
        "Whole-step model FLOPs utilisation of recent steps: useful FLOPs over step time x GPUs x peak FLOP/s.",
    ),
    MetricSpec(
        "rlscope_staleness",
        "summary",
        "Policy versions between the weights that started a trajectory and the update that consumed it, "
        "over the trajectories of the last 2 steps (quantile=1 is the maximum); _sum and _count over every "
        "trajectory read.",
        ("quantile",),
    ),
    MetricSpec(
        "rlscope_logprob_abs_delta",
        "summary",
        "Quantiles of per-token |log p_trainer - log p_rollout| in the step most recently logged, by logging time "
        "(rows logged before the run went back, a crashed attempt's, are left out); _sum and _count over "
        "every token read but those with a |delta| of 100 or more (infinite ones included; a histogram row whose "
        "largest finite |delta| is 100 or more stays out whole, its last bin mixing the two).",
        ("quantile",),
    ),
    MetricSpec(
        "rlscope_logprob_abs_delta_threshold",
        "gauge",
        "Median |log p_trainer - log p_rollout| above which the mismatch is abnormal for this run's precision "
        "(10x the normal level: bf16 1e-2, fp8 1e-1).",
        ("precision", "model_type"),
    ),
    MetricSpec(
        "rlscope_gpu_utilization_ratio",
        "gauge",
        "Latest NVML utilisation of each GPU (fraction of time a kernel ran); a GPU whose latest reading is 5 "
        "minutes older than the run's newest GPU sample or step record is dropped.",
        ("host", "gpu", "role"),
    ),
    MetricSpec(
        "rlscope_configured_gpus",
        "gauge",
        "GPUs given to rollout and to training, as meta.json's split states.",
        ("role",),
    ),
    MetricSpec(
        "rlscope_recommended_gpus",
        "gauge",
        "Rollout:train split that the topology model predicts to give the shortest step for this run's topology, "
        "for separate pools whose sizes meta.json's split states (not an async run without its rollout pool's busy "
        "time, verl's occupancy share or rollouter idle ratio, which has no model); the configured split when a move "
        "would shorten the step by less than 5%. An async run on separate pools is modelled on its steady steps: its "
        "pipeline fills, the run's first training step and each job's first (the jobs table), are left out, as by "
        "diagnose.",
        ("role",),
    ),
    MetricSpec(
        "rlscope_exporter_refresh_seconds",
        "gauge",
        "Seconds the exporter's last refresh of this run took (reading new segments, updating aggregates).",
    ),
    MetricSpec(
        "rlscope_exporter_refresh_errors_total",
        "counter",
        "Refreshes of this run that failed (unreadable run directory, an analyzer error); see the exporter's log.",
    ),
)
