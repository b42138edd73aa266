"""The records verl 0.9.1's fully async trainer hands ``Tracking.log``, in its order, for tests.

fully_async_trainer.py ``fit_step``: the update ends by moving ``current_param_version`` on
(``_fit_update_local_step``); a weight sync (every ``sync_every`` updates) logs the rollouter's
window since the last sync under the new version (``_fit_update_weights``, the dict of
``reset_staleness``), then validation when due, then the ``MetricsAggregator``'s record of the
micro-steps added so far (``_fit_log_aggregated_training_metrics``), and only then this
update's metrics join the aggregator (``_fit_postprocess_step``). When the queue ends, ``fit``
syncs once more and logs the rest when it ends right after a sync of a version ``test_freq`` does
not divide (``current_param_version % test_freq != 0``: never for ``test_freq=-1``).

Each update times its training compute and allocation (``_record_train_resource_utilization``),
so the aggregator's record repeats the rollouter window's
``dynamic_resource/rollout_resource_utilization`` beside the cycle's utilizations
(``MetricsAggregator._special_metrics_aggergate``, the trainer's and rollout nodes' GPUs).
"""

from __future__ import annotations

from typing import Any

HYBRID_GPUS, STANDALONE_GPUS = 8, 8  # trainer.nnodes * n_gpus_per_node, rollout.nnodes * n_gpus_per_node
_SUMMED = ("dynamic_resource/train_compute_time_s", "dynamic_resource/train_allocated_time_s")


def update_metrics(update: int, version: int) -> dict[str, float]:
    """One update's own metrics (``fit_step``'s ``self.metrics``), numbers made from ``update``."""
    gen, step = 5.0 + update, 100.0 * update
    return {
        "training/global_step": float(update),
        "training/epoch": 0.0,
        "fully_async/count/current_param_version": float(version),
        "timing_s/gen": gen,
        "timing_s/update_actor": step / 2,
        "timing_s/step": step,
        "actor/pg_loss": -0.01 * update,
        "dynamic_resource/train_compute_time_s": step / 2,
        "dynamic_resource/train_allocated_time_s": step,
    }


def rollouter_window(version: int, *, last: bool = False) -> dict[str, float]:
    """The rollouter's window up to the sync that made ``version`` (``reset_staleness``)."""
    idle = 0.9 if last else 0.1 * version
    return {
        "fully_async/rollouter/active_time": 10.0 * (1 - idle),
        "fully_async/rollouter/version_time": 10.0,
        "fully_async/rollouter/idle_ratio": idle,
        "fully_async/rollouter/step_generated_samples": 64.0,
        "dynamic_resource/rollout_resource_utilization": 1 - idle,
    }


def aggregated(micro: list[dict[str, float]], rollout_utilization: float | None = None) -> dict[str, float]:
    """``MetricsAggregator.get_aggregated_metrics`` of these micro-steps: timers and the training
    compute and allocation summed, the version and global step last, the rest averaged, the
    trainer's idle ratio gen / step, and the utilizations; with the rollouter window's
    utilization given, it and the cluster's (no ``wait_for_enough_samples``: the hybrid GPUs train)."""
    out: dict[str, float] = {}
    for key in micro[0]:
        values = [m[key] for m in micro]
        if key.startswith("timing_s/") or key in _SUMMED:
            out[key] = sum(values)
        elif key in ("fully_async/count/current_param_version", "training/global_step"):
            out[key] = values[-1]
        else:
            out[key] = sum(values) / len(values)
    out["fully_async/trainer/idle_ratio"] = out["timing_s/gen"] / out["timing_s/step"]
    train = out["dynamic_resource/train_resource_utilization"] = out[_SUMMED[0]] / out[_SUMMED[1]]
    if rollout_utilization is not None:
        out["dynamic_resource/rollout_resource_utilization"] = rollout_utilization
        gpus = HYBRID_GPUS + STANDALONE_GPUS
        out["dynamic_resource/resource_utilization"] = (
            HYBRID_GPUS * train + STANDALONE_GPUS * rollout_utilization
        ) / gpus
    return out


def fully_async_records(updates: int, *, sync_every: int = 1, test_freq: int = 2) -> list[tuple[int, dict[str, Any]]]:
    """``(step, data)`` of every ``Tracking.log`` call of a run of ``updates`` updates."""
    records: list[tuple[int, dict[str, Any]]] = []
    micro: list[dict[str, float]] = []
    version, local = 0, 1

    def sync(*, last: bool = False) -> None:
        nonlocal micro
        window = rollouter_window(version, last=last)
        records.append((version, window))
        if test_freq > 0 and version % test_freq == 0 and not last:  # _fit_validate
            records.append((version, {"rollouter/validate_time": 3.0, "val-core/acc": 0.01 * version}))
        if micro:
            records.append((version, aggregated(micro, window["dynamic_resource/rollout_resource_utilization"])))
        micro = []

    for update in range(1, updates + 1):
        own = update_metrics(update, version)
        if local < sync_every:
            local += 1
        else:
            version, local = version + 1, 1
            sync()
        micro.append(own)
    if version % test_freq != 0 and local == 1:
        sync(last=True)
    return records
