"""Where every importer's metrics go: canonical keys, attempts, segments, meta.json, counts.

Importers hand over one record at a time (a step number and its metrics). The sink renames
keys through ``rlscope.collectors.verl_metrics``, decides which attempt a record belongs to
when a restarted run logs a step again, buffers rows and writes them as ``steps`` segments,
so memory stays bounded however long the input is. Each job a restart began is said where the
analyzers look for an async run's pipeline fills: a ``jobs`` row at the time of its first
record, or, where that record has no time, its first training record in ``meta.json``.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from rlscope import __version__
from rlscope.advice.finding import fmt_count
from rlscope.collectors.importers._source import ImportInputError
from rlscope.collectors.verl_metrics import (
    GLOBAL_STEP_KEY,
    ROLLOUT_UTILIZATION_KEY,
    ROLLOUTER_PREFIX,
    TRAINED_FROM_KEY,
    canonical_metric,
    holds_training,
    is_rollouter_window_key,
    makes_step,
    split_record,
)
from rlscope.errors import MetaError, RunDirError, UsageError
from rlscope.trace.schema import JOBS, STEPS
from rlscope.trace.store import (
    META_FILE,
    check_can_write,
    is_segment_name,
    locate,
    merge_meta,
    meta_to_extend,
    new_writer_id,
    segment_name,
    write_atomic_bytes,
    write_meta,
    write_segment,
)

__all__ = ["ImportSummary", "StepSink"]

# skip reasons that mean "this looked like a metric but could not be read": --strict stops on them
_BAD_INPUT = frozenset(
    {"bad_value", "free_text_field", "bad_step", "empty_step_line", "bad_json", "bad_row", "bad_event"}
)


@dataclass
class ImportSummary:
    """What an import read, wrote and skipped; ``str()`` is the report the CLI prints."""

    importer: str
    run_dir: str
    sources: list[str]
    lines: int = 0  # input lines read (TensorBoard: events)
    records: int = 0  # metric records accepted: step lines, metric dicts, rows, event groups
    steps: int = 0  # steps written, each once
    steps_again: int = 0  # of those, steps logged again after a restart (written as attempts 1, 2, ...)
    first_step: int | None = None
    last_step: int | None = None
    # steps of validation only, no training step; a dict (ordered as seen) so that a check per record is no scan
    validation_only: dict[int, None] = field(default_factory=dict)
    restarts: int = 0
    keys: int = 0
    values: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    # reason -> where it first happened and what ("FILE:LINE: detail"): a count alone cannot be found
    skipped_first: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    found_meta: dict[str, Any] = field(default_factory=dict)  # run facts the input stated (config, model size)
    notes: list[str] = field(default_factory=list)  # what was read but may not be whole
    meta_problems: list[str] = field(default_factory=list)  # meta.json values the analyzers will ignore
    interrupted: bool = False
    interrupted_twice: bool = False  # a second Ctrl-C or SIGTERM stopped it before all it read was written
    signals: tuple[str, ...] = ()  # the signals that stopped it, by name, where the CLI's handler saw them

    def __str__(self) -> str:
        again = ""
        if self.steps_again:
            again = f"; {self.steps_again} logged again after {'a restart' if self.restarts == 1 else 'restarts'}"
        span = (
            f" ({self.first_step}..{self.last_step}{_validation_only(self.validation_only)}{again})"
            if self.steps
            else ""
        )
        lines = [
            f"{self.importer}: {fmt_count(self.steps, 'step')}{span}, {fmt_count(self.keys, 'key')},"
            f" {fmt_count(self.values, 'value')} -> {self.run_dir}",
            f"  read {fmt_count(self.lines, 'event' if self.importer == 'tensorboard' else 'line')} from"
            f" {fmt_count(len(self.sources), 'source')}; {fmt_count(self.records, 'metric record')}",
        ]
        if self.restarts:
            lines.append(f"  {fmt_count(self.restarts, 'restart')}: steps logged again are kept as attempts 1, 2, ...")
        if self.skipped:
            lines.append(f"  skipped: {self.skips()}")
        if self.renamed:
            shown = ", ".join(f"{old} -> {new}" for old, new in list(self.renamed.items())[:6])
            more = f" (+{len(self.renamed) - 6} more)" if len(self.renamed) > 6 else ""
            lines.append(f"  renamed to verl's current names: {shown}{more}")
        if self.found_meta:
            facts = ", ".join(
                f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
                for key, value in _flat(self.found_meta)
            )
            lines.append(f"  meta.json from the log: {facts}")
        lines += [f"  note: {note}" for note in self.notes]
        lines += [f"  meta.json: {problem}; the analyzers will ignore it" for problem in self.meta_problems]
        if self.interrupted_twice:
            second = f"signal ({self.signals[1]})" if len(self.signals) > 1 else "interrupt"
            lines.append(f"  stopped at once by a second {second}; the last lines read may be missing")
        elif self.interrupted:
            first = self.signals[0] if self.signals else "interrupt"
            lines.append(f"  stopped by {first}; everything read so far was written")
        return "\n".join(lines)

    def skips(self) -> str:
        """What was skipped by reason, each with where it first happened, as "1 duplicate_key
        (first at FILE:2: KEY)": a count alone leaves the user nothing to look for."""
        return ", ".join(
            f"{n} {reason}" + (f" (first at {self.skipped_first[reason]})" if self.skipped_first.get(reason) else "")
            for reason, n in sorted(self.skipped.items())
        )


