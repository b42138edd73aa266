"""``verl.utils.tracking.Tracking``: every metric dict the trainer logs, and meta from its config.

``Tracking.log(data, step)`` is where verl's trainers hand each step's metrics to wandb,
console, ... ; it is also the one place that says which step the trainer is on, so the
spans and logprob deltas held since the previous call are stamped with this step here.
``Tracking.__init__`` receives the whole resolved config, from which the batch shape and
GPU count go to meta.json.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from rlscope.collectors.verl._hook import Hook

__all__ = ["meta_from_config", "wrap_init", "wrap_log"]


def _get(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def meta_from_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The meta.json fields a verl PPO config states outright; anything it does not state stays absent."""
    meta: dict[str, Any] = {}
    batch = _int(_get(cfg, "data.train_batch_size"))
    group = _int(_get(cfg, "actor_rollout_ref.rollout.n"))
    max_response = _int(_get(cfg, "data.max_response_length")) or _int(
        _get(cfg, "actor_rollout_ref.rollout.response_length")
    )
    nodes, per_node = _int(_get(cfg, "trainer.nnodes")), _int(_get(cfg, "trainer.n_gpus_per_node"))
    model = _get(cfg, "actor_rollout_ref.model.path")
    if batch:
        meta["batch_size"] = batch
    if group:
        meta["group_size"] = group
    if max_response:
        meta["max_response_length"] = max_response
    if nodes and per_node:
        meta["gpu"] = {"count": nodes * per_node}
    if isinstance(model, str):
        meta["model"] = {"name": model}
    config = {
        key: value
        for key, value in {
            "project_name": _get(cfg, "trainer.project_name"),
            "experiment_name": _get(cfg, "trainer.experiment_name"),
            "use_v1": _get(cfg, "trainer.use_v1"),
            "trainer_mode": _get(cfg, "trainer.v1.trainer_mode"),
            "adv_estimator": _get(cfg, "algorithm.adv_estimator"),
            "rollout_name": _get(cfg, "actor_rollout_ref.rollout.name"),
            "actor_strategy": _get(cfg, "actor_rollout_ref.actor.strategy"),
        }.items()
        if isinstance(value, (str, bool, int, float))
    }
    if config:
        meta["config"] = config
    return meta


def _after_log(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        data = kwargs["data"] if "data" in kwargs else args[0]
        step = kwargs["step"] if "step" in kwargs else args[1]
        hook.on_log(step, data)
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("metrics", exc)


def _after_init(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        config = kwargs["config"] if "config" in kwargs else (args[3] if len(args) > 3 else None)
        if isinstance(config, Mapping):
            hook.update_meta(meta_from_config(config))
    except Exception as exc:  # noqa: BLE001
        hook.fault("meta", exc)
    try:
        hook.start_services()
    except Exception as exc:  # noqa: BLE001 - a busy port or a bad setting never stops training
        hook.fault("services", exc)


# Wrapper bodies call only module-level helpers: a wrapper may be pickled by value (see Hook).


def wrap_log(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def log(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _after_log(hook, args, kwargs)
        return result

    return log


def wrap_init(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _after_init(hook, args, kwargs)

    return __init__
