"""verl's metric names across versions, mapped to one canonical spelling.

verl renamed several step metrics between releases (``timing/gen`` became
``timing_s/gen``, ``mfu/actor`` became ``perf/mfu/actor``, the fully-async idle ratios
moved under ``fully_async/``). Analyzers should ask for one name whatever verl version
wrote the log, so collectors pass every key through ``canonical`` (or ``canonical_metric``,
which also rescales values whose unit changed with the name). Canonical names are the
newest verl's; a key this module does not know is kept verbatim.

Every alias below cites the verl commit and first release that dropped the old name,
from verl's own history (github.com/volcengine/verl, since moved to verl-project/verl,
read at 1dda039b9, 2026-08-22):

- ``timing/<stage>`` (the first release, 30911f133, 2024-10-31) became ``timing(s)/<stage>``
  in 018b0d736 (2025-01-17) and ``timing_s/<stage>`` in b43dcd9cf (2025-01-21), before v0.2.
- ``timing_per_token/<stage>`` in seconds per token (2856be47d, 2025-01-02) became
  ``timing_per_token(ms)/<stage>`` in milliseconds in 018b0d736 and
  ``timing_per_token_ms/<stage>`` in b43dcd9cf, before v0.2.
- ``actor/lr(1e-4)`` and ``critic/lr(1e-4)`` (the learning rate times 1e4, 30911f133) became
  ``actor/lr`` and ``critic/lr`` in 2856be47d (2025-01-02), before v0.2.
- ``mfu/actor`` and ``mfu/critic`` (41f645db7, 2025-01-19, v0.2) became ``perf/mfu/*`` in
  6133ae929 (2025-03-15), v0.3.0.
- ``critic/kl`` and ``critic/kl_coeff`` (30911f133; also in TinyZero, a v0.1 fork) became
  ``actor/reward_kl_penalty`` and ``actor/reward_kl_penalty_coeff`` in 072fc9fee (2025-04-01),
  v0.4.0.
- ``trainer/idle_ratio`` and ``rollouter/{active_time,version_time,idle_ratio}`` (the fully
  async recipe, b25bb7d4f, 2025-10-17, v0.6.1) moved under ``fully_async/`` in 9aaa5761a
  (2026-03-10), v0.7.1. ``rollouter/validate_time`` kept its name and is not an alias.
- The reference-policy stage has always been ``ref`` in verl (``_timer('ref')`` until v0.6.0,
  then ``str(Role.RefPolicy)``, which is ``"ref"``). ``ref_log_prob`` is a spelling of some
  forks outside verl; it is mapped to ``ref`` too.

- verl's fully async trainer names its weight-sync timer after the metric
  (``marked_timer("timing_s/param_sync", ...)``, fully_async_trainer.py, v0.9.1), so
  ``compute_timing_metrics`` logs ``timing_s/timing_s/param_sync``: the doubled prefix is
  dropped (``timer_stage``), giving ``timing_s/param_sync``.

verl's fully async trainer logs each update's metrics one weight sync late when it syncs after
every update: ``split_record`` files them under the update's own step (``docs/verl-hook.md``).

Not aliased on purpose: ``actor/entropy_loss`` became ``actor/entropy`` in b4aa2dce8 (v0.4.1)
but the model-engine workers log ``actor/entropy_loss`` again since f1d5e0e27 (2026-01-08).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeVar

import numpy as np

_V = TypeVar("_V")

__all__ = [
    "GLOBAL_STEP_KEY",
    "PHASES",
    "RENAMED_KEYS",
    "RENAMED_PREFIXES",
    "ROLLOUTER_PREFIX",
    "ROLLOUT_UTILIZATION_KEY",
    "SHARE_KEYS",
    "SHARE_SLACK",
    "STAGE_PHASES",
    "STEP_TIMER",
    "SUBSTAGES",
    "TRAINED_FROM_KEY",
    "canonical",
    "canonical_metric",
    "holds_training",
    "in_share_range",
    "is_rollouter_window_key",
    "is_substage",
    "is_validation_key",
    "makes_step",
    "read_rows",
    "record_trains",
    "split_record",
    "step_rows",
    "timer_stage",
    "timing_phase",
    "timing_stage",
    "training_rows",
]

# old prefix -> (canonical prefix, factor that turns an old value into the canonical unit)
RENAMED_PREFIXES: Final[dict[str, tuple[str, float]]] = {
    "timing/": ("timing_s/", 1.0),  # 30911f133 .. 018b0d736
    "timing(s)/": ("timing_s/", 1.0),  # 018b0d736 .. b43dcd9cf
    "timing_per_token/": ("timing_per_token_ms/", 1000.0),  # seconds per token, 2856be47d .. 018b0d736
    "timing_per_token(ms)/": ("timing_per_token_ms/", 1.0),  # 018b0d736 .. b43dcd9cf
    "mfu/": ("perf/mfu/", 1.0),  # 41f645db7 .. 6133ae929
}

# old key -> (canonical key, factor)
RENAMED_KEYS: Final[dict[str, tuple[str, float]]] = {
    "actor/lr(1e-4)": ("actor/lr", 1e-4),  # 30911f133 .. 2856be47d
    "critic/lr(1e-4)": ("critic/lr", 1e-4),  # 30911f133 .. 2856be47d
    "critic/kl": ("actor/reward_kl_penalty", 1.0),  # 30911f133 .. 072fc9fee
    "critic/kl_coeff": ("actor/reward_kl_penalty_coeff", 1.0),  # 30911f133 .. 072fc9fee
    "trainer/idle_ratio": ("fully_async/trainer/idle_ratio", 1.0),  # b25bb7d4f .. 9aaa5761a
    "rollouter/active_time": ("fully_async/rollouter/active_time", 1.0),  # b25bb7d4f .. 9aaa5761a
    "rollouter/version_time": ("fully_async/rollouter/version_time", 1.0),  # b25bb7d4f .. 9aaa5761a
    "rollouter/idle_ratio": ("fully_async/rollouter/idle_ratio", 1.0),  # b25bb7d4f .. 9aaa5761a
}

# stage names inside timing_s/ and timing_per_token_ms/ that other code bases spell differently
_RENAMED_STAGES: Final[dict[str, str]] = {"ref_log_prob": "ref"}

_STAGE_PREFIXES: Final = ("timing_s/", "timing_per_token_ms/")

PHASES: Final[tuple[str, ...]] = (
    "generation",  # rollout: decode on the inference engine
    "reward",  # reward functions / reward model
    "forward",  # old / ref log-probs and critic values: prefill-shaped passes
    "advantage",  # advantage estimation on the driver
    "training",  # actor and critic updates
    "weight_sync",  # moving new weights (or memory) between trainer and rollout engine
    "wait",  # a trainer or rollouter waiting for the other side
    "checkpoint",
    "validation",
    "other",  # profiling hooks, dumps, stages this table does not know
    "step",  # the whole step: the sum the other phases are part of
)

STAGE_PHASES: Final[dict[str, str]] = {
    "gen": "generation",
    "gen_max": "generation",  # REMAX greedy baseline
    "generate_sequences": "generation",
    "generate_async": "generation",
    "reshard": "generation",
    "tool_calls": "generation",
    "agent_loop": "generation",
    "reward": "reward",
    "compute_score": "reward",
    "reward_calc": "reward",
    "verify": "reward",
    "old_log_prob": "forward",
    "ref": "forward",
    "values": "forward",
    "adv": "advantage",
    "update_actor": "training",
    "update_critic": "training",
    "update_weights": "weight_sync",
    "sync_rollout_weights": "weight_sync",
    "param_sync": "weight_sync",
    "switch_to_rollout": "weight_sync",
    "switch_to_trainer": "weight_sync",
    "wait_last_valid": "wait",
    "wait_prev_gen": "wait",
    "wait_for_enough_samples": "wait",
    "switch_wait": "wait",
    "save_checkpoint": "checkpoint",
    "testing": "validation",
    "merge_val": "validation",
    "start_profile": "other",
    "stop_profile": "other",
    "dump_rollout_generations": "other",
    "step": "step",
}

# Stages timed inside another stage (the rollout worker's own timers inside ``gen``, per-sample
# agent-loop statistics): adding them to their parent would count the same seconds twice.
SUBSTAGES: Final[frozenset[str]] = frozenset(
    {"generate_sequences", "generate_async", "reshard", "tool_calls", "agent_loop"}
)

_VALIDATION_PREFIXES: Final = ("val/", "val-core/", "val-aux/")
# verl's fully async rollouter times its validation under this key, in the validation's record
_VALIDATION_KEYS: Final = frozenset({"rollouter/validate_time"})


def canonical_metric(key: str, value: float) -> tuple[str, float]:
    """The canonical name of ``key`` and ``value`` converted to that name's unit."""
    name, factor = _resolve(key)
    return name, value * factor if factor != 1.0 else value


