"""Number formats and headline phrases shared by the text, Markdown and HTML reports."""

from __future__ import annotations

from typing import Any

__all__ = ["generation", "gpus", "pct", "secs"]


def pct(x: float | None, digits: int = 0) -> str:
    return "n/a" if x is None else f"{x:.{digits}%}"


def secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:,.0f} s" if x >= 10 else f"{x:.1f} s"


def generation(head: dict[str, Any]) -> str:
    """Generation's part of the step; when it runs beside the step (one-step overlap, async), a
    share of the step would exceed 100%, so its seconds per batch are set against the step."""
    share, step = head["generation_share"], head["step_s"]
    if not head.get("generation_overlapped") or share is None or step is None:
        return f"{pct(share)} of each step"
    return f"{secs(share * step)} per batch, beside the step ({share:.1f}x its length)"


def gpus(run: dict[str, Any]) -> str | None:
    """ "8 x H100", or "8 (type not stated)" when the count is known but the model is not."""
    if not run.get("gpu_count"):
        return None
    kind = run.get("gpu_type")
    return f"{run['gpu_count']} x {kind}" if kind else f"{run['gpu_count']} (type not stated)"
