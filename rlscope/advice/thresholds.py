"""Named thresholds behind every finding, each with the fact that sets it.

Analyzers compare against these names, never against bare numbers, so a report (or an
alert rule) can say which threshold fired, and a team can tune one in a single place.
Shares are fractions (0.3 = 30%); speedups are ratios of step times.
"""

from __future__ import annotations

__all__ = [
    "ASYNC_SPEEDUP_INFO",
    "ASYNC_SPEEDUP_WARN",
    "DROP_LENGTH_BIAS_WARN",
    "DROP_SHARE_MIN",
    "ENGINE_CV_CRITICAL",
    "ENGINE_CV_WARN",
    "GENERATION_SHARE_GROWTH_WARN",
    "GENERATION_SHARE_INFO",
    "GPU_IDLE_SHARE_CRITICAL",
    "GPU_IDLE_SHARE_WARN",
    "GPU_IDLE_UTIL_PCT",
    "IDLE_RATIO_HIGH",
    "IDLE_RATIO_LOW",
    "IS_CLIP_SHARE_WARN",
    "LONG_TAIL_CRITICAL",
    "LONG_TAIL_GROWTH_WARN",
    "LONG_TAIL_WARN",
    "MFU_CROSSCHECK_RATIO",
    "MISMATCH_CRITICAL_FACTOR",
    "MISMATCH_LEVEL_BF16",
    "MISMATCH_LEVEL_FP8",
    "MOE_FLIP_DELTA",
    "OVERLAPPING_TIMERS_TOLERANCE",
    "RECENT_FRACTION",
    "REWARD_COLLAPSE_MIN_SAMPLES",
    "REWARD_ERROR_CRITICAL",
    "REWARD_ERROR_WARN",
    "REWARD_ZERO_COLLAPSE",
    "REWARD_ZERO_RISE_MIN",
    "SPLIT_GAIN_MIN",
    "STALENESS_DROP_THRESHOLD",
    "STALENESS_P90_WARN",
    "STALENESS_UNEXPLAINED_VERSIONS",
    "STALE_FOR_MISMATCH",
    "SWITCHING_WARN",
    "SYNC_BUBBLE_CRITICAL",
    "SYNC_BUBBLE_WARN",
    "UNTRACKED_TIME_WARN",
]

# The "current" state of a run is its last quarter of steps: response length (and with it
# the split) drifts during training, so a whole-run average describes no step that exists.
RECENT_FRACTION = 0.25

# Tail share f = T_tail / (T_thr + T_tail). The slowest 10% of requests taking half of the
# rollout (ThunderSyncRL on SWE-smith) is the bad case; a third is what a mild L_max/L = 4
# reasoning run already shows (8B example: 196 s of 602 s).
LONG_TAIL_WARN = 0.30
LONG_TAIL_CRITICAL = 0.50
# A tail share that grows 10 points between the first and last quarter of the run.
LONG_TAIL_GROWTH_WARN = 0.10

# Rollout takes 60-80% of wall-clock in public reports: above 60% generation is the lever.
GENERATION_SHARE_INFO = 0.60
# Response length grows during training; a 10-point rise in generation share moves the split.
GENERATION_SHARE_GROWTH_WARN = 0.10
# Step time not covered by any verl stage timer: above 10% something unmeasured is costly.
UNTRACKED_TIME_WARN = 0.10
# Stage timers that add up to more than 1% over timing_s/step overlapped (below: rounding).
OVERLAPPING_TIMERS_TOLERANCE = 0.01
# Colocated memory switching is under 2% of a step when it works (32B on 8 GPUs: 6.5 s).
SWITCHING_WARN = 0.05

# Recommend moving GPUs between pools only when the model predicts at least 5% shorter steps.
SPLIT_GAIN_MIN = 0.05
# Recommend async streaming from 1.1x predicted speedup; from 1.5x it is the main lever
# (verl's fully_async runs: 1.92-2.66x on heavy-tailed 28K reasoning).
ASYNC_SPEEDUP_INFO = 1.10
ASYNC_SPEEDUP_WARN = 1.50
# verl's rule for async runs: rollouter idle high and trainer idle low -> GPUs to the trainer,
# and the reverse. A side idle 10% of the time while the other is busy (idle <= 5%) wastes a
# tenth of its GPUs.
IDLE_RATIO_HIGH = 0.10
IDLE_RATIO_LOW = 0.05