@functools.lru_cache(maxsize=8192)
def _resolve(key: str) -> tuple[str, float]:
    """``(canonical name, unit factor)``; cached because logs repeat the same keys every step."""
    renamed = RENAMED_KEYS.get(key)
    if renamed is not None:
        return renamed
    factor = 1.0
    for old, (new, scale) in RENAMED_PREFIXES.items():
        if key.startswith(old):
            key, factor = new + key[len(old) :], scale
            break
    for prefix in _STAGE_PREFIXES:
        if key.startswith(prefix):
            head, sep, tail = timer_stage(key[len(prefix) :]).partition("/")
            key = prefix + _RENAMED_STAGES.get(head, head) + sep + tail
            break
    return key, factor


def timer_stage(name: str) -> str:
    """The stage a ``marked_timer`` name times: ``timing_s/param_sync`` (a timer named after
    its metric, as verl's fully async trainer names one) times ``param_sync``."""
    return name.removeprefix("timing_s/")


def canonical(key: str) -> str:
    """The newest verl spelling of ``key``; unknown keys come back unchanged."""
    return _resolve(key)[0]


def timing_stage(key: str) -> str | None:
    """The stage a timing key measures (``timing/gen`` -> ``gen``), or None for other keys."""
    name = canonical(key)
    for prefix in _STAGE_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :].split("/", 1)[0] or None
    return None