def _validation_only(steps: dict[int, None]) -> str:
    """The steps that are no training step as diagnose counts them (verl's val_before_train, or
    a checkpoint logged on its own), "; step 0 validation only", so that the import's count of
    steps is not read as the run's training steps."""
    if not steps:
        return ""
    first = list(itertools.islice(steps, 3))
    if len(steps) == 1:
        return f"; step {first[0]} validation only"
    shown = ", ".join(str(s) for s in first) + (", ..." if len(steps) > 3 else "")
    return f"; {len(steps)} validation only: {shown}"


class _Attempts:
    """Attempt numbers from restarts seen in the stream, in memory that grows with restarts only.

    A record starts a restart when its step is lower than the last one, or equal to it and
    sharing a key with what that step already logged. Each finished run is kept as its step
    range; a step's attempt is the number of earlier runs whose range holds it.
    """

    def __init__(self) -> None:
        self.closed: list[tuple[int, int]] = []
        self.first: int | None = None
        self.last: int | None = None
        self.last_keys: set[str] = set()

    def attempt(self, step: int) -> int:
        return sum(lo <= step <= hi for lo, hi in self.closed)

    def place(self, step: int, keys: set[str], *, restart: bool = False) -> tuple[int, bool]:
        """The attempt for a new record and whether it begins a step record (not a merge)."""
        if self.last is None or self.first is None:
            self.first = self.last = step
        elif restart or step < self.last or (step == self.last and keys & self.last_keys):
            self.closed.append((self.first, self.last))
            self.first = self.last = step
            self.last_keys = set()
        elif step > self.last:
            self.last, self.last_keys = step, set()
        else:
            self.last_keys |= keys
            return self.attempt(step), False
        self.last_keys |= keys
        return self.attempt(step), True


