"""The Prometheus collector: run directories in, metric families out, at each scrape.

Design after client_python's own collectors: ``collect()`` builds fresh metric families
from state it owns, so nothing is registered per series and a series that stops existing
(a GPU gone quiet, a run renamed) simply stops being exported. The registry is injected;
tests pass a fresh ``CollectorRegistry()`` and read values with ``get_sample_value``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from rlscope.exporter._metrics import METRICS
from rlscope.exporter._state import RunState, run_label

__all__ = ["RLScopeCollector", "RunDirs", "as_run_dirs"]

RunDirs = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def as_run_dirs(run_dirs: RunDirs) -> list[str | os.PathLike[str]]:
    """One run directory or several, as a list."""
    if isinstance(run_dirs, (str, os.PathLike)):
        return [run_dirs]
    return list(run_dirs)


class RLScopeCollector(Collector):
    """Exports the metrics of ``rlscope.exporter.METRICS`` for one or more run directories.

    Each scrape refreshes every run (reading only segments added since the last refresh)
    unless the previous refresh is less than ``min_refresh_s`` old or another scrape is
    refreshing, so many scrapers cost one read and never queue behind it. ``runs`` overrides the ``run`` labels (default: each directory's name, made
    unique with ``-2``, ``-3``, ...). A run directory that does not exist yet is retried at
    each refresh and exported as ``rlscope_run_up 0``.
    """

    def __init__(
        self,
        run_dirs: RunDirs,
        *,
        registry: CollectorRegistry | None = None,
        min_refresh_s: float = 1.0,
        runs: Sequence[str] | None = None,
    ):
        dirs = as_run_dirs(run_dirs)
        if runs is not None and len(runs) != len(dirs):
            raise ValueError(f"{len(runs)} run labels for {len(dirs)} run directories")
        labels: list[str] = []
        for i, run_dir in enumerate(dirs):
            base = runs[i] if runs is not None else run_label(run_dir)
            label, n = base, 1
            while label in labels:
                n += 1
                label = f"{base}-{n}"
            labels.append(label)
        self.states = [RunState(d, label) for d, label in zip(dirs, labels, strict=True)]
        self.min_refresh_s = min_refresh_s
        self._refresh_lock = threading.Lock()
        self._refreshed = -float("inf")
        self._snapshot: list[tuple[str, list[str], float]] | None = None
        if registry is not None:
            registry.register(self)

    def describe(self) -> Iterable[Metric]:
        """The metric names, without reading any run (so registering is instant)."""
        return [spec.family() for spec in METRICS]

    def collect(self) -> Iterable[Metric]:
        """Families from the latest refresh; refreshes first when it is due and no other scrape is.

        While one scrape refreshes, concurrent scrapes answer at once from the previous
        refresh instead of queueing behind it; only the very first scrape waits.
        """
        due = time.monotonic() - self._refreshed >= self.min_refresh_s
        if due and self._refresh_lock.acquire(blocking=self._snapshot is None):
            try:
                if time.monotonic() - self._refreshed >= self.min_refresh_s:
                    for state in self.states:
                        state.refresh()
                    self._snapshot = [
                        (name, [state.run, *labels], value)
                        for state in self.states
                        for name, labels, value in state.samples()
                    ]
                    self._refreshed = time.monotonic()
            finally:
                self._refresh_lock.release()
        families = {spec.name: spec.family() for spec in METRICS}
        for name, labels, value in self._snapshot or ():
            if name in families:
                families[name].add_metric(labels, value)
            else:  # a summary's _sum or _count
                base = name.removesuffix("_sum").removesuffix("_count")
                families[base].add_metric(labels, value, suffix=name[len(base) :])
        return list(families.values())
