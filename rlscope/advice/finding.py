"""What an analyzer concludes: a Finding with a stable id, a severity, its numbers and what to do."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["Finding", "Severity", "fmt_count", "fmt_last_steps", "fmt_seconds", "fmt_steps"]


def fmt_seconds(value: float) -> str:
    """Seconds as a recommendation writes them, and every report: whole seconds from 100 s
    (1,449), else three significant figures (a 5 s step's 2.2 s tail is not "2 s of 5 s"), a
    trailing zero kept unless the time is exact (48.03 s beside 48.7 s is "48.0", not "48"; 8 s is "8")."""
    if not math.isfinite(value):
        return "?"
    if abs(value) < 0.005:  # nothing to speak of: not 1.23e-05, nor -0
        return "0"
    if abs(value) >= 99.5:
        return f"{value:,.0f}"
    short = f"{value:.3g}"
    return short if math.isclose(float(short), value, rel_tol=1e-9) else f"{value:#.3g}"  # float noise is exact


def fmt_count(count: float, noun: str) -> str:
    """A whole count with its noun, singular for one: "1 GPU", "8 GPUs"; never "GPU(s)" or "1 GPUs"."""
    return f"{count:.0f} {noun}" + ("" if round(count) == 1 else "s")


def fmt_steps(count: float) -> str:
    """A whole count of steps with its noun, "1 step" or "2 steps": never "1 step(s)"."""
    return fmt_count(count, "step")


def fmt_last_steps(count: float) -> str:
    """The most recent steps, "the last step" or "the last 2 steps": never "the last 1 step"."""
    return "the last step" if round(count) == 1 else f"the last {fmt_steps(count)}"


class Severity(str, Enum):
    """How urgent a finding is; compares by urgency (``INFO < WARN < CRITICAL``)."""

    INFO = "info"
    WARN = "warn"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank <= other.rank

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank >= other.rank


_RANK = {Severity.INFO: 0, Severity.WARN: 1, Severity.CRITICAL: 2}


@dataclass(frozen=True)
class Finding:
    """One conclusion about a run, with the numbers that justify it.

    ``id`` is stable across releases: it names the runbook section (and alert anchor) in
    :mod:`rlscope.advice.catalogue`. ``evidence`` holds the measured or predicted numbers
    the title and recommendation were written from, so reports can show and re-check them.
    """

    id: str
    severity: Severity
    title: str
    evidence: dict[str, Any] = field(default_factory=dict)
    recommendation: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (severity as its string value)."""
        return {
            "id": self.id,
            "severity": self.severity.value,
            "title": self.title,
            "evidence": dict(self.evidence),
            "recommendation": self.recommendation,
        }
