"""verl's agent loop: one trajectories row per sample, before verl reduces them to min/mean/max.

Each agent-loop worker (a Ray actor) runs one ``_run_agent_loop`` per sample, which hands
the sample's ``AgentLoopOutput`` (token ids, turns, reward, ``AgentLoopMetrics`` with
``generate_sequences`` / ``tool_calls`` / ``compute_score`` seconds and ``num_preempted``)
to ``_agent_loop_postprocess``. verl then keeps only batch statistics
(``agent_loop/*/{min,mean,max}`` in the legacy trainer, nothing in the v1 trainer). The
hook wraps ``_run_agent_loop`` to learn the sample's step and start time (a context
variable, so concurrent samples in one event loop stay apart) and each class's
``_agent_loop_postprocess`` to write the row once the reward is in. Validation samples are
skipped: the trajectories table describes training steps. So are the samples of verl's fully
async rollouter, which carry no training step: its trainer writes their rows when it takes them
(``_consumed``).

The one-step-off trainer starts the generation of step s + 1's batch during step s, before it
advances ``global_steps``, so its batches carry the tags 1, 1, 2, 3, ... (k, k, k + 1, ... when
resumed from step k - 1's checkpoint). The hook also wraps ``AgentLoopWorker.generate_sequences``,
which each worker runs once per batch, one training batch after another, and files a batch under
the step that trains it: its tag for the first training batch the worker gets, the tag + 1 after.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rlscope.collectors.verl._hook import Hook

__all__ = ["group_of", "trajectory_rows", "wrap_generate_sequences", "wrap_postprocess", "wrap_run_agent_loop"]

_MAX_ORIGINS = 256  # steps whose rollout start this process remembers


@dataclass
class _Sample:
    step: Any
    validate: bool
    sample_index: Any
    rollout_n: Any
    submit: float
    batch_step: int | None = None  # the step a one-step-off batch is filed under
    captured: bool = False


_current: contextvars.ContextVar[_Sample | None] = contextvars.ContextVar("rlscope_verl_sample", default=None)
_batch_step: contextvars.ContextVar[int | None] = contextvars.ContextVar("rlscope_verl_batch_step", default=None)
_origins: dict[int, float] = {}
_origins_lock = threading.Lock()
_started: weakref.WeakSet[Any] = weakref.WeakSet()  # one-step-off workers that have had a training batch
_started_lock = threading.Lock()


def _origin(step: int, when: float) -> float:
    """When this process saw the step's first sample start: the zero of submit/finish times."""
    with _origins_lock:
        if step not in _origins:
            _origins[step] = when
            while len(_origins) > _MAX_ORIGINS:
                del _origins[next(iter(_origins))]
        return _origins[step]


def _step_of(value: Any) -> int | None:
    """A step as verl hands it over: an int, a 0-d tensor or array, or tensordict's NonTensorData."""
    for candidate in (value, getattr(value, "data", None)):
        try:
            step = int(candidate)
            break
        except (TypeError, ValueError):
            continue
    else:
        return None
    return step if step >= 0 else None  # verl passes -1 when it has no step


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def group_of(uid: Any) -> int | None:
    """A prompt's G samples share their uid; the group column wants an int64."""
    if uid is None:
        return None
    return int.from_bytes(hashlib.blake2b(str(uid).encode(), digest_size=8).digest(), "big", signed=True)


