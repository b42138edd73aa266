"""Live data for the dashboard: one cached view per run directory, refreshed incrementally.

A dashboard beside a training job refreshes every few seconds for days, so a refresh must
cost what the new rows cost, not what the run holds. Each refresh reads only the segments
added since the last one (``RunReader.read_new`` with one ``Cursor`` per run), recomputes the
per-step aggregates of the steps those rows touch (phase seconds, tail split, response
lengths, engine loads, staleness, rewards, log-prob histograms) and appends them. Raw rows
are kept only for the most recent ``window`` steps; the analyzers run on that window when a
page asks and something changed, and on the whole run only when the user asks. The notices
about timers logged as inf or NaN and shares of time logged outside [0, 1] cover the whole run
all the same: as steps leave the window, each key's are summed up (how many, and the first that
diagnose names).

A run directory that is empty, lacks ``meta.json`` or some tables is not an error: the view
says what is missing and picks the data up once it appears. A meta.json rewritten while the
run is shown (an import that follows a log adds each job start it finds) is read again. Rows
that arrive for a step that already left the window (a slow writer's flush, a worker's last
samples, a late validation record) come with all of that step's rows, read again from disk for
that step alone, so its aggregates are what a fresh load computes; a refresh without such rows
reads nothing more.
"""

from __future__ import annotations

import bisect
import logging
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rlscope.advice.finding import fmt_count
from rlscope.analyzers import Diagnosis, RunFacts, RunFrames, analyze_run, anatomy, drift, longtail, rewards
from rlscope.analyzers._data import (
    TRAJECTORY_COLUMNS,
    imported_job_firsts,
    last_attempt_rows,
    out_of_range_of,
    pipeline_fills,
    pivot_placed,
    placed_step_rows,
    readings_of,
    share_readings,
    timer_finiteness,
    training_records,
    unfinite_of,
    usable_step_rows,
)
from rlscope.analyzers.staleness import verl_lags
from rlscope.analyzers.topology import ROLLOUTER_IDLE, TRAINER_IDLE
from rlscope.errors import MetaError, RLScopeError, RunDirError
from rlscope.report.document import NAMED_STEPS, read_warnings
from rlscope.trace.reader import Cursor, RunReader, SegmentInfo
from rlscope.trace.schema import LOGPROB_BIN_EDGES, TABLES, TRAJECTORY_TIMES
from rlscope.trace.store import META_FILE, read_meta, require_directory

__all__ = ["WINDOW_STEPS", "LiveRun", "LiveRuns", "UnknownRun"]

log = logging.getLogger("rlscope")

WINDOW_STEPS = 50
"""Steps whose raw rows are kept and analysed live (the analyzers' "recent quarter" is then 13 steps)."""

_MIN_REFRESH_S = 0.5  # callbacks of one tick share a read
_BULK_ROWS = 500_000  # first load: rows of a table read at once, so memory stays bounded
_GPU_KEEP_S = 3600.0  # without phase spans, keep the last hour of NVML samples
_SETTLE_S = 1.0  # a folder modified this recently is listed again (coarse mtime clocks)

_COLUMNS: dict[str, list[str]] = {
    "steps": ["step", "attempt", "time", "key", "value"],
    "spans": ["step", "attempt", "phase", "role", "host", "start", "end"],
    "trajectories": sorted(
        {*TRAJECTORY_COLUMNS, "attempt", "traj_id", "data_source", "reward", "reward_status", "reward_error"},
        key=TABLES["trajectories"].names.index,
    ),
    "logprob": ["step", "attempt", "n_tokens", "abs_counts", "abs_max", "abs_mean", "is_clipped"],
    "gpu": ["time", "host", "gpu", "role", "util_pct"],
    "jobs": ["time"],
}
"""The tables the dashboard reads, and their columns (the ``jobs`` table only places each job's
first training step, an async run's pipeline fill, for the balanced split and the window's
analysis: ``LiveRun._fills``)."""
_STEP_TABLES = ("steps", "spans", "trajectories", "logprob")
_N_BINS = len(LOGPROB_BIN_EDGES) - 1


class UnknownRun(ValueError):
    """A request named a run that is not one of the dashboard's (only indices are accepted)."""


def _upsert(frame: pd.DataFrame, new: pd.DataFrame, steps: Iterable[int]) -> pd.DataFrame:
    """``frame`` with every row of ``steps`` replaced by ``new``'s rows (index: step)."""
    if frame.empty:
        return new.sort_index(kind="stable")
    kept = frame[~frame.index.isin(list(steps))]
    if new.empty:
        return kept
    out = pd.concat([kept, new])
    if not out.index.is_monotonic_increasing:
        out = out.sort_index(kind="stable")
    return out


def _empty(table: str) -> pd.DataFrame:
    return TABLES[table].empty_table().select(_COLUMNS[table]).to_pandas()


@dataclass(frozen=True)
class _Watch:
    """A table folder's (or meta.json's) mtime, and when it was listed (read): lets an idle refresh skip it."""

    mtime_ns: int
    listed_at: float


class _WindowReader(RunReader):
    """The live window's tables behind ``RunReader.read`` and ``read_available``, for analyzers
    that read tables themselves.

    ``gpu_idle``, ``mismatch`` and ``rewards`` take a ``RunReader``; this one serves the cached
    window from memory, so analysing it never touches the disk. ``RunReader.__init__`` is
    deliberately not called: there is no directory behind it.
    """

    def __init__(self, meta: dict, tables: dict[str, pa.Table]):
        self.meta = meta
        self.warnings: list[str] = []
        self._tables = tables

    def prefetch(self, *_args: object, **_kwargs: object) -> None:
        """Nothing to read in the background: the window is in memory."""

    def prefetched_segments(self, table: str) -> list[SegmentInfo] | None:
        """None: nothing is read in the background (see :meth:`prefetch`)."""
        return None

    def segments(self, table: str) -> list[SegmentInfo]:
        """The window's table as one segment in memory (reads ignore which segments they are given);
        without a footer, its trajectory times may be a clock's."""
        data = self._tables.get(table)
        clock = frozenset(TRAJECTORY_TIMES) if table == "trajectories" else frozenset()
        return (
            [SegmentInfo(table, "", data.num_rows, (), clock_times=clock)] if data is not None and data.num_rows else []
        )

    def read_available(
        self,
        table: str,
        columns: Iterable[str] | None = None,
        filter: pc.Expression | None = None,
        dictionary: Iterable[str] = (),
        segments: Sequence[SegmentInfo] | None = None,
    ) -> tuple[pa.Table, set[str]]:
        cols = self._columns(table, columns)
        data = self._tables.get(table)
        data = TABLES[table].empty_table() if data is None else data
        if filter is not None:
            data = data.filter(filter)
        data = data.select(cols)
        for name in set(dictionary) & set(cols):
            column = data.column(name)
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                data = data.set_column(cols.index(name), name, pc.dictionary_encode(column))
        return data, set()  # in memory: nothing left out


