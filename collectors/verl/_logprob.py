"""``calculate_debug_metrics``: per-token trainer-vs-rollout logprob deltas, not just their summary.

verl calls it whenever the batch carries ``rollout_log_probs`` and logs only
``training/rollout_probs_diff_{max,mean,std}``, which are statistics of
``|exp(old_log_probs) - exp(rollout_log_probs)|``: a difference of probabilities, not of
logprobs. The wrapper takes ``old_log_probs - rollout_log_probs`` on the same tokens (the
same mask, chosen the same way) for the logprob histogram, and also the probability-space
maximum under ``CROSSCHECK_KEY`` so that a reader can check both saw the same tokens.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlscope.collectors.verl._hook import Hook

__all__ = ["token_deltas", "wrap_calculate_debug_metrics"]


def token_deltas(batch: Any) -> tuple[np.ndarray, float]:
    """(old - rollout logprob per valid response token, max |p_old - p_rollout| over those tokens)."""
    old = batch["old_log_probs"].detach().float()
    rollout = batch["rollout_log_probs"].detach().float().to(old.device)
    if "response_mask" in batch.keys():
        mask = batch["response_mask"]
    elif "attention_mask" in batch.keys():
        mask = batch["attention_mask"]
    else:
        mask = None
    if mask is None:
        valid = old.new_ones(old.shape).bool()
    else:
        valid = mask[:, -batch["responses"].size(1) :].bool().to(old.device)
    deltas = (old - rollout).masked_select(valid)
    if deltas.numel() == 0:
        return np.empty(0, np.float32), math.nan
    probs_diff_max = (old.exp() - rollout.exp()).abs().masked_select(valid).max().item()
    return deltas.cpu().numpy(), float(probs_diff_max)


def _after_debug_metrics(hook: Hook, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    try:
        data = args[0] if args else kwargs["data"]
        hook.add_logprob(*token_deltas(data.batch))
    except Exception as exc:  # noqa: BLE001 - never harm training
        hook.fault("logprob", exc)


def wrap_calculate_debug_metrics(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def calculate_debug_metrics(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        _after_debug_metrics(hook, args, kwargs)  # module-level: a wrapper may be pickled by value
        return result

    return calculate_debug_metrics
