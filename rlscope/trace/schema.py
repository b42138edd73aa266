"""Arrow schemas of the run-directory tables, and the fixed log-prob histogram bins.

Every column except the first (``step`` or ``time``) is nullable so that collectors can
write what they know and leave the rest empty. A segment missing a column (written by an
older rlscope) reads back with that column null; ``SCHEMA_VERSION`` is bumped when a
column changes meaning or type.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = [
    "ANALYZED_TRAJECTORIES",
    "CLOCK_TIME_S",
    "GPU",
    "IS_WEIGHT_CAP",
    "JOBS",
    "JOB_START_SKEW_SECONDS",
    "LOGPROB",
    "LOGPROB_BINS_PER_DECADE",
    "LOGPROB_BIN_EDGES",
    "LOGPROB_QUANTILES",
    "SCHEMA_VERSION",
    "SPANS",
    "STEPS",
    "TABLES",
    "TRAJECTORIES",
    "TRAJECTORY_TIMES",
    "whole_histograms",
]

SCHEMA_VERSION = 1

STEPS = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("attempt", pa.int32()),  # 0, 1, ... when a restarted run logs a step again
        pa.field("time", pa.float64()),  # unix seconds when the metrics were logged
        pa.field("key", pa.string()),
        pa.field("value", pa.float64()),  # numeric value (NaN and inf kept); null for text
        pa.field("text", pa.string()),  # the value when it is not a number
    ]
)

SPANS = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("attempt", pa.int32()),  # as in steps: 1, 2, ... when a restarted run times the step again
        pa.field("phase", pa.string()),  # verl stage name: gen, reward, old_log_prob, ...
        pa.field("role", pa.string()),  # trainer, rollout, reward, ...
        pa.field("host", pa.string()),
        pa.field("start", pa.float64()),  # unix seconds
        pa.field("end", pa.float64()),
    ]
)

TRAJECTORIES = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("attempt", pa.int32()),  # as in steps: the restarted run's attempt that generated it
        pa.field("traj_id", pa.string()),
        pa.field("group", pa.int64()),  # prompt index: the G samples of one prompt share it
        pa.field("data_source", pa.string()),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("response_tokens", pa.int64()),
        pa.field("turns", pa.int32()),
        pa.field("preemptions", pa.int32()),
        pa.field("gen_s", pa.float64()),
        pa.field("tool_s", pa.float64()),  # environment / tool wait inside the trajectory
        pa.field("reward_s", pa.float64()),
        pa.field("submit_time", pa.float64()),  # seconds since the step's rollout began
        pa.field("finish_time", pa.float64()),
        pa.field("engine", pa.string()),  # rollout engine (replica) that served it
        pa.field("policy_version_start", pa.int64()),
        pa.field("policy_version_end", pa.int64()),
        pa.field("trainer_version", pa.int64()),  # policy version of the update that consumed it
        pa.field("aborted", pa.bool_()),
        pa.field("partial", pa.bool_()),
        pa.field("reward", pa.float64()),
        pa.field("reward_status", pa.string()),  # ok | error
        pa.field("reward_error", pa.string()),  # error code from the reward service, if any
    ]
)

# the trajectory columns of seconds since the step's rollout began
TRAJECTORY_TIMES = ("submit_time", "finish_time")
# No rollout runs for 3 years: a trajectory time this large is a clock's reading (time.time()), not
# the seconds since the step's rollout began; the Recorder warns of it, the readers leave it out
CLOCK_TIME_S = 1e8
# the trajectory columns every diagnosis reads (a fallback such as gen_s is read only where these
# say nothing, and reward_error only where reward_status says an error): `rlscope diagnose` starts
# reading them before it imports the analysis
ANALYZED_TRAJECTORIES = (
    "step",
    "finish_time",
    "aborted",
    "engine",
    "response_tokens",
    "trainer_version",
    "policy_version_start",
    "data_source",
    "reward",
    "reward_status",
)

GPU = pa.schema(
    [
        pa.field("time", pa.float64(), nullable=False),  # unix seconds
        pa.field("host", pa.string()),
        pa.field("gpu", pa.int32()),
        pa.field("role", pa.string()),
        pa.field("util_pct", pa.float64()),  # NVML utilization.gpu, 0-100
        pa.field("mem_used_bytes", pa.int64()),
        pa.field("mem_total_bytes", pa.int64()),
        pa.field("power_w", pa.float64()),
        pa.field("sm_clock_mhz", pa.float64()),
    ]
)

# |log p_trainer - log p_rollout| histogram: bin 0 is [0, 1e-7), then 4 bins per decade up to
# 1e2, and a last bin [1e2, inf). Fixed edges make histograms of different steps addable.
LOGPROB_BINS_PER_DECADE = 4
LOGPROB_BIN_EDGES: np.ndarray = np.concatenate([[0.0], np.logspace(-7, 2, 9 * LOGPROB_BINS_PER_DECADE + 1), [np.inf]])
LOGPROB_QUANTILES: tuple[float, ...] = (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)
IS_WEIGHT_CAP = 2.0  # truncated importance sampling: w = min(p_trainer / p_rollout, 2)

LOGPROB = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("attempt", pa.int32()),  # as in steps: the restarted run's attempt that measured it
        pa.field("time", pa.float64()),
        pa.field("source", pa.string()),  # who measured it, e.g. "recorder", "verl-hook"
        pa.field("n_tokens", pa.int64()),
        pa.field("abs_counts", pa.list_(pa.int64())),  # len(LOGPROB_BIN_EDGES) - 1 counts
        pa.field("quantiles", pa.list_(pa.float64())),  # signed delta at LOGPROB_QUANTILES
        pa.field("mean", pa.float64()),
        pa.field("abs_mean", pa.float64()),
        pa.field("abs_max", pa.float64()),
        pa.field("is_clipped", pa.int64()),  # tokens whose IS weight exp(delta) exceeds the cap
    ]
)


# One row per job of the run (a first run, a resume, a restart), written once by the process
# that starts it (the driver): the stall clock times a job's warm-up and first step from it.
JOBS = pa.schema(
    [
        pa.field("time", pa.float64(), nullable=False),  # unix seconds when the job started
        pa.field("host", pa.string()),
        pa.field("pid", pa.int64()),
    ]
)

# How far past the clock reading it a job start may lie: a start later than that is a wrong clock
# (milliseconds for seconds, a skewed host), refused by the Recorder and not served by the exporter
# until its clock gets there, as it would hold the stall clock and the GPU-idle alert off until
# then. One minute is well above the skew of hosts kept by NTP (milliseconds) and bounds what a
# start served early holds off to a minute, under the stall alert's 5-minute "for".
JOB_START_SKEW_SECONDS = 60.0


def whole_histograms(rows: pa.Table) -> tuple[pa.Table, int]:
    """The ``logprob`` rows whose ``abs_counts`` hold one count per bin, and how many did not.

    Histograms are added bin by bin: a row with a missing or wrongly sized histogram (another
    writer's bins, a truncated list) would break the sum, so readers leave it out and say so.
    """
    import pyarrow.compute as pc  # here: a command reading a run starts before its 0.07 s import

    lengths = pc.list_value_length(rows.column("abs_counts"))
    whole = pc.fill_null(pc.equal(lengths, len(LOGPROB_BIN_EDGES) - 1), False)
    kept = rows.filter(whole)
    return kept, rows.num_rows - kept.num_rows


TABLES: dict[str, pa.Schema] = {
    "steps": STEPS,
    "spans": SPANS,
    "trajectories": TRAJECTORIES,
    "gpu": GPU,
    "logprob": LOGPROB,
    "jobs": JOBS,
}