def timing_phase(key: str) -> str | None:
    """Which of ``PHASES`` a timing key belongs to: ``other`` for an unknown stage, None for non-timing keys."""
    stage = timing_stage(key)
    if stage is None:
        return None
    return STAGE_PHASES.get(stage, "wait" if stage.startswith("wait") else "other")


def is_substage(key: str) -> bool:
    """Whether a timing key's seconds are already counted in another stage (e.g. inside ``gen``)."""
    return timing_stage(key) in SUBSTAGES


def is_validation_key(key: str) -> bool:
    """Whether ``key`` is a validation metric (``val-core/``, ``val-aux/``, or v0.1's ``val/``), or
    the fully async rollouter's validation timer (``rollouter/validate_time``)."""
    return key.startswith(_VALIDATION_PREFIXES) or key in _VALIDATION_KEYS


STEP_TIMER: Final = "timing_s/step"
# Timers of stages that compute no part of a training step: validation, checkpointing, and the
# profiling and dump hooks verl times around them (``STAGE_PHASES``'s other known stages).
_NO_STEP_TIMERS: Final = frozenset(
    "timing_s/" + stage for stage, phase in STAGE_PHASES.items() if phase in ("validation", "checkpoint", "other")
)


def makes_step(key: str, value: Any) -> Any:
    """Whether a step metric (canonical ``key`` and its ``value``, a number or a Series of them)
    shows that its record is a training step.

    Validation metrics (``val-core/``, ..., the fully async rollouter's
    ``rollouter/validate_time``), the timers of stages that compute nothing of a step
    (``timing_s/testing``, ``merge_val``, ``save_checkpoint``, ``start_profile``,
    ``stop_profile``, ``dump_rollout_generations``) and a step timer of zero or less (it timed
    nothing) do not, whatever else of them a record holds: it is a validation or a checkpoint
    logged on its own (verl's ``val_before_train``, a resume's validation, a trainer that
    profiles its validation), no training step. Every other metric does (an unknown timer may
    be a stage of the step). The step anatomy, the exporter and the importers' summaries all
    count steps by this rule.
    """
    if key == STEP_TIMER:
        return value > 0
    return not (is_validation_key(key) or key in _NO_STEP_TIMERS)