def _seconds(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def trajectory_rows(
    outputs: list[Any],
    sample: Mapping[str, Any],
    submit: float | None,
    finish: float,
    origin: float,
    index: Any,
    trainer_version: int | None = None,
) -> list[dict[str, Any]]:
    """Rows of the trajectories table for one sample's agent-loop output(s)."""
    uid = sample.get("uid")
    second = next((sample[k] for k in ("session_id", "priority") if sample.get(k) is not None), index)
    rows = []
    for i, out in enumerate(outputs):
        metrics = _field(out, "metrics")
        extra = _field(out, "extra_fields") or {}
        preempted = _field(metrics, "num_preempted")
        reward = _field(out, "reward_score")
        parts = [uid if uid is not None else "", second]
        if len(outputs) > 1:
            parts.append(i)
        rows.append(
            {
                "traj_id": "_".join(str(p) for p in parts),
                "group": group_of(uid),
                "data_source": None if sample.get("data_source") is None else str(sample["data_source"]),
                "prompt_tokens": len(_field(out, "prompt_ids") or ()),
                "response_tokens": len(_field(out, "response_ids") or ()),
                "turns": _field(out, "num_turns"),
                "preemptions": preempted if isinstance(preempted, int) and preempted >= 0 else None,
                "gen_s": _field(metrics, "generate_sequences"),
                "tool_s": _field(metrics, "tool_calls"),
                "reward_s": _seconds(_field(metrics, "compute_score")),
                "submit_time": None if submit is None else submit - origin,
                "finish_time": finish - origin,
                "policy_version_start": extra.get("min_global_steps"),
                "policy_version_end": extra.get("max_global_steps"),
                "trainer_version": trainer_version,
                "reward": None if reward is None else float(reward),
                "reward_status": None if reward is None else "ok",
            }
        )
    return rows


def _v1_mode(config: Any) -> Any:
    return _field(_field(_field(config, "trainer"), "v1"), "trainer_mode")


def _one_step_off(config: Any) -> bool:
    """The one-step-off trainer's config (seen by the legacy worker): a rollout pool of its own, and
    not the fully async trainer's (which also has one)."""
    return _field(config, "rollout") is not None and _field(config, "async_training") is None


def _capture(hook: Hook, config: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    output = kwargs["output"] if "output" in kwargs else args[0]
    validate = kwargs["validate"] if "validate" in kwargs else args[1]
    sample = _current.get()
    if validate or (sample is not None and (sample.validate or sample.captured)):
        return
    if sample is not None:
        sample.captured = True  # a subclass that calls super() must not write the sample twice
    step = _step_of(kwargs.get("global_steps"))  # the v1 worker's, else the legacy worker's
    v1 = step is not None or "global_steps" in kwargs
    if not v1 and _field(config, "async_training") is not None:  # the legacy worker under the fully async rollouter
        # Which update trains on the sample is decided later by the trainer, which writes its
        # row when it takes the sample (_consumed): nothing here, so it is recorded once.
        return
    one_step_off = not v1 and _one_step_off(config)
    if one_step_off:  # the batch's tag is not the step that trains it: _enter_batch worked that out
        step = None if sample is None else sample.batch_step
        if step is None and sample is not None and _step_of(sample.step) is not None:
            hook.fault(
                "trajectories",
                LookupError(
                    "a one-step-off sample that did not come through AgentLoopWorker.generate_sequences: "
                    "the step that trains it is unknown; not recorded"
                ),
            )
            return
    elif step is None and sample is not None:
        step = _step_of(sample.step)
    if step is None:  # no training step, outside the fully async trainer: nothing to file it under
        hook.fault("trajectories", LookupError("an agent-loop sample carries no training step; not recorded"))
        return
    finish = time.time()
    submit = sample.submit if sample is not None else None
    index = f"{sample.sample_index}_{sample.rollout_n}" if sample is not None else None
    outputs = output if isinstance(output, list) else [output]
    # a synchronous trainer trains step s on step s's own samples, from the version synced at the
    # end of step s - 1 (verl: trajectory_staleness = (global_steps - 1) - version); the v1 async
    # modes train on samples of earlier steps, chosen after the row is written, a v1 config naming
    # no mode says nothing of which update takes the sample, and the one-step-off trainer labels
    # its weights one ahead (it syncs the weights of s - 1 updates as version s)
    synchronous = _v1_mode(config) == "sync" if v1 else not one_step_off
    version = step - 1 if synchronous else None
    for row in trajectory_rows(outputs, kwargs, submit, finish, _origin(step, submit or finish), index, version):
        hook.log_trajectory(step, row)


def _enter_sample(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> contextvars.Token | None:
    try:
        info = kwargs["trajectory"] if "trajectory" in kwargs else args[1]
        sample = _Sample(
            info.get("step"),
            bool(info.get("validate")),
            info.get("sample_index"),
            info.get("rollout_n"),
            time.time(),
            _batch_step.get(),
        )
        step = sample.batch_step if sample.batch_step is not None else _step_of(sample.step)
        if step is not None and not sample.validate:
            _origin(step, sample.submit)
        return _current.set(sample)
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("trajectories", exc)
        return None


def _leave_sample(token: contextvars.Token | None) -> None:
    if token is not None:
        _current.reset(token)


def _enter_batch(hook: Hook, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> contextvars.Token | None:
    """A one-step-off worker's training batch: the step that trains it, for its samples' tasks."""
    try:
        if not _one_step_off(getattr(worker, "config", None)):
            return None
        meta = (kwargs["batch"] if "batch" in kwargs else args[0]).meta_info
        tag = _step_of(meta.get("global_steps"))
        if meta.get("validate") or tag is None:
            return None
        with _started_lock:  # verl awaits each training batch before it starts the next one
            first = worker not in _started
            _started.add(worker)
        return _batch_step.set(tag if first else tag + 1)
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("trajectories", exc)
        return None


def _leave_batch(token: contextvars.Token | None) -> None:
    if token is not None:
        _batch_step.reset(token)


def _after_postprocess(hook: Hook, worker: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        _capture(hook, getattr(worker, "config", None), args, kwargs)
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("trajectories", exc)


# Wrapper bodies call only module-level helpers: Ray pickles an actor class that is not
# importable by name (verl's v1 worker is decorated with @ray.remote) by value, methods too.


def wrap_run_agent_loop(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _run_agent_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _enter_sample(hook, args, kwargs)
        try:
            return await original(self, *args, **kwargs)
        finally:
            _leave_sample(token)

    return _run_agent_loop


def wrap_generate_sequences(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def generate_sequences(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _enter_batch(hook, self, args, kwargs)
        try:
            return await original(self, *args, **kwargs)
        finally:
            _leave_batch(token)

    return generate_sequences


def wrap_postprocess(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _agent_loop_postprocess(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        _after_postprocess(hook, self, args, kwargs)
        return result

    return _agent_loop_postprocess