# Per-engine load coefficient of variation: online balancing reaches < 2%; Dressage saw 38%
# before balancing, which cost 38.5% of rollout throughput.
ENGINE_CV_WARN = 0.10
ENGINE_CV_CRITICAL = 0.25
# Sync bubble T_sync / (k T_mb + T_sync): the share of trainer time spent syncing weights.
SYNC_BUBBLE_WARN = 0.10
SYNC_BUBBLE_CRITICAL = 0.25

# Staleness s <= 2-4 versions with correction is reported lossless; beyond 4 say so.
STALENESS_P90_WARN = 4
# verl's default max_off_policy_threshold: samples more versions stale are dropped (or waited).
STALENESS_DROP_THRESHOLD = 8
# mean lag this many policy versions away from (generation + wait) / T_sync: the phase of the
# syncs against consumption moves the mean count by up to 0.5 either way, so 1.5 leaves at least
# one version that no phase explains
STALENESS_UNEXPLAINED_VERSIONS = 1.5
# Dropping stale samples is length-biased when the dropped ones are 20% longer than the kept.
DROP_LENGTH_BIAS_WARN = 1.20
# ... and when at least 1% of samples would be dropped.
DROP_SHARE_MIN = 0.01

# verl's perf/mfu/* and rlscope's phase MFU count FLOPs differently (attention, epochs);
# beyond a factor of 2 one of them is wrong about the model size, the GPU peak or the tokens.
MFU_CROSSCHECK_RATIO = 2.0

# -- used by the gpu_idle, mismatch and rewards analyzers ---------------------------------

# An NVML sample below 10% utilisation is an idle GPU (a decode-bound engine still shows more).
GPU_IDLE_UTIL_PCT = 10.0
# Learner GPUs idle 49.5% of each synchronous GRPO step (ThunderSyncRL), up to 81% elsewhere.
GPU_IDLE_SHARE_WARN = 0.30
GPU_IDLE_SHARE_CRITICAL = 0.50
# Normal per-token |log p_trainer - log p_rollout|: dense bf16 ~1e-3, FP8 rollout ~1e-2.
MISMATCH_LEVEL_BF16 = 1e-3
MISMATCH_LEVEL_FP8 = 1e-2
# Ten times the normal level for the precision is no longer a precision effect.
MISMATCH_CRITICAL_FACTOR = 10.0
# Samples this many policy versions stale on average (recent mean lag) hold their policy's
# drift in the trainer-rollout gap: a mismatch below the critical factor is then information.
STALE_FOR_MISMATCH = 0.5
# |delta| above 1 for single tokens: MoE routing flips (normal for MoE, a bug for dense models).
MOE_FLIP_DELTA = 1.0
# Tokens whose truncated IS weight min(w, 2) clips: above 1% the correction discards signal.
IS_CLIP_SHARE_WARN = 0.01
# Reward service error rate per source: 5% loses signal, half the samples is an outage.
REWARD_ERROR_WARN = 0.05
REWARD_ERROR_CRITICAL = 0.50
# A zero reward is legal, and a hard source scores mostly zeros all along. A collapse is a
# source that now returns zero for 90% of samples although its zero share, before the
# recent quarter of the run, was at least 30 points lower.
REWARD_ZERO_COLLAPSE = 0.90
REWARD_ZERO_RISE_MIN = 0.30
# The live exporter holds the zero steps of a collapse out of a source's baseline (so a lasting
# collapse does not become its own baseline), judging each 5-step window. A window of a few
# samples (a source scored 1-2 times a step) is all zeros by chance often enough that holding
# its steps out drags the baseline down and makes chance windows look like collapses: a window
# holds steps out only from this many scored samples (20: a window of 90% zeros from a source
# that scores zero half the time is then a 1-in-5,000 chance; of 5 samples, 1 in 32).
REWARD_COLLAPSE_MIN_SAMPLES = 20
