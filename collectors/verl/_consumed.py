"""The fully async trainer: one trajectories row per sample, written when the trainer takes it.

verl's fully async rollouter generates samples with no training step: the trainer picks them
later from its message queue, and only then is it known which update trains on them. So their
rows are written in the trainer's process, in ``FullyAsyncTrainer._collect_metrics_from_samples``,
which holds the batch assembled from the queue and ``current_param_version``, the version of
the weights the update starts from, which verl itself counts staleness against.

Only what verl hands the trainer is recorded; what stays in the agent-loop worker (submit and
finish times, preemptions, scoring seconds) is left empty. The rollouter's agent-loop worker
writes no row (``_agent_loop``), so each sample is recorded once.

The other async trainers (one-step-off, the v1 ``separate_async`` and ``colocate_async``
modes) keep their rows on the worker's side, where the data source, reward and finish times
are: their trainers hold too little of a sample to replace them (the v1 trainer only
TransferQueue keys and lengths), and two rows per sample would count it twice.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from rlscope.collectors.verl._agent_loop import group_of
from rlscope.collectors.verl._hook import Hook

__all__ = ["dataproto_rows", "wrap_collect_metrics_from_samples"]


def _column(values: Any, n: int) -> list[Any]:
    if values is None:
        return [None] * n
    out = []
    for value in list(values)[:n]:
        value = value.item() if isinstance(value, np.generic) else value
        out.append(value)
    return out + [None] * (n - len(out))


def _number(value: Any, kind: type) -> Any:
    if value is None or isinstance(value, bool):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError):
        return None


def _versions(value: Any) -> int | None:
    version = _number(value, int)
    return version if version is not None and version >= 0 else None


def dataproto_rows(batch: Any, trainer_version: int | None) -> list[dict[str, Any]]:
    """Rows for the samples of a verl ``DataProto`` the trainer consumes (legacy agent-loop
    layout: left-padded ``prompts``, ``attention_mask`` over prompt + response, per-sample
    non-tensor fields). ``traj_id`` is ``<uid>_<j>``, ``j`` the sample's position among its
    prompt's samples in the batch as the trainer holds it."""
    tensors, extra = batch.batch, batch.non_tensor_batch
    n = len(batch)
    uids = _column(extra.get("uid"), n)
    prompt_width = tensors["prompts"].shape[-1]
    mask = tensors["attention_mask"]
    prompt_tokens = mask[:, :prompt_width].sum(-1).tolist()
    response_tokens = mask[:, prompt_width:].sum(-1).tolist()
    keys = set(tensors.keys())
    rewards = tensors["rm_scores"].sum(-1).tolist() if "rm_scores" in keys else [None] * n
    sources = _column(extra.get("data_source"), n)
    turns = _column(extra.get("__num_turns__"), n)
    gen = _column(extra.get("processing_times"), n)  # the fully async trainer's copy of generate_sequences
    tool = _column(extra.get("tool_calls_times"), n)
    start, end = _column(extra.get("min_global_steps"), n), _column(extra.get("max_global_steps"), n)
    seen: Counter = Counter()
    rows = []
    for i in range(n):
        uid = uids[i]
        j = seen[uid]
        seen[uid] += 1
        reward = rewards[i]
        rows.append(
            {
                "traj_id": f"{'' if uid is None else uid}_{j}",
                "group": group_of(uid),
                "data_source": None if sources[i] is None else str(sources[i]),
                "prompt_tokens": int(prompt_tokens[i]),
                "response_tokens": int(response_tokens[i]),
                "turns": _number(turns[i], int),
                "gen_s": _number(gen[i], float),
                "tool_s": _number(tool[i], float),
                "policy_version_start": _versions(start[i]),
                "policy_version_end": _versions(end[i]),
                "trainer_version": trainer_version,
                "reward": None if reward is None else float(reward),
                "reward_status": None if reward is None else "ok",
            }
        )
    return rows


def _log(hook: Hook, step: int, rows: list[dict[str, Any]]) -> None:
    if rows:
        hook.log_trajectories(step, rows)


def _after_collect(hook: Hook, trainer: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """The fully async trainer took a batch from the message queue. Its update starts from
    ``current_param_version`` (verl counts a sample stale when ``current_param_version -
    version >= 1``); the sync cycle ends by raising that version by one and logging under it,
    so the rows go under ``current_param_version + 1``."""
    try:
        batch = args[0] if args else kwargs["batch"]
        version = int(trainer.current_param_version)
        _log(hook, version + 1, dataproto_rows(batch, version))
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("trajectories", exc)


def wrap_collect_metrics_from_samples(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _collect_metrics_from_samples(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        _after_collect(hook, self, args, kwargs)
        return result

    return _collect_metrics_from_samples