@dataclass(frozen=True)
class _PastSteps:
    """Of one timer or share of time, the steps that left the window whose latest attempt logged it
    unusable (a timer as inf or NaN, ``unfinite_of``; a share outside [0, 1], ``out_of_range_of``):
    how many (``count``), and the smallest of them in order, each with the value it logged
    (``first``: at most ``NAMED_STEPS``, enough for the notices; all of them while there are that few).

    Bounded, unlike the steps themselves, so a step past the named ones is not remembered: where a
    verdict on it changes after it left the window (a resumed job redoing it), the first one stays.
    """

    count: int = 0
    first: tuple[tuple[int, float], ...] = ()

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(step for step, _ in self.first)

    def holds(self, step: int) -> bool | None:
        """Whether ``step`` is counted; None when that cannot be told (a step past the named ones)."""
        if step in self.steps:
            return True
        if self.count == len(self.first) or (self.first and step < self.first[-1][0]):
            return False
        return None

    def with_step(self, step: int, value: float) -> _PastSteps:
        """Counting ``step`` too (named if it is among the smallest known); a named one takes ``value``."""
        if step in self.steps:  # logged again out of range: the latest value, as diagnose names it
            return _PastSteps(self.count, tuple((s, value if s == step else v) for s, v in self.first))
        complete = self.count == len(self.first)
        first = self.first
        if complete or (first and step < first[-1][0]):
            first = tuple(sorted((*first, (step, value))))[: NAMED_STEPS if complete else len(first)]
        return _PastSteps(self.count + 1, first)

    def without(self, step: int) -> _PastSteps:
        """No longer counting ``step``, one of ``first``."""
        return _PastSteps(self.count - 1, tuple((s, v) for s, v in self.first if s != step))


def _summed_up(
    past: dict[str, _PastSteps],
    leaving: dict[str, tuple[tuple[int, float], ...]],
    again: set[int],
) -> dict[str, _PastSteps]:
    """``past`` with the verdicts of the steps leaving the window (``leaving``: per key, its unusable
    steps with their values) folded in. A step in ``again`` left before and was read again whole:
    its verdict replaces the one it left with where that is known, so it is counted once, and a
    resumed job's redo of it clears it as the latest attempt decides."""
    past = dict(past)
    for key, logged in leaving.items():
        for step, value in logged:
            if step not in again:
                past[key] = past.get(key, _PastSteps()).with_step(step, value)
    values = {key: dict(logged) for key, logged in leaving.items()}
    for step in sorted(again):
        for key in past.keys() | values.keys():
            now = values.get(key, {})
            was = past[key].holds(step) if key in past else False
            if step in now and was is not None:  # counted now, or named with the redo's value
                past[key] = past.get(key, _PastSteps()).with_step(step, now[step])
            elif step not in now and was:
                past[key] = past[key].without(step)
    return {key: summary for key, summary in past.items() if summary.count}


def _whole_run(
    past: dict[str, _PastSteps], window: dict[str, tuple[tuple[int, float], ...]]
) -> tuple[dict[str, tuple[tuple[int, float], ...]], dict[str, int]]:
    """The keys logged unusable over the whole run, from the steps that left the window and those in
    it: per key, its steps in order (with their values) as far as known, and how many
    (``read_warnings``'s)."""
    named: dict[str, tuple[tuple[int, float], ...]] = {}
    counts: dict[str, int] = {}
    for key in past.keys() | window.keys():
        left, recent = past.get(key, _PastSteps()), window.get(key, ())
        # the window's steps follow every step that left it: they come next if all of those are named
        named[key] = left.first + recent if left.count == len(left.first) else left.first
        counts[key] = left.count + len(recent)
    return named, counts


def _clocked(
    known: dict[str, dict[int, float]], read: set[int], found: dict[str, tuple[tuple[int, float], ...]]
) -> dict[str, dict[int, float]]:
    """``known`` clock times per column with the verdicts on the steps whose trajectories were ``read``
    again replaced by what was ``found`` in them (a redo that logs seconds clears its step)."""
    out = {column: {s: v for s, v in steps.items() if s not in read} for column, steps in known.items()}
    for column, logged in found.items():
        out.setdefault(column, {}).update(logged)
    return out


def _valued(unfinite: dict[str, tuple[int, ...]]) -> dict[str, tuple[tuple[int, float], ...]]:
    """Timers' steps logged as inf or NaN (``unfinite_of``) in ``_PastSteps``' form: no value to name."""
    return {key: tuple((step, math.nan) for step in steps) for key, steps in unfinite.items()}