class StepSink:
    """Write step metrics into ``run_dir`` (which must not hold a ``steps`` table yet).

    ``add`` takes one record; ``skip`` counts what was not imported (and, with ``strict``,
    raises ``ImportInputError`` for input that looked like a metric but was unreadable);
    ``close`` writes what is buffered plus the final ``meta.json`` and returns the summary.
    Nothing is created on disk until the first rows are written.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        importer: str,
        sources: list[str],
        strict: bool = False,
        meta: Mapping[str, Any] | None = None,
        flush_rows: int = 50_000,
        flush_interval: float = 2.0,
    ):
        # pyarrow imports pandas at the first write, seconds into a followed import: Ctrl-C or
        # SIGTERM in the middle of it left pandas half imported, and the close then failed on it
        import pandas  # noqa: F401

        self._loc = locate(run_dir)
        self._check_target()
        self._made_dir = self._loc.fs.get_file_info(self._loc.path).type == pafs.FileType.NotFound
        self.strict = strict
        self.summary = ImportSummary(importer, self._loc.path, [_source_name(s) for s in sources])
        self._meta = dict(meta or {})
        self._meta_before: dict[str, Any] | None = None
        self._meta_bytes_before: bytes | None = None  # meta.json's bytes before this import wrote it
        self._meta_written = False
        self._flush_rows = flush_rows
        self._flush_interval = flush_interval
        self._last_flush = time.monotonic()
        self._writer = new_writer_id()
        self._seq = 0
        self._written_to: int | None = None  # the highest step in a segment written
        self._trained_to: int | None = None  # the highest step a record of a training step holds
        self._steps_seen: set[int] = set()  # a step logged again after a restart is counted once
        self._steps_again: set[int] = set()
        self._skipped: Counter[str] = Counter()
        self._skipped_first: dict[str, str] = {}
        self._keys: set[str] = set()
        self._attempts = _Attempts()
        self._pending: tuple[int, dict[str, float], float | None] | None = None
        # a rollouter window logged again at the last step: verl's final one, or a restart (_final_window)
        self._window: tuple[int, dict[str, float], float | None] | None = None
        self._window_where = ""  # where that window was read, which its skip names
        self._global_step: float | None = None  # the highest training/global_step read
        self._final_step: int | None = None  # the step whose final window was left out
        self._cols: dict[str, list[Any]] = {name: [] for name in ("step", "attempt", "time", "key", "value")}
        self._job_starts: list[float] = []  # of jobs a restart began, not yet written to the jobs table
        self._jobs_seq = 0
        # a job a restart began at a record without time: its first training record goes to meta.json
        self._untimed_job = False
        self._job_first_steps: list[list[int]] = []  # [step, attempt] of those records, in input order
        self._firsts_in_meta = 0  # how many of them meta.json holds

    def _check_target(self) -> None:
        """A one-line error now, before the input is read, if the run directory cannot be written."""
        loc = self._loc
        info = loc.fs.get_file_info(loc.path)
        if info.type == pafs.FileType.File:
            # a path no run can be written to is the command line's mistake, as for simulate's --out
            raise UsageError(f"{loc.path}: is a file, expected a run directory to write")
        check_can_write(loc)
        if info.type == pafs.FileType.Directory:
            try:
                meta_to_extend(loc)
            except MetaError as exc:  # the import would merge into it: never replace what it holds
                raise RunDirError(f"{exc}; the import would replace it: fix it, or move it away") from None
        folder = loc.fs.get_file_info(loc.join("steps"))
        if folder.type == pafs.FileType.Directory:
            entries = loc.fs.get_file_info(pafs.FileSelector(folder.path))
            if any(is_segment_name(e.base_name) for e in entries):
                raise UsageError(f"{loc.path}: already holds a steps table; import into a new directory")

    # -- records -------------------------------------------------------------------------

    def add(self, step: int, metrics: Mapping[str, float], *, when: float | None = None, where: str = "") -> None:
        """One record: ``step``'s metrics (raw keys, float values), logged at ``when`` if known, read
        at ``where`` ("FILE:LINE"), which a skip of one of its values names."""
        named: dict[str, float] = {}
        for raw, value in metrics.items():
            key, value = canonical_metric(raw, value)
            if key != raw:
                self.summary.renamed.setdefault(raw, key)
            if key in named:
                self.skip("duplicate_key", where, key, bad=False)
            else:
                named[key] = value
        if not named:
            return
        self.summary.records += 1
        final = self._final_window(step, named, where)
        at_last = step == self._attempts.last
        # verl's fully async trainer logs its training record after the window of the step it is
        # logged under, repeating that window's rollout utilization: never a restart's first record.
        # TensorBoard, which reads a tag logged again at a step as a new record, splits it there:
        # the rest repeats no key of the step but that one
        trainer = at_last and (
            TRAINED_FROM_KEY in named or named.keys() & self._attempts.last_keys == {ROLLOUT_UTILIZATION_KEY}
        )
        if final or (trainer and step == self._final_step):  # the final window's, or its utilization repeated
            named = {k: v for k, v in named.items() if not is_rollouter_window_key(k)}
        global_step = named.get(GLOBAL_STEP_KEY)
        if global_step is not None and math.isfinite(global_step):
            self._global_step = global_step if self._global_step is None else max(self._global_step, global_step)
        for described, part in split_record(step, named):
            if described == step and not (final or trainer):
                self._place(step, part, when, where)
            else:  # an update's metrics filed under its own step, or the rest of the step logged last
                # (the last update's after a final window too): they join the attempt that step is on
                self._rows(described, self._attempts.attempt(described), part, when)

    def _final_window(self, step: int, named: dict[str, float], where: str) -> bool:
        """Whether ``named`` (canonical keys, read at ``where``) is verl's fully async record of its last update,
        after the rollouter window of the final sync: then that window, held or in ``named``
        (TensorBoard merges the two when the record does not repeat the window's utilization,
        else splits the record before it into the held one), is counted as skipped; else a
        held window is a restart.

        When the queue ends right after a sync to a version not due for validation, ``fit``
        syncs it once more and logs a second window under the last step (after the last update,
        no step's), then the last update's record: the one right after the record of the
        update before it, its ``training/global_step`` one more. A resume logging that step's
        window again logs next a later step, or (a sync every n > 1 updates) the record of an
        update the run logged before: no global step beyond the highest read.
        """
        held, self._window = self._window, None
        last = self._attempts.last
        # the window's own keys again: the trainer's record repeats only its utilization
        repeats = step == last and any(k.startswith(ROLLOUTER_PREFIX) for k in named.keys() & self._attempts.last_keys)
        final = (
            (held is not None or repeats)
            and step == last
            and TRAINED_FROM_KEY in named
            and self._global_step is not None
            and named.get(GLOBAL_STEP_KEY) == self._global_step + 1
        )
        if held is not None and not final:
            self._write(*held, restart=True)
        if final:
            self.skip("fully_async_final_window", self._window_where if held else where, bad=False)
            self._final_step = step
            rest = {k: v for k, v in held[1].items() if not is_rollouter_window_key(k)} if held else {}
            if rest:  # TensorBoard's split of the record before it, merged with the window
                self._rows(step, self._attempts.attempt(step), rest, held[2])
        return final

    def _place(self, step: int, named: dict[str, float], when: float | None, where: str) -> None:
        """Write a record of ``step`` (canonical keys, read at ``where``), or hold it till the next
        tells its attempt."""
        pending = self._pending
        if pending is not None:
            if pending[0] == step and not named.keys() & pending[1].keys():
                pending[1].update(named)  # the rest of a late record logged in two lines
                return
            self._settle(restart=self._attempts.last is not None and step <= self._attempts.last)
        last = self._attempts.last
        again = named.keys() & self._attempts.last_keys if step == last else set()
        if TRAINED_FROM_KEY not in named and any(k.startswith(ROLLOUTER_PREFIX) for k in again):
            self._window = (step, named, when)  # the rollouter's window of the last step again: see the next
            self._window_where = where
            return
        if last is not None and step < last and not any(makes_step(k, v) for k, v in named.items()):
            # validation (with its timer, say) of an earlier step: logged late (async trainers)
            # or the first line of a restart; the next record tells which
            self._pending = (step, named, when)
            return
        self._write(step, named, when)

    def _settle(self, *, restart: bool) -> None:
        assert self._pending is not None
        step, named, when = self._pending
        self._pending = None
        if restart:
            self._write(step, named, when, restart=True)
        else:
            self._rows(step, self._attempts.attempt(step), named, when)

    def _write(self, step: int, named: dict[str, float], when: float | None, *, restart: bool = False) -> None:
        before = len(self._attempts.closed)
        attempt, new_step = self._attempts.place(step, set(named), restart=restart)
        if len(self._attempts.closed) > before:
            self.summary.restarts += 1
            self._job_began(when)
        s = self.summary
        trains = any(makes_step(key, value) for key, value in named.items())
        if new_step and step in self._steps_seen:
            if step not in self._steps_again:  # a step two restarts redid is one step logged again
                self._steps_again.add(step)
                s.steps_again += 1
        elif new_step:
            s.steps += 1
            self._steps_seen.add(step)
            s.first_step = step if s.first_step is None else min(s.first_step, step)
            s.last_step = step if s.last_step is None else max(s.last_step, step)
        if trains:
            self._trained_to = step if self._trained_to is None else max(self._trained_to, step)
            s.validation_only.pop(step, None)  # its training came in a later record
        elif new_step and (self._trained_to is None or step > self._trained_to):
            # a step below one trained was, mostly, trained before a restart validated it again
            s.validation_only[step] = None
        self._rows(step, attempt, named, when)

    def _job_began(self, when: float | None) -> None:
        """A restart's first record, logged at ``when``, began a job: the job started then (or
        a little before: the log cannot tell how long it warmed up), so that, as for a run
        recorded live, its first training record is the one logged first at or after its start
        (``analyzers._data.job_first_steps``). Without a time, that record is found in the
        input's order instead (``_rows``)."""
        timed = when is not None and math.isfinite(when)
        if timed:
            self._job_starts.append(when)
        self._untimed_job = not timed

    def _rows(self, step: int, attempt: int, named: dict[str, float], when: float | None) -> None:
        if self._untimed_job and holds_training(named):  # as diagnose places its records
            self._untimed_job = False
            self._job_first_steps.append([step, attempt])
        cols, count = self._cols, len(named)
        # a column at a time, each in one call: an interrupt (Ctrl-C, SIGTERM) between two of
        # them leaves the record in some columns only, and ``flush`` leaves it out whole
        cols["step"].extend([step] * count)
        cols["attempt"].extend([attempt] * count)
        cols["time"].extend([when] * count)
        cols["key"].extend(named.keys())
        cols["value"].extend(named.values())
        self._keys.update(named)
        self.summary.values += len(named)
        if len(cols["step"]) >= self._flush_rows:
            self.flush()

    def note(self, text: str) -> None:
        """Tell something read that may not be whole (the summary and meta.json keep it)."""
        self.summary.notes.append(text)

    def skip(self, reason: str, where: str, detail: str = "", *, bad: bool = True) -> None:
        """Count something not imported; with ``strict``, a ``bad`` one stops the import."""
        self._skipped[reason] += 1
        if reason not in self._skipped_first:
            self._skipped_first[reason] = ": ".join(part for part in (where, detail[:120]) if part)
        if self.strict and bad and reason in _BAD_INPUT:
            text = f": {detail[:120]}" if detail else ""
            held = ""
            if self._written_to is not None:  # segments already on disk stay: say so, or it looks whole
                held = f" (steps up to {self._written_to} were written to {self._loc.path} before it)"
            raise ImportInputError(f"{where}: {reason.replace('_', ' ')}{text}{held}")

    # -- writing -------------------------------------------------------------------------

    def flush(self) -> None:
        """Write buffered rows as one segment (and meta.json before the first one)."""
        self._last_flush = time.monotonic()
        whole = min(map(len, self._cols.values()))  # fewer: a record an interrupt cut short
        for values in self._cols.values():
            del values[whole:]
        if not whole:
            return
        if self._seq == 0 or len(self._job_first_steps) > self._firsts_in_meta:
            self._write_meta()
        table = pa.table(
            {
                "step": pa.array(self._cols["step"], pa.int64()),
                "attempt": pa.array(self._cols["attempt"], pa.int32()),
                "time": pa.array(self._cols["time"], pa.float64()),
                "key": pa.array(self._cols["key"], pa.string()),
                "value": pa.array(self._cols["value"], pa.float64()),
                "text": pa.nulls(len(self._cols["step"]), pa.string()),
            },
            schema=STEPS,
        )
        self._seq += 1
        try:
            write_segment(self._loc, "steps", table, writer_id=self._writer, seq=self._seq)
            self._written()
        except OSError as exc:
            raise self._cannot_write(exc) from None
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: after the segment's rename, its rows are written
            if self._cols["step"] and self._segment_written(self._seq):
                self._written()  # and not to be written again by the close
            raise
        self._write_job_starts()

    def _write_job_starts(self) -> None:
        """Write the starts of jobs whose first records are in the steps table now (after them:
        the dashboard takes a fill out of the split once its start is read, however late)."""
        if not self._job_starts:
            return
        n = len(self._job_starts)
        table = pa.table(
            {
                "time": pa.array(self._job_starts, pa.float64()),
                "host": pa.nulls(n, pa.string()),
                "pid": pa.nulls(n, pa.int64()),
            },
            schema=JOBS,
        )
        self._jobs_seq += 1
        try:
            write_segment(self._loc, "jobs", table, writer_id=self._writer, seq=self._jobs_seq)
        except OSError as exc:
            raise self._cannot_write(exc) from None
        self._job_starts.clear()

    def _written(self) -> None:
        """The buffered rows are in a segment: no longer buffered."""
        top = max(self._cols["step"])
        self._written_to = top if self._written_to is None else max(self._written_to, top)
        for values in self._cols.values():
            values.clear()

    def _segment_written(self, seq: int) -> bool:
        """Whether this import's segment ``seq`` is in the steps table."""
        ending = segment_name(self._writer, seq).split("-", 2)[2]  # part-<time>-<seq>-<writer>.parquet
        folder = pafs.FileSelector(self._loc.join("steps"), allow_not_found=True)
        try:
            return any(info.base_name.endswith(f"-{ending}") for info in self._loc.fs.get_file_info(folder))
        except OSError:  # cannot tell: written again rather than lost
            return False

    def _cannot_write(self, exc: OSError) -> RunDirError:
        """A one-line error naming the run directory and what of the import it holds (an
        ``OSError`` such as a full disk often names no file)."""
        reason = exc.strerror or str(exc)
        if self._written_to is not None:
            held = f"steps up to {self._written_to} were written; import again into a new directory"
        elif self._undo():
            held = "nothing of this import was written"
        else:
            held = "no steps were written, but meta.json holds this import's record"
        return RunDirError(f"{self._loc.path}: cannot write ({reason}); {held}")

    def _undo(self) -> bool:
        """Put the run directory back as it was before this import wrote any step (best effort):
        meta.json as it was, and the folders the import made, if empty, gone."""
        path = self._loc.join(META_FILE)
        try:
            if self._meta_written and self._meta_bytes_before is None:
                self._loc.fs.delete_file(path)
            elif self._meta_written:
                write_atomic_bytes(self._loc, path, self._meta_bytes_before)
        except OSError:
            return False
        folders = [self._loc.join("steps")] + ([self._loc.path] if self._made_dir else [])
        for folder in folders:
            with contextlib.suppress(OSError):  # not empty (another writer), or already gone
                if not self._loc.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
                    self._loc.fs.delete_dir(folder)
        return True

    def maybe_flush(self) -> None:
        """Flush if ``flush_interval`` seconds passed since the last write, so that readers
        of a live import see new steps within that time without a segment per line."""
        if time.monotonic() - self._last_flush >= self._flush_interval:
            self.flush()

    def found(self, meta: Mapping[str, Any]) -> None:
        """All the run facts the input has stated so far (a config, a model size), for meta.json;
        ``meta`` given to the sink wins over them."""
        self.summary.found_meta = dict(meta)

    def close(self, *, interrupted: bool = False) -> ImportSummary:
        """Write everything still buffered and the final meta.json; return the summary."""
        if self._window is not None:  # no record of the last update came after it: a restart
            self._write(*self._window, restart=True)
        if self._pending is not None:
            self._settle(restart=False)
        self.flush()
        s = self.summary
        s.keys, s.skipped, s.interrupted = len(self._keys), dict(self._skipped), interrupted
        s.skipped_first = dict(self._skipped_first)
        if self._seq:
            from rlscope.analyzers._data import meta_problems  # pandas: only once the import is done

            s.meta_problems = meta_problems(self._write_meta())  # --meta with what the log states
        return s

    def _write_meta(self) -> dict[str, Any]:
        # meta.json as it was before this import: each write states the facts found so far in
        # full, so a fact a later config no longer states does not linger from an earlier write
        if self._meta_before is None:
            self._meta_before = meta_to_extend(self._loc)
            if self._loc.fs.get_file_info(self._loc.join(META_FILE)).type == pafs.FileType.File:
                with self._loc.fs.open_input_stream(self._loc.join(META_FILE)) as fh:
                    self._meta_bytes_before = fh.read()
        s = self.summary
        record = {
            "name": s.importer,
            "sources": s.sources,
            "rlscope_version": __version__,
            "imported_at": time.time(),
            "steps": s.steps,
            "steps_logged_again": s.steps_again,
            "values": s.values,
            "restarts": s.restarts,
            "skipped": dict(self._skipped),
            "skipped_first": dict(self._skipped_first),
            "notes": list(s.notes),
            "renamed_keys": dict(s.renamed),
        }
        if self._job_first_steps:
            record["job_first_steps"] = [list(first) for first in self._job_first_steps]
            self._firsts_in_meta = len(self._job_first_steps)
        meta = {**merge_meta(self._meta_before, merge_meta(s.found_meta, self._meta)), "importer": record}
        meta.setdefault("framework", "verl")
        try:
            write_meta(self._loc, meta)
        except OSError as exc:
            raise self._cannot_write(exc) from None
        self._meta_written = True
        return meta


def _flat(meta: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        out += _flat(value, name + ".") if isinstance(value, Mapping) else [(name, value)]
    return out


def _source_name(source: str) -> str:
    return "<stdin>" if source == "-" else os.path.abspath(source)