def record_trains(metrics: Mapping[str, Any]) -> bool:
    """Whether one logged record (raw names, values of any type) is a training step by
    :func:`makes_step`, so that placing a resumed run's record of a step already trained asks
    what :func:`makes_step` counts: a validation that also timed ``testing`` repeats no training.
    A step timer whose value is no number (a collector never crashes on one) is judged by its
    name alone, as a training metric."""
    for raw, value in metrics.items():
        key = _resolve(str(raw))[0]
        if key == STEP_TIMER:
            try:
                value = float(value)
            except (TypeError, ValueError, OverflowError):
                return True
        if makes_step(key, value):
            return True
    return False


# In verl's fully async trainer, the version an update trains from; only its training record holds it
TRAINED_FROM_KEY: Final = "fully_async/count/current_param_version"
# The utilization of the rollouter's window, which verl 0.9.1's training record repeats
ROLLOUT_UTILIZATION_KEY: Final = "dynamic_resource/rollout_resource_utilization"
# verl's shares of time (canonical keys), in [0, 1] by their definitions: the trainer's gen / step,
# the rollouter's 1 - active / version time, and the occupancy share, sum dt min(1, active / capacity)
# capacity over sum dt capacity. A value outside is no measurement (a corrupted log, a unit mix-up).
SHARE_KEYS: Final = frozenset(
    {"fully_async/trainer/idle_ratio", "fully_async/rollouter/idle_ratio", ROLLOUT_UTILIZATION_KEY}
)
# How far past 0 or 1 a share may be logged and still be read (as 0 or 1): rounding, not a fault.
# verl's ratios of float64 sums overshoot by ~1e-16, but a logger that keeps float32 (TensorBoard)
# turns 1.0 into 1 + 1.2e-7 at worst; 1e-6 allows a few float32 ulps and nothing a clock could mean.
SHARE_SLACK: Final = 1e-6


def in_share_range(value: Any) -> Any:
    """Whether a value of a :data:`SHARE_KEYS` key (a number or an array of them) is a share:
    in [0, 1] up to :data:`SHARE_SLACK`; NaN and inf are not."""
    return (value >= -SHARE_SLACK) & (value <= 1 + SHARE_SLACK)