class LiveRun:
    """One run directory as the dashboard sees it: per-step aggregates plus a recent window.

    Every frame below is indexed by step (rows of one step together) and replaced, never
    mutated, by ``refresh``, so a page may keep using the frame it got while a refresh runs.
    """

    def __init__(self, index: int, path: str, label: str, window: int = WINDOW_STEPS):
        self.index = index
        self.path = path
        self.label = label
        self.window = max(1, int(window))
        self.version = 0  # bumped whenever new rows were folded in
        self.problem: str | None = "no data read yet"
        self._gone = False  # the run directory read so far was deleted
        self._refreshed = -math.inf
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        """Forget everything read: the next refresh reads the run from the start."""
        self.meta: dict = {}
        self.meta_missing = False
        self._meta_unread: str | None = None  # why a rewritten meta.json did not read (logged once)
        self._reader: RunReader | None = None
        self._cursor = Cursor()
        self._watch: dict[str, _Watch] = {}
        self._loaded = False
        self._steps: list[int] = []  # every step seen, sorted
        self._logprob_attempt: dict[int, int] = {}  # step -> attempt of its histograms in ``logprob``
        # step -> attempt of the rows held in the window (each step's highest so far), per table
        self._held_attempt: dict[str, dict[int, int]] = {"trajectories": {}, "logprob": {}}
        # raw rows of the recent window
        self._wide = pd.DataFrame(index=pd.Index([], dtype="int64", name="step"))
        self._placed = pd.DataFrame(columns=_COLUMNS["steps"])  # the long rows ``_wide`` holds
        self._job_starts: list[float] = []  # the jobs table's times
        self._records = training_records(pd.DataFrame())  # every training record of the run, with its time
        # the run's timers, whether logged finite per step and attempt: the window's usable rows drop inf and NaN
        self._finiteness = timer_finiteness(pd.DataFrame({"step": [], "key": [], "value": []}))
        # the run's shares of time, whether logged in [0, 1] per step and attempt: the window's usable rows drop the rest
        self._share_readings = share_readings(pd.DataFrame({"step": [], "key": [], "value": []}))
        # of the steps that left the window, per timer (share), how many logged it as inf or NaN (out of
        # [0, 1]) and which first
        self._past_unfinite: dict[str, _PastSteps] = {}
        self._past_out_of_range: dict[str, _PastSteps] = {}
        # per trajectory time column, the run's steps that logged a clock's time in it, with the first
        # (longtail's clock_times): one entry a step, kept after the step left the window
        self._clock_times: dict[str, dict[int, float]] = {}
        self._horizon: int | None = None  # the window's first step when raw rows were last evicted
        self._traj = _empty("trajectories").set_index("step", drop=False)
        self._spans = _empty("spans").set_index("step", drop=False)
        self._logprob_rows = _empty("logprob").set_index("step", drop=False)
        self._gpu_parts: list[pd.DataFrame] = []
        # per-step aggregates over the whole run
        self.phases = pd.DataFrame()  # anatomy.phase_seconds: phase columns, other, step
        self.tails = pd.DataFrame()  # longtail per_step (+ estimated)
        self.lengths = pd.DataFrame()  # response tokens: p10, p50, p90, max, mean
        self.engines = pd.DataFrame()  # long: step, engine, load
        self.idle = pd.DataFrame()  # trainer, rollouter idle ratios
        self.lags = pd.DataFrame()  # long: step, lag, n, tokens
        self.verl_lags = pd.DataFrame()  # verl's own lags per step (staleness.verl_lags)
        self.reward_steps = pd.DataFrame()  # rewards.analyze by_step
        self.reward_errors = pd.DataFrame()  # long: step, source, code, count
        self.logprob = pd.DataFrame()  # columns 0..bins-1: summed |delta| counts
        self._models = pd.DataFrame()  # drift ledger inputs per step
        self._splits = pd.DataFrame()  # best split per step (filled lazily)
        self._analysis: tuple[int, Diagnosis | None] = (-1, None)
        self._full: tuple[int, Diagnosis] | None = None
        self._old_step: tuple[int, pd.DataFrame] | None = None

    # -- facts --------------------------------------------------------------------------

    @property
    def facts(self) -> RunFacts:
        return RunFacts.from_meta(self.meta)

    @property
    def last_step(self) -> int | None:
        return self._steps[-1] if self._steps else None

    @property
    def n_steps(self) -> int:
        """Steps seen in any table, validation-only records included: what the window counts."""
        return len(self._steps)

    @property
    def n_trained(self) -> int:
        """Training steps, as the step anatomy (and ``rlscope diagnose``) counts them: a
        validation or checkpoint logged on its own is none."""
        return len(self.phases)

    @property
    def warnings(self) -> list[str]:
        """What ``rlscope diagnose`` reads the run with warnings about (ignored meta.json values, what its
        import left out, timers logged as inf or NaN, shares of time logged outside [0, 1], trajectory
        times logged as a clock's, unreadable segments), in its words.

        Timers and shares so logged are of the whole run: the window's steps from their rows, the
        steps that left it from ``_PastSteps`` (which may name fewer than diagnose, or still count a
        step redone since it left, see there); clock times are kept per step, as the tails are."""
        with self._lock:  # one view: a refresh on another thread replaces these frames
            reader, meta, finiteness, past = self._reader, self.meta, self._finiteness, self._past_unfinite
            readings, past_shares = self._share_readings, self._past_out_of_range
            clock = {column: tuple(sorted(steps.items())) for column, steps in self._clock_times.items() if steps}
        unreadable = list(reader.warnings) if reader is not None else []
        suspect = finiteness.loc[~finiteness["finite"].astype(bool), "step"].unique()  # each page asks: these only
        window = unfinite_of(finiteness[finiteness["step"].isin(suspect)])  # all their attempts: the latest counts
        named, counts = _whole_run(past, _valued(window))
        suspect = readings.loc[~readings["ok"].astype(bool), "step"].unique()
        shares, share_counts = _whole_run(past_shares, out_of_range_of(readings[readings["step"].isin(suspect)]))
        timers = {key: tuple(step for step, _ in logged) for key, logged in named.items()}
        return read_warnings(meta, timers, unreadable, counts | share_counts, out_of_range=shares, clock_times=clock)

    @property
    def clock_steps(self) -> frozenset[int]:
        """The steps whose trajectory times are a clock's: no finish times measured (``warnings`` says so)."""
        with self._lock:
            return frozenset(step for steps in self._clock_times.values() for step in steps)

    def unread(self, table: str) -> bool:
        """Whether some of ``table``'s data was left out because it could not be read."""
        if self._reader is None:
            return False
        folder = self._reader.location.join(table)
        return any(w.startswith(folder) for w in self._reader.warnings)

    # -- reading ------------------------------------------------------------------------

    def refresh(self, *, force: bool = False) -> bool:
        """Fold in the rows added since the last refresh, and meta.json if it was rewritten; True if
        anything changed.

        Calls within ``_MIN_REFRESH_S`` of the previous one return at once, so the callbacks
        of one tick share a read. A failing read leaves the cached view as it was and is
        retried on the next refresh. New rows that fail to fold in are logged with their
        traceback and skipped (a first load that fails starts again from nothing).
        """
        with self._lock:
            now = time.monotonic()
            if not force and now - self._refreshed < _MIN_REFRESH_S:
                return False
            self._refreshed = now
            try:
                return self._refresh()
            except (OSError, pa.ArrowException, RLScopeError) as exc:
                self.problem = (
                    f"could not read {self.label}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                )
                log.warning("dashboard: %s", self.problem)
                if not self._loaded:
                    self._reset()  # half a first load: the retry starts clean, nothing counted twice
                return False
            except Exception as exc:  # rows rlscope did not expect: keep serving what was read
                self.problem = f"could not fold in new rows of {self.label}: {type(exc).__name__}: {exc}"
                log.error("dashboard: %s", self.problem, exc_info=True)
                if not self._loaded:
                    self._reset()  # half a first load: the retry starts clean, nothing counted twice
                return False

    def _refresh(self) -> bool:
        if self.meta_missing and self._meta_appeared():
            self._reset()  # the facts (GPUs, topology) changed: rebuild every aggregate with them
        if self._reader is not None and self._deleted():
            return False
        rewritten = self._reader is not None and self._meta_rewritten()
        if self._reader is None and not self._open():
            return False
        reader = self._reader
        assert reader is not None
        if not self._loaded:
            changed = self._first_load(reader)
            self._loaded = True
        else:
            batch = {t: reader.read_new(t, self._cursor, _COLUMNS[t]) for t in _COLUMNS if self._changed(t)}
            changed = any(t.num_rows for t in batch.values())
            if changed:
                self._absorb(self._whole_late_steps(batch))
        self.problem = None if self._steps or self._gpu_parts else "no steps recorded yet"
        if changed or rewritten:
            self.version += 1
        return changed or rewritten

    def _open(self) -> bool:
        try:
            self._reader = RunReader(self.path, require_meta=False)
        except RLScopeError as exc:
            self.problem = f"waiting for data: {exc}"
            return False
        self._changed(META_FILE)  # its mtime noted before it is read: a rewrite from now on is read again
        try:
            self._reader.meta = read_meta(self._reader.location)
        except MetaError as exc:
            self.meta_missing = True
            log.info("dashboard: %s", exc)
        self.meta = dict(self._reader.meta)
        return True

    def _meta_rewritten(self) -> bool:
        """Whether meta.json was rewritten with other values since it was read, and those are taken in
        (an import that follows a log adds each job start it finds to ``importer.job_first_steps``).

        Read again only when its mtime changed (``_changed``). The importer's record changes only
        what is derived on request (pipeline fills, warnings); other values are the run's facts
        (GPUs, topology, model), which every aggregate depends on, so the run is read again with them.
        A rewrite that does not read keeps the values read before, with one warning in the log."""
        assert self._reader is not None
        if self.meta_missing or not self._changed(META_FILE):
            return False
        try:
            meta = read_meta(self._reader.location)
        except RLScopeError as exc:
            if str(exc) != self._meta_unread:
                log.warning("dashboard: %s: %s; keeping the meta.json read before", self.label, exc)
            self._meta_unread = str(exc)
            return False
        self._meta_unread = None
        if meta == self.meta:
            return False
        if _facts_of(meta) != _facts_of(self.meta):
            self._reset()  # read again from the start (``_open``) with the new facts
        else:
            self._reader.meta = meta
            self.meta = dict(meta)
        return True

    def _deleted(self) -> bool:
        """Whether the run directory was deleted: said on the page, and once in the log; what was
        read stays shown. A directory made again in its place is read from the start."""
        assert self._reader is not None
        try:
            require_directory(self._reader.location)
        except RunDirError as exc:
            if not self._gone:
                log.warning("dashboard: %s: run directory no longer exists (%s)", self.label, exc)
            self._gone = True
            self.problem = "run directory no longer exists (showing what was read before)"
            return True
        if self._gone:
            self._gone = False
            self._reset()
        return False

    def _meta_appeared(self) -> bool:
        try:
            read_meta(self.path)
        except RLScopeError:
            return False
        return True

    def _changed(self, name: str) -> bool:
        """Whether the table folder (or meta.json) ``name`` may have changed since it was last looked
        at here (always, unless it is local and settled)."""
        assert self._reader is not None
        loc = self._reader.location
        if not loc.is_local:
            return True
        try:
            mtime = os.stat(loc.join(name)).st_mtime_ns
        except OSError:
            return name in self._watch  # one that vanished: let the reader say so
        now = time.time()
        seen = self._watch.get(name)
        self._watch[name] = _Watch(mtime, now)
        if seen is None or seen.mtime_ns != mtime:
            return True
        return seen.listed_at - mtime / 1e9 < _SETTLE_S

    def _first_load(self, reader: RunReader) -> bool:
        """Read what the run holds in bounded chunks of steps, then only the recent NVML samples."""
        for table in _COLUMNS:
            self._changed(table)  # note each folder's mtime before listing it
        segments = {t: reader.segments(t) for t in _COLUMNS}
        for table, segs in segments.items():
            seen = self._cursor.seen_in(table)
            for seg in segs:
                seen.add(seg.name)
                seen.update(origin for origin, _ in seg.origins)
        present = {t: segs for t, segs in segments.items() if segs}
        datasets = {t: reader.dataset(t, segs) for t, segs in present.items()}

        def read(table: str, columns: list[str], where: pc.Expression | None = None) -> pa.Table:
            try:
                return datasets[table].to_table(columns=columns, filter=where)
            except FileNotFoundError:
                raise
            except (OSError, pa.ArrowInvalid):
                pass
            # a segment whose data does not read: the reader leaves it out with a warning, and so
            # does the rest of this load. It stays seen, so rows of it that an earlier chunk read
            # are not read twice; a dashboard started again reads it if it reads by then
            data, left_out = reader.read_available(table, columns, filter=where, segments=present[table])
            if left_out:
                present[table] = [s for s in present[table] if s.path not in left_out]
                datasets[table] = reader.dataset(table, present[table])
            return data

        step_tables = [t for t in _STEP_TABLES if t in present]
        rows = sum(seg.rows for t in step_tables for seg in segments[t])
        ranges: list[tuple[int, int] | None] = [None]  # a run that fits in one chunk is read in one pass
        if rows > _BULK_ROWS:
            counts = pd.Series(dtype="int64")
            for table in step_tables:
                col = read(table, ["step"]).column("step").to_numpy()
                counts = counts.add(pd.Series(col).value_counts(), fill_value=0)
            ranges = list(_chunks(counts.sort_index()))
        for bounds in ranges if step_tables else []:
            where = None if bounds is None else (pc.field("step") >= bounds[0]) & (pc.field("step") <= bounds[1])
            self._absorb({t: read(t, _COLUMNS[t], where) for t in step_tables})
        changed = bool(step_tables)
        if "gpu" in present:
            cutoff = self._gpu_cutoff()
            if cutoff is None:
                latest = pc.max(read("gpu", ["time"]).column("time")).as_py()
                cutoff = -math.inf if latest is None else latest - _GPU_KEEP_S
            samples = read("gpu", _COLUMNS["gpu"], pc.field("time") >= cutoff)
            self._absorb({"gpu": samples})
            changed = changed or samples.num_rows > 0
        if "jobs" in present:
            self._absorb({"jobs": read("jobs", _COLUMNS["jobs"])})
            changed = True
        return changed

    # -- folding new rows in -------------------------------------------------------------

    def _whole_late_steps(self, batch: dict[str, pa.Table]) -> dict[str, pa.Table]:
        """``batch`` with the rows of steps that already left the window replaced by all their rows
        on disk (every step table, read with a filter on those steps only).

        The window no longer holds such a step's other rows, and aggregates redone from the late
        ones alone (a slow writer's flush, a worker's last samples, a late validation record)
        would replace the step's right ones. A live writer rarely writes behind the window, so
        the common refresh reads nothing more.
        """
        if len(self._steps) < self.window:
            return batch
        horizon = self._steps[-self.window]
        late: set[int] = set()
        for table in _STEP_TABLES:
            if table in batch and batch[table].num_rows:
                late.update(s for s in pc.unique(batch[table].column("step")).to_pylist() if s < horizon)
        if not late:
            return batch
        assert self._reader is not None
        steps = pa.array(sorted(late), pa.int64())
        out = dict(batch)
        for table in _STEP_TABLES:
            whole = self._reader.read(table, _COLUMNS[table], filter=pc.field("step").isin(steps))
            rows = batch.get(table)
            if rows is not None and rows.num_rows:
                whole = pa.concat_tables([rows.filter(pc.invert(pc.is_in(rows.column("step"), steps))), whole])
            out[table] = whole
        return out

    def _absorb(self, batch: dict[str, pa.Table]) -> None:
        frames = {t: batch[t].to_pandas() for t in batch if batch[t].num_rows}
        touched: set[int] = set()
        for table in _STEP_TABLES:
            if table in frames:
                touched.update(frames[table]["step"].unique().tolist())
        fresh: set[int] = set()  # steps never seen before
        for step in touched:
            i = bisect.bisect_left(self._steps, step)
            if i == len(self._steps) or self._steps[i] != step:
                self._steps.insert(i, step)
                fresh.add(step)
        if "steps" in frames:
            self._merge_wide(frames["steps"])
        for table, attr in (("trajectories", "_traj"), ("spans", "_spans"), ("logprob", "_logprob_rows")):
            if table in frames:
                held = getattr(self, attr)
                new = frames[table]
                if table != "spans":  # a redone step's samples and histograms are its last attempt's, as diagnose's
                    held, new = self._keep_last_attempt(held, new, self._held_attempt[table])
                setattr(self, attr, pd.concat([held, new.set_index("step", drop=False)]))
        if "logprob" in frames:
            self._fold_logprob(frames["logprob"])
        if "gpu" in frames:
            self._gpu_parts.append(frames["gpu"])
        if "jobs" in frames:
            self._job_starts.extend(frames["jobs"]["time"].dropna().tolist())
        if touched:
            self._recompute(sorted(touched))
        self._evict(fresh)

    @staticmethod
    def _keep_last_attempt(
        held: pd.DataFrame, new: pd.DataFrame, attempts: dict[int, int]
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``held`` (window rows, index: step) and ``new`` rows, each step kept at its highest attempt
        (a missing attempt is 0), judged from ``new`` and ``attempts`` (updated) only, so a refresh
        costs what its rows cost: a higher attempt drops the step's held rows, a lower one is left out."""
        new = _last_attempt(new)
        top = new["attempt"].fillna(0).astype("int64").groupby(new["step"].to_numpy()).max()
        was = top.index.map(lambda step: attempts.get(step, -1)).to_numpy()
        now = top.to_numpy()
        new = new[new["step"].isin(top.index[now >= was])]
        replaced = top.index[(now > was) & (was >= 0)]
        if len(replaced):
            held = held[~held.index.isin(replaced)]
        attempts.update({int(step): int(a) for step, a in zip(top.index, np.maximum(now, was), strict=True)})
        return held, new

    def _merge_wide(self, long: pd.DataFrame) -> None:
        """Steps' metrics into the wide window: the rows the window holds of the steps read again
        plus the new ones, placed by ``placed_step_rows`` as ``wide_steps`` places a whole run's
        (a resumed run's record that trains nothing keeps the step's training)."""
        long = long.assign(attempt=long["attempt"].fillna(0).astype("int64"))
        finiteness = timer_finiteness(long)
        if len(finiteness):  # an inf or NaN timer is dropped below; RunFrames.unfinite must know it was logged
            held = self._finiteness["step"].isin(finiteness["step"].unique())  # regrouped: the batch's steps only
            both = pd.concat([self._finiteness[held], finiteness]).groupby(["step", "key", "attempt"], as_index=False)
            self._finiteness = pd.concat([self._finiteness[~held], both["finite"].any()])
        readings = share_readings(long)
        if len(readings):  # a share outside [0, 1] is dropped below; the notices must know it was logged
            held = self._share_readings["step"].isin(readings["step"].unique())
            both = readings_of(pd.concat([self._share_readings[held], readings]))
            self._share_readings = pd.concat([self._share_readings[~held], both])
        long = usable_step_rows(long)
        if long.empty:  # no row that says anything: no attempt either
            return
        records = pd.concat([self._records, training_records(long)]) if len(self._records) else training_records(long)
        self._records = records.groupby(["step", "attempt"], as_index=False)["time"].min()
        held = self._placed["step"].isin(long["step"].unique())
        placed = placed_step_rows(pd.concat([self._placed[held], long]) if held.any() else long)
        self._placed = pd.concat([self._placed[~held], placed]) if len(self._placed) else placed
        new = pivot_placed(placed)
        self._wide = _upsert(self._wide, new, new.index)

    def _fold_logprob(self, rows: pd.DataFrame) -> None:
        whole = rows["abs_counts"].map(lambda c: c is not None and len(c) == _N_BINS).to_numpy(dtype=bool)
        if not whole.all():  # another writer's bins or a truncated list cannot be added bin by bin
            log.warning(
                "dashboard: %s: %s without one count per bin; left out",
                self.label,
                fmt_count(int((~whole).sum()), "log-prob histogram row"),
            )
            rows = rows[whole]
        rows = _last_attempt(rows)
        attempt = rows["attempt"].fillna(0).astype("int64").groupby(rows["step"].to_numpy()).max()
        seen = attempt.index.map(lambda step: self._logprob_attempt.get(step, -1)).to_numpy()
        rows = rows[rows["step"].isin(attempt.index[attempt.to_numpy() >= seen])]  # an earlier attempt's, late: none
        if rows.empty:
            return
        counts = np.stack([np.asarray(c, dtype="int64") for c in rows["abs_counts"]])
        new = pd.DataFrame(counts[:, :_N_BINS], index=rows["step"].to_numpy()).groupby(level=0).sum()
        same = [step for step in new.index if attempt[step] == self._logprob_attempt.get(step, -1)]
        self._logprob_attempt.update({int(step): int(attempt[step]) for step in new.index})
        if same and not self.logprob.empty:  # a later attempt replaces the step's counts, the same one adds
            new.loc[same] = new.loc[same].add(self.logprob.reindex(same).fillna(0), fill_value=0)
            new = new.astype("int64")
        new.index.name = "step"
        self.logprob = _upsert(self.logprob, new, new.index)

    def _recompute(self, steps: list[int]) -> None:
        """Per-step aggregates of ``steps`` from all their rows: the window's, and the new ones (a step
        past the window comes whole, ``_whole_late_steps``), which stay in the window until evicted."""
        wide = self._wide.reindex([s for s in steps if s in self._wide.index])
        traj = self._traj[self._traj.index.isin(steps)]
        frames = RunFrames(wide, traj.reset_index(drop=True), self.meta, unfinite=self._unfinite(wide.index))
        a = anatomy.analyze(frames)
        t = longtail.analyze(frames)
        self.phases = _upsert(self.phases, a.seconds, a.seconds.index)
        self.tails = _upsert(self.tails, t.per_step.assign(estimated=t.estimated), t.per_step.index)
        self._clock_times = _clocked(self._clock_times, set(traj.index.unique().tolist()), t.clock_times)
        if self.facts.n_gpus and self.facts.n_gpus > 1 and not a.seconds.empty:
            models = drift.per_step_models(frames, a, t.per_step["tail_share"])
            self._models = _upsert(self._models, models, models.index)
            self._splits = self._splits.drop(index=models.index, errors="ignore")
        idle_keys = [k for k in (TRAINER_IDLE, ROLLOUTER_IDLE) if k in wide.columns]
        if idle_keys:
            idle = wide[idle_keys].rename(columns={TRAINER_IDLE: "trainer", ROLLOUTER_IDLE: "rollouter"})
            self.idle = _upsert(self.idle, idle.dropna(how="all"), idle.index)
        verl = verl_lags(wide)
        if len(verl.columns):
            self.verl_lags = _upsert(self.verl_lags, verl, wide.index)
        self.lengths = _upsert(self.lengths, _lengths(traj, wide), steps)
        if not traj.empty:
            self.engines = _upsert(self.engines, _engine_loads(traj), steps)
            self.lags = _upsert(self.lags, _lag_counts(traj), steps)
            result = rewards.analyze(traj.reset_index(drop=True))
            if result.available:
                self.reward_steps = _upsert(self.reward_steps, result.by_step.set_index("step"), steps)
                self.reward_errors = _upsert(self.reward_errors, _error_counts(traj), steps)

    def _evict(self, fresh: set[int]) -> None:
        """Drop raw rows older than the window (their aggregates stay, and their timers' verdicts are
        summed up; ``fresh``: the steps read for the first time, none of them summed up before)."""
        if len(self._steps) < self.window:
            return
        horizon = self._steps[-self.window]
        self._sum_up(horizon, fresh)
        self._wide = self._wide[self._wide.index >= horizon]
        self._placed = self._placed[self._placed["step"] >= horizon]
        # a step past the window is read again whole (_whole_late_steps), its timers' finiteness too
        self._finiteness = self._finiteness[self._finiteness["step"] >= horizon]
        self._share_readings = self._share_readings[self._share_readings["step"] >= horizon]
        self._traj = self._traj[self._traj.index >= horizon]
        self._spans = self._spans[self._spans.index >= horizon]
        self._logprob_rows = self._logprob_rows[self._logprob_rows.index >= horizon]
        # a step read again after it left the window is read whole (_whole_late_steps): its attempts afresh
        for attempts in (*self._held_attempt.values(), self._logprob_attempt):
            for step in [s for s in attempts if s < horizon]:
                del attempts[step]
        cutoff = self._gpu_cutoff()
        if cutoff is None and self._gpu_parts:
            cutoff = max(float(p["time"].max()) for p in self._gpu_parts) - _GPU_KEEP_S
        if cutoff is not None:
            self._gpu_parts = [p for p in self._gpu_parts if len(p) and p["time"].max() >= cutoff]

    def _sum_up(self, horizon: int, fresh: set[int]) -> None:
        """Fold the timers and shares of the steps leaving the window (before ``horizon``) into
        ``_past_unfinite`` and ``_past_out_of_range``.

        A step that left it before is read again whole (``_whole_late_steps``), and not ``fresh``
        (read for the first time): its verdict replaces the one it left with (``_summed_up``)."""
        left_before = -math.inf if self._horizon is None else self._horizon
        self._horizon = horizon

        def again(leaving: pd.DataFrame) -> set[int]:
            return {int(s) for s in leaving["step"].unique() if s < left_before and int(s) not in fresh}

        leaving = self._finiteness[self._finiteness["step"] < horizon]
        if not leaving.empty:
            self._past_unfinite = _summed_up(self._past_unfinite, _valued(unfinite_of(leaving)), again(leaving))
        leaving = self._share_readings[self._share_readings["step"] < horizon]
        if not leaving.empty:
            self._past_out_of_range = _summed_up(self._past_out_of_range, out_of_range_of(leaving), again(leaving))

    def _gpu_cutoff(self) -> float | None:
        """Start of the oldest step in the window, by its phase spans (None without spans)."""
        spans = self._spans.dropna(subset=["start"])
        return float(spans["start"].min()) if not spans.empty else None

    # -- what pages ask for --------------------------------------------------------------

    def trajectories(self, step: int) -> pd.DataFrame:
        """One step's trajectories: from the window, else read from disk (only when asked)."""
        with self._lock:
            if step in self._traj.index:
                return self._traj.loc[[step]].reset_index(drop=True)
            if self._old_step is not None and self._old_step[0] == step:
                return self._old_step[1]
            if self._reader is None:
                return _empty("trajectories")
            rows = self._reader.read("trajectories", _COLUMNS["trajectories"], filter=pc.field("step") == step)
            frame = _last_attempt(rows.to_pandas())
            self._old_step = (step, frame)
            return frame

    def gpu_window(self, steps: int) -> tuple[pd.DataFrame, pd.DataFrame]:
        """NVML samples and phase spans of the last ``steps`` steps (the last hour without spans),
        with the spans of earlier steps that ran in that time: an overlapped run trains step N - 1
        while it generates step N, and its trainer GPUs' work must not look unexplained."""
        with self._lock:
            gpu = pd.concat(self._gpu_parts) if self._gpu_parts else _empty("gpu")
            spans = self._spans.reset_index(drop=True).dropna(subset=["start", "end"])
        if not spans.empty:
            attempt = spans["attempt"].fillna(0)  # a resumed run's repeat of a step replaces it, as in gpu_idle
            spans = spans[attempt == attempt.groupby(spans["step"]).transform("max")]
            last = spans[spans["step"].isin(sorted(spans["step"].unique())[-steps:])]
            lo, hi = last["start"].min(), last["end"].max()
            spans = spans[spans["step"].isin(last["step"]) | ((spans["end"] > lo) & (spans["start"] < hi))]
            gpu = gpu[(gpu["time"] >= lo) & (gpu["time"] <= hi)]
        return gpu.sort_values("time", kind="stable").reset_index(drop=True), spans

    def lag_lengths(self) -> pd.DataFrame:
        """Samples and mean response tokens by staleness (policy versions) over the window."""
        with self._lock:
            traj = self._traj
        df = traj[_lag_mask(traj)] if not traj.empty else traj
        if df.empty:
            return pd.DataFrame(columns=["n", "mean_tokens"], index=pd.Index([], dtype="int64", name="lag"))
        lag = (df["trainer_version"] - df["policy_version_start"]).astype("int64").to_numpy()
        grouped = df["response_tokens"].astype(float).groupby(lag)
        return pd.DataFrame({"n": grouped.size(), "mean_tokens": grouped.mean()}).rename_axis("lag")

    def analysis(self) -> Diagnosis | None:
        """Every analyzer on the recent window, recomputed only when new rows arrived."""
        with self._lock:
            version, cached = self._analysis
            if version == self.version:
                return cached
            result = None
            if self._steps:
                traj = self._traj.reset_index(drop=True)
                tables = {
                    "trajectories": _arrow("trajectories", traj),
                    "spans": _arrow("spans", self._spans),
                    "logprob": _arrow("logprob", self._logprob_rows),
                    "steps": _long_table(self._wide),
                    "gpu": _arrow("gpu", pd.concat(self._gpu_parts) if self._gpu_parts else _empty("gpu")),
                }
                reader = _WindowReader(self.meta, tables)
                unfinite = self._unfinite(self._wide.index)
                frames = RunFrames(self._wide, traj, self.meta, reader, unfinite=unfinite, fills=self._fills())
                result = analyze_run(frames)
            self._analysis = (self.version, result)
            return result

    def full_analysis(self, *, recompute: bool) -> tuple[int, Diagnosis] | None:
        """Every analyzer on the whole run, read from disk: only when asked (``recompute``), then cached."""
        with self._lock:
            if recompute and self._reader is not None:
                self._full = (self.last_step or 0, analyze_run(self._reader))
            return self._full

    def _unfinite(self, steps: pd.Index) -> dict[str, tuple[int, ...]]:
        """``RunFrames.unfinite`` of ``steps``: their timers whose latest attempt logged no finite value."""
        return unfinite_of(self._finiteness[self._finiteness["step"].isin(steps)])

    def _fills(self) -> frozenset[int]:
        """The run's async pipeline fills (``RunFrames.fills``), of the whole run, not of the window:
        from its training records as diagnose's, not the anatomy's first step."""
        return pipeline_fills(self._records, self._job_starts, imported_job_firsts(self.meta))

    def splits(self) -> pd.DataFrame:
        """Each step's best split for the drift topology, computed for the steps not yet done
        (an async run's pipeline fills are none: its first step and each job's, ``drift.steady_models``;
        a step found to be one after its split was computed, as its job's start was read late, leaves)."""
        with self._lock:
            models, done = self._models, self._splits
            if not models.empty:
                models = drift.steady_models(models, self.facts, self._fills())
                done = done[done.index.isin(models.index)] if len(done) else done
            todo = models.index.difference(done.index)
            n = self.facts.n_gpus
            self._splits = done
            if len(todo) and n:
                topology = self.facts.kind if self.facts.is_pooled else "async_streaming"
                new = drift.best_per_step(models.loc[todo], n, topology).assign(topology=topology)
                self._splits = _upsert(done, new.rename_axis("step"), new.index)
            return self._splits


def _chunks(counts: pd.Series) -> list[tuple[int, int]]:
    """Consecutive step ranges holding at most ``_BULK_ROWS`` rows each (a step is never split)."""
    out: list[tuple[int, int]] = []
    steps = counts.index.to_numpy(dtype="int64")
    rows = counts.to_numpy(dtype="int64")
    first = 0
    while first < len(steps):
        total = np.cumsum(rows[first:])
        last = first + max(1, int(np.searchsorted(total, _BULK_ROWS, side="right")))
        out.append((int(steps[first]), int(steps[last - 1])))
        first = last
    return out


def _facts_of(meta: dict) -> dict:
    """meta.json less the importer's record: the values the run's aggregates are computed with."""
    return {key: value for key, value in meta.items() if key != "importer"}


def _last_attempt(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` (with ``step`` and ``attempt`` columns) of each step's last attempt."""
    keep = last_attempt_rows(rows["step"].to_numpy(), rows["attempt"].to_numpy(dtype=float, na_value=np.nan))
    return rows if keep is None else rows[keep]


def _lengths(traj: pd.DataFrame, wide: pd.DataFrame) -> pd.DataFrame:
    columns = ["p10", "p50", "p90", "max", "mean"]
    sized = traj.dropna(subset=["response_tokens"]) if not traj.empty else traj
    if not sized.empty:
        g = sized["response_tokens"].astype(float).groupby(level="step")
        q = g.quantile([0.1, 0.5, 0.9]).unstack()
        return pd.DataFrame(
            {"p10": q[0.1], "p50": q[0.5], "p90": q[0.9], "max": g.max(), "mean": g.mean()}
        ).rename_axis("step")
    keys = {"response_length/mean": "mean", "response_length/max": "max"}
    if set(keys) <= set(wide.columns):
        return wide[list(keys)].rename(columns=keys).dropna(how="all").reindex(columns=columns)
    return pd.DataFrame(columns=columns, index=pd.Index([], dtype="int64", name="step"))


def _engine_loads(traj: pd.DataFrame) -> pd.DataFrame:
    """Load per (step, engine) of the engines that served ``traj``'s steps.

    Live, an engine silent in the latest steps may be starved or gone for good, which only
    later steps tell; ``rlscope diagnose`` counts one silent between steps it served at 0.
    """
    df = traj[traj["engine"].notna()]
    if df.empty:
        return pd.DataFrame(columns=["engine", "load", "unit"])
    unit = "response_tokens" if df["response_tokens"].notna().any() else "gen_s"
    loads = df.groupby([df.index, "engine"])[unit].sum().rename("load").reset_index(level="engine")
    loads.index.name = "step"
    loads["unit"] = unit
    return loads


def _lag_mask(traj: pd.DataFrame) -> np.ndarray:
    return (traj["trainer_version"].notna() & traj["policy_version_start"].notna()).to_numpy()


def _lag_counts(traj: pd.DataFrame) -> pd.DataFrame:
    """Samples per (step, staleness in policy versions)."""
    df = traj[_lag_mask(traj)]
    if df.empty:
        return pd.DataFrame(columns=["lag", "n"], index=pd.Index([], dtype="int64", name="step"))
    lag = (df["trainer_version"] - df["policy_version_start"]).astype("int64").rename("lag")
    counts = lag.groupby([lag.index, lag.to_numpy()]).size()
    counts.index.names = ["step", "lag"]
    return counts.rename("n").reset_index(level="lag")


def _error_counts(traj: pd.DataFrame) -> pd.DataFrame:
    status = traj["reward_status"].fillna("ok").astype(str).str.lower()
    err = traj[status.ne("ok").to_numpy()]
    if err.empty:
        return pd.DataFrame(columns=["source", "code", "count"])
    frame = pd.DataFrame(
        {
            "source": err["data_source"].fillna("(unknown)").astype(str).to_numpy(),
            "code": err["reward_error"].fillna("unknown").astype(str).to_numpy(),
        },
        index=err.index,
    )
    counts = frame.groupby([frame.index, "source", "code"]).size().rename("count").reset_index(level=[1, 2])
    counts.index.name = "step"
    return counts


def _arrow(table: str, frame: pd.DataFrame) -> pa.Table:
    """A window frame back in Arrow with its table's types (an empty frame, or a column of
    nulls, would otherwise come back typed null, which the analyzers' kernels refuse)."""
    schema = pa.schema([TABLES[table].field(c) for c in _COLUMNS[table]])
    return pa.Table.from_pandas(frame.reset_index(drop=True), schema=schema, preserve_index=False)


def _long_table(wide: pd.DataFrame) -> pa.Table:
    """The wide window back in the ``steps`` table's long format (for the mismatch analyzer's fallback)."""
    if wide.empty:
        return TABLES["steps"].empty_table()
    long = wide.rename_axis("step").reset_index().melt(id_vars="step", var_name="key", value_name="value")
    long = long.dropna(subset=["value"])
    return pa.table(
        {
            "step": pa.array(long["step"], pa.int64()),
            "attempt": pa.nulls(len(long), pa.int32()),
            "time": pa.nulls(len(long), pa.float64()),
            "key": pa.array(long["key"].astype(str), pa.string()),
            "value": pa.array(long["value"], pa.float64()),
            "text": pa.nulls(len(long), pa.string()),
        }
    )


class LiveRuns:
    """The run directories given on the command line, in order; pages pick them by index only."""

    def __init__(self, paths: Sequence[str | os.PathLike[str]], window: int = WINDOW_STEPS):
        names = [os.path.basename(os.path.normpath(os.fspath(p))) or os.fspath(p) for p in paths]
        labels = [n if names.count(n) == 1 else f"{n} [{i}]" for i, n in enumerate(names)]
        self.runs: tuple[LiveRun, ...] = tuple(
            LiveRun(i, os.fspath(p), label, window) for i, (p, label) in enumerate(zip(paths, labels, strict=True))
        )

    def __len__(self) -> int:
        return len(self.runs)

    def resolve(self, values: object) -> list[LiveRun]:
        """The runs named by ``values`` (an index or a list of indices); anything else is refused.

        Why so strict: the selection comes from the browser, and only the directories given
        on the command line may ever be read, so a path, a label or an index out of range is
        an ``UnknownRun`` error, never a lookup.
        """
        items = values if isinstance(values, list) else [values]
        out: list[LiveRun] = []
        for v in items:
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(self.runs):
                raise UnknownRun(f"no run {v!r}")
            if self.runs[v] not in out:
                out.append(self.runs[v])
        return out
