"""``verl.utils.tracking.Tracking``: every metric dict the trainer logs, and meta from its config.

``Tracking.log(data, step)`` is where verl's trainers hand each step's metrics to wandb,
console, ... ; it is also the one place that says which step the trainer is on, so the
spans and logprob deltas held since the previous call are stamped with this step here.
``Tracking.__init__`` receives the whole resolved config, from which the batch shape and
GPU count go to meta.json; only the driver builds a Tracking, once per job, so it also
records the job's start there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from rlscope.collectors.verl._hook import Hook
from rlscope.collectors.verl_config import meta_from_config

__all__ = ["wrap_init", "wrap_log"]


def _after_log(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        data = kwargs["data"] if "data" in kwargs else args[0]
        step = kwargs["step"] if "step" in kwargs else args[1]
        hook.on_log(step, data)
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("metrics", exc)


def _after_init(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        hook.read_prior_steps(starts_job=True)  # a resumed run: which steps are already on disk, before the first log
        config = kwargs["config"] if "config" in kwargs else (args[3] if len(args) > 3 else None)
        if isinstance(config, Mapping):
            hook.update_meta(meta_from_config(config))
    except Exception as exc:  # noqa: BLE001
        hook.fault("meta", exc)
    try:
        hook.log_job_start()  # the stall clock times this job's warm-up and first step from it
    except Exception as exc:  # noqa: BLE001
        hook.fault("job", exc)
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