def read_rows(keys: Sequence[str | None], values: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """Which step rows say something, as every reader reads them (``docs/run-directory.md``): a
    key (the column is nullable: a row without one names no metric), a finite value (verl logs a
    timer it lost as inf), no stage timer (``timing_s/``) below zero (a clock's fault), no share of
    time (:data:`SHARE_KEYS`) outside [0, 1] beyond :data:`SHARE_SLACK` (a corrupted log, a unit
    mix-up). Row i is ``keys[index[i]]`` (any spelling: the names are canonicalised once each)
    logged as ``values[i]`` (in that spelling's unit); without ``index``, row i is ``keys[i]``.
    Judged in the canonical unit: 1e306 s per token is inf ms."""
    names, index, values = _canonical_rows(keys, values, index)
    keyed = np.array([name is not None for name in names], dtype=bool)[index]
    timer = np.array([name is not None and name.startswith("timing_s/") for name in names], dtype=bool)[index]
    share = np.array([name in SHARE_KEYS for name in names], dtype=bool)[index]
    return keyed & np.isfinite(values) & ~(timer & (values < 0)) & (~share | in_share_range(values))


def step_rows(keys: Sequence[str | None], values: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """Which step rows (as :func:`read_rows` takes them) hold a metric that makes a step
    (:func:`makes_step`), whether or not their value says something: a record with one shows
    that the trainer logged a step. A row without a key holds no metric."""
    names, index, values = _canonical_rows(keys, values, index)
    by_name = [name is not None and name != STEP_TIMER and makes_step(name, 1.0) for name in names]
    shows = np.array(by_name, dtype=bool)[index]
    timer = np.array([name == STEP_TIMER for name in names], dtype=bool)[index]
    shows[timer] = makes_step(STEP_TIMER, values[timer])  # the step timer: by its value
    return shows


def training_rows(keys: Sequence[str | None], values: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
    """Which step rows (as :func:`read_rows` takes them) train: a value that says something
    (:func:`read_rows`) of a metric that makes a step (:func:`step_rows`). A step's training
    attempt, a job's first training record and the run's first training step are the rows'
    that train, alike in ``diagnose``, the dashboard, the exporter and the importers."""
    return read_rows(keys, values, index) & step_rows(keys, values, index)


def holds_training(metrics: Mapping[str, float]) -> bool:
    """Whether one record (keys and float values) holds a row that trains (:func:`training_rows`)."""
    values = np.fromiter(metrics.values(), dtype=float, count=len(metrics))
    return bool(training_rows(list(metrics), values).any())


def _canonical_rows(
    keys: Sequence[str | None], values: np.ndarray, index: np.ndarray | None
) -> tuple[list[str | None], np.ndarray, np.ndarray]:
    """``keys`` canonicalised (None stays None), the row index (``index`` or one row per key) and
    the rows' values in their canonical units."""
    resolved = [_resolve(str(key)) if key is not None else (None, 1.0) for key in keys]
    index = np.arange(len(resolved)) if index is None else np.asarray(index)
    values = np.asarray(values, dtype=float)
    factor = np.array([scale for _, scale in resolved], dtype=float)
    if (factor != 1.0).any():
        with np.errstate(over="ignore", under="ignore"):  # a value beyond float64 in its unit is inf
            values = values * factor[index]
    return [name for name, _ in resolved], index, values


# verl's count of updates (the fully async trainer's aggregate holds its last update's)
GLOBAL_STEP_KEY: Final = "training/global_step"
# The keys the fully async rollouter alone reports of its window (the trainer repeats none of them)
ROLLOUTER_PREFIX: Final = "fully_async/rollouter/"
# What the fully async rollouter reports of its window between two weight syncs (``reset_staleness``)
_ROLLOUTER_WINDOW: Final = (ROLLOUTER_PREFIX, ROLLOUT_UTILIZATION_KEY)


def split_record(step: int, metrics: Mapping[str, _V]) -> list[tuple[int, dict[str, _V]]]:
    """The steps a record logged under ``step`` describes, each with its metrics: ``step``,
    except for the fully async trainer's training metrics, which describe the update that
    trained from their ``fully_async/count/current_param_version`` (the step after that
    version, where the hook files the update's samples).

    verl 0.9.1 logs that record (the ``MetricsAggregator``'s micro-steps) under the version the
    weight sync just made, but before it adds the current micro-step (fully_async_trainer.py
    ``fit_step``: ``_fit_log_aggregated_training_metrics`` then ``_fit_postprocess_step``): with
    a sync after every update (``trigger_parameter_sync_step=1``) the record under step k is
    update k-1's, beside the rollouter's window of update k and the validation of version k.
    The rollouter's window and validation keys stay at ``step`` (loggers that merge a step's
    records, W&B and TensorBoard, hold all three in one). With a sync every n > 1 updates the
    version is k-1 and nothing moves; nor does anything for a version that is no whole number,
    or one that would move the record forward.
    """
    version = metrics.get(TRAINED_FROM_KEY)
    try:
        trained = int(version) + 1 if version is not None and float(version) == int(version) else step
    except (TypeError, ValueError, OverflowError):
        trained = step
    if not 1 <= trained < step:
        return [(step, dict(metrics))]
    stays = {k: v for k, v in metrics.items() if _stays(str(k))}
    moves = {k: v for k, v in metrics.items() if k not in stays}
    return [(s, part) for s, part in ((step, stays), (trained, moves)) if part]


def _stays(key: str) -> bool:
    """Whether a key of a record with the fully async trainer's training metrics is the
    rollouter's window or validation, of the step logged."""
    return is_rollouter_window_key(key) or is_validation_key(canonical(key))


def is_rollouter_window_key(key: str) -> bool:
    """Whether ``key`` is of the fully async rollouter's report on its window between two weight
    syncs, which verl logs once per sync but for a last one of the same version when ``fit`` ends
    (``docs/verl-hook.md``): the hook and the importers tell that one by it."""
    return canonical(key).startswith(_ROLLOUTER_WINDOW)
