"""Findings and what to do about them: the Finding type, named thresholds, the runbook catalogue."""

from rlscope.advice.catalogue import CATALOGUE, Entry, finding
from rlscope.advice.finding import Finding, Severity, fmt_seconds

__all__ = ["CATALOGUE", "Entry", "Finding", "Severity", "finding", "fmt_seconds"]
