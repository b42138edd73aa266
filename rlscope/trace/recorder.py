"""The Recorder: how any training loop writes a run directory without slowing down or crashing.

The caller's thread only appends a reference to a bounded in-memory queue; a background
thread turns queued rows into Arrow tables and writes one segment per table per flush.
When the queue is full (in rows, or in the bytes its calls hold, estimated as they are
queued) the oldest rows are dropped and counted, so memory is bounded and the caller
never waits. Nothing raises into the caller: a failure becomes a counter in
``Recorder.status()`` (also written to ``_status/<writer>.json`` when possible) and one
logged warning per kind of failure.
"""

from __future__ import annotations

import atexit
import contextlib
import decimal
import functools
import json
import logging
import math
import numbers
import os
import re
import socket
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rlscope.errors import MetaMalformedError
from rlscope.trace.schema import (
    CLOCK_TIME_S,
    GPU,
    IS_WEIGHT_CAP,
    JOB_START_SKEW_SECONDS,
    JOBS,
    LOGPROB,
    LOGPROB_BIN_EDGES,
    LOGPROB_QUANTILES,
    SPANS,
    TRAJECTORIES,
    TRAJECTORY_TIMES,
)
from rlscope.trace.store import (
    META_FILE,
    RunLocation,
    conform,
    locate,
    merge_meta,
    meta_to_extend,
    new_writer_id,
    write_meta,
    write_segment,
)

__all__ = ["Recorder", "logprob_histogram_row"]

try:
    import fcntl
except ImportError:  # Windows: only the threads of one process are kept out of meta.json
    fcntl = None

log = logging.getLogger("rlscope")

_MAX_TEXT = 1024  # longest text value kept for a non-numeric metric
# what a queued number holds (its slot in a dict or list and the object), towards max_queue_bytes
_VALUE_BYTES = 64
# metric value types that hold no more than that: a dict of only these is weighed by its length
_SMALL_TYPES = frozenset(
    {float, int, bool, type(None), np.float64, np.float32, np.float16, np.int64, np.int32, np.bool_}
)


def _positive(name: str, value: Any, *, whole: bool) -> float:
    """A setting the writer thread can run with (a whole one as int: 2e9 and numpy ints
    read), else ValueError: a bad setting is the caller's mistake, said once, when the
    Recorder is made, where the writer thread would spin on it or die of it."""
    number: float = math.nan
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        try:  # an int stays exact (2**63 + 1); one past a double's range is refused, not raised
            number = int(value) if isinstance(value, numbers.Integral) else float(value)
            whole_ok = not whole or isinstance(number, int) or float(number).is_integer()
        except (OverflowError, ValueError):
            number, whole_ok = math.nan, False
    else:
        whole_ok = False
    limit = 2**63 if whole else threading.TIMEOUT_MAX  # a longer wait kills the writer thread
    if not (whole_ok and 0 < number < limit):
        what = "a positive whole number" if whole else f"a positive number of seconds below {threading.TIMEOUT_MAX:.3g}"
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"Recorder {name} must be {what}, not {shown}")
    return int(number) if whole else float(number)


def _value_bytes(value: Any) -> int:
    """Estimated bytes a queued value holds: text and arrays (``nbytes``) by their size, a
    list or tuple by three sampled items."""
    if isinstance(value, (str, bytes)):
        return _VALUE_BYTES + len(value)
    if isinstance(value, (list, tuple)):
        return _VALUE_BYTES + _sampled_bytes(value, _value_bytes)
    try:
        nbytes = getattr(value, "nbytes", None)  # numpy, torch (no device sync), Arrow
    except Exception:  # noqa: BLE001 - an odd object's attribute lookup may raise anything
        return _VALUE_BYTES
    return _VALUE_BYTES + nbytes if isinstance(nbytes, int) else _VALUE_BYTES


def _row_bytes(row: Any) -> int:
    """Estimated bytes of one row dict (a bad row is counted at its build, weighed as a value)."""
    try:
        return sys.getsizeof(row) + sum(_value_bytes(v) for v in row.values())
    except Exception:  # noqa: BLE001
        return _VALUE_BYTES


def _sampled_bytes(items: Sequence[Any], size: Callable[[Any], int]) -> int:
    """``len(items)`` times the largest ``size`` of the first, middle and last item: an
    estimate that costs three looks however many items there are."""
    n = len(items)
    return n * max(size(items[i]) for i in {0, n // 2, n - 1}) if n else 0


def _column_bytes(column: Any) -> int:
    """Estimated bytes of one column of a dict of columns (an array by ``nbytes``)."""
    nbytes = getattr(column, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    return _sampled_bytes(column, _value_bytes) if isinstance(column, Sequence) else _value_bytes(column)


def _snapshot(value: Any) -> Any:
    """``value`` as it is now, where the caller may change it in place after logging it: an
    array is copied, a tensor detached and cloned (on its device, without waiting for it)."""
    if isinstance(value, (np.ndarray, list, dict)):
        return value.copy()
    if hasattr(value, "detach") and hasattr(value, "clone"):
        try:
            return value.detach().clone()
        except Exception:  # noqa: BLE001 - an odd tensor-like object: keep it, converted later
            return value
    return value


def _queued_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """A copy of ``metrics`` to queue, and the bytes it holds. Text is cut to what is kept
    now, so a long string is not held until the write, and arrays and tensors are copied, so
    that changing them later does not change what was logged; a dict of plain numbers costs
    one look at the values' types."""
    copy = dict(metrics)
    if _SMALL_TYPES.issuperset(map(type, copy.values())):
        return copy, _VALUE_BYTES * len(copy)
    for key, value in copy.items():
        if isinstance(value, str):
            if len(value) > _MAX_TEXT:
                copy[key] = value[:_MAX_TEXT]
        else:
            copy[key] = _snapshot(value)
    return copy, sum(_value_bytes(v) for v in copy.values())


def _is_column(value: Any) -> bool:
    """Whether a value of a dict given to ``log_trajectories`` is a column (not text, not a scalar)."""
    return not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and getattr(value, "ndim", 1) != 0


def _column_snapshot(column: Any) -> Any:
    """One column of a dict of columns as it is now (a list, array, tensor or pandas Series copied)."""
    if isinstance(column, (list, tuple)):
        return list(column)
    if hasattr(column, "to_numpy") and hasattr(column, "copy"):  # a pandas Series
        return column.copy()
    return _snapshot(column)


def _coerce(value: Any) -> tuple[float | None, str | None]:
    """A metric value as (number, text): numbers keep NaN/inf, everything else becomes text."""
    if value is None:
        return None, None
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, (int, float)):
        try:
            return float(value), None
        except OverflowError:  # an int too large for a double
            return (math.inf if value > 0 else -math.inf), None
    if isinstance(value, str):
        return None, value[:_MAX_TEXT]
    try:  # numpy scalars, 0-d arrays, torch scalars, Decimal, ...
        return float(value), None
    except Exception:  # noqa: BLE001 - a tensor on a meta device raises anything; keep its text
        pass
    try:  # a one-element array ([3.0]) is its one number
        if isinstance(value, np.ndarray) and value.size == 1:
            return float(value.reshape(())), None
        return None, repr(value)[:_MAX_TEXT]
    except Exception:  # noqa: BLE001
        return None, f"<unprintable {type(value).__name__}>"


def _job_time(when: Any, now: float) -> float:
    """``when`` as the start of a job recorded at ``now``; an error for a value no clock gives then."""
    if isinstance(when, bool) or not isinstance(when, numbers.Real):
        raise TypeError(f"job start {when!r} is no number of unix seconds; recorded as now")
    started = float(when)
    if not math.isfinite(started):
        raise ValueError(f"job start {when!r} is no time; recorded as now")
    if started > now + JOB_START_SKEW_SECONDS:
        raise ValueError(
            f"job start {started:.6g} is {started - now:.3g} s after now (milliseconds for seconds? a skewed clock?);"
            " recorded as now"
        )
    return started


def logprob_histogram_row(
    step: int, deltas: Any, *, source: str = "recorder", when: float | None = None, attempt: int = 0
) -> dict:
    """Summarise per-token ``log p_trainer - log p_rollout`` as one ``logprob`` table row.

    A NaN delta says nothing and is left out. An infinite one (a token one side gives
    probability 0) is the largest gap there is: it counts in ``n_tokens``, in the last bin
    (|delta| >= 100), in the quantiles (as +-1e300, each then an observed delta: none is
    interpolated towards the sentinel) and, if positive, in ``is_clipped``;
    ``mean``, ``abs_mean`` and ``abs_max`` are over the finite deltas.
    """
    d = np.asarray(deltas, dtype=np.float64).ravel()
    d = d[~np.isnan(d)]
    finite = d[np.isfinite(d)]
    counts, _ = np.histogram(np.abs(d), bins=LOGPROB_BIN_EDGES)
    absf = np.abs(finite)
    some, any_finite = d.size > 0, finite.size > 0
    return {
        "step": int(step),
        "attempt": int(attempt),
        "time": time.time() if when is None else when,
        "source": source,
        "n_tokens": int(d.size),
        "abs_counts": counts.astype(np.int64).tolist(),
        "quantiles": _quantiles(d, finite.size < d.size) if some else None,
        "mean": float(finite.mean()) if any_finite else None,
        "abs_mean": float(absf.mean()) if any_finite else None,
        "abs_max": float(absf.max()) if any_finite else None,
        "is_clipped": int(np.count_nonzero(d > math.log(IS_WEIGHT_CAP))),
    }


def _quantiles(d: np.ndarray, infinite: bool) -> list[float]:
    """``LOGPROB_QUANTILES`` of the deltas; with infinite ones (as +-1e300), observed values
    rather than points interpolated between a real delta and the sentinel."""
    if not infinite:
        return np.quantile(d, LOGPROB_QUANTILES).tolist()
    return np.quantile(np.clip(d, -1e300, 1e300), LOGPROB_QUANTILES, method="closest_observation").tolist()


META_LOCK_FILE = ".meta.lock"  # locked (lockf) by each process merging into a local meta.json
META_LOCK_WAIT = 5.0  # seconds a merge waits for another process's before going ahead

_META_LOCKS: dict[str, threading.Lock] = {}
_META_LOCKS_GUARD = threading.Lock()


def _meta_file_lock(loc: RunLocation) -> threading.Lock:
    """The lock of a run directory's meta.json in this process: its read-merge-write is one
    step (``file:///a%20b``, ``/a b`` and a link to it are one directory)."""
    key = os.path.realpath(loc.path) if loc.is_local else f"{type(loc.fs).__name__}:{loc.path}"
    with _META_LOCKS_GUARD:
        return _META_LOCKS.setdefault(key, threading.Lock())


@contextlib.contextmanager
def _meta_process_lock(loc: RunLocation) -> Iterator[str | None]:
    """Keep other processes out of a local run directory's meta.json for one read-merge-write:
    a lock on ``.meta.lock`` beside it, waited for at most ``META_LOCK_WAIT`` seconds (then
    the merge goes ahead unlocked rather than stall the writer). Yields why it went ahead
    unlocked, or None. A remote filesystem (``s3://``) is not locked, and a network mount may
    not honour locks. A POSIX record lock (``lockf``), so that a child forked meanwhile does not
    inherit it."""
    if not loc.is_local or fcntl is None:
        yield None
        return
    os.makedirs(loc.path, exist_ok=True)
    try:
        fd = os.open(os.path.join(loc.path, META_LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # another user's lock file, a read-only folder: merge unlocked
        yield f"cannot open {META_LOCK_FILE} ({exc.strerror or exc}); merged unlocked"
        return
    try:
        deadline, why = time.monotonic() + META_LOCK_WAIT, None
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except (BlockingIOError, PermissionError):  # held by another process
                if time.monotonic() >= deadline:
                    why = f"{META_LOCK_FILE} held over {META_LOCK_WAIT:g} s; merged anyway"
                    break
                time.sleep(0.01)
            except OSError as exc:  # a filesystem without locks (ENOLCK, EOPNOTSUPP): never wait on it
                why = f"cannot lock {META_LOCK_FILE} ({exc.strerror or exc}); merged unlocked"
                break
        yield why
    finally:
        os.close(fd)  # releases the lock


def _existing_meta(loc: Any) -> dict[str, Any]:
    """meta.json of a run being resumed, so a restart adds to it instead of replacing it. One
    that is malformed (see ``MetaMalformedError``) is kept beside (``meta.json.unreadable-<time>``),
    never overwritten; one
    that cannot be read now, or is of a newer schema, raises (meta.json is then left alone)."""
    try:
        return meta_to_extend(loc)
    except MetaMalformedError as exc:
        kept = f"{loc.join(META_FILE)}.unreadable-{time.time():.0f}"
        loc.fs.move(loc.join(META_FILE), kept)
        log.warning("rlscope recorder (%s): %s; kept as %s, and a new meta.json written", loc.path, exc, kept)
        return {}


class _Span:
    """Context manager returned by ``Recorder.span``; records start and end wall time."""

    __slots__ = ("_rec", "_row")

    def __init__(self, rec: Recorder, row: dict):
        self._rec, self._row = rec, row

    def __enter__(self) -> _Span:
        self._row["start"] = time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        self._row["end"] = time.time()
        self._rec._enqueue("spans", self._row, 1, _row_bytes(self._row))


class Recorder:
    """Record one run into ``run_dir``: step metrics, phase spans, trajectories, GPU samples,
    and trainer-vs-rollout log-prob deltas.

    ``meta`` (model size, GPU type and count, topology, batch size, ...) is merged into
    ``meta.json``; see ``docs/run-directory.md`` for the keys analyzers use. Use it as a
    context manager, or call ``close()``; an unclosed Recorder is flushed at interpreter exit.

    Every ``log_*`` call returns at once: rows are queued and written by a background
    thread every ``flush_interval`` seconds, or when ``flush_rows`` rows or a quarter of
    ``max_queue_bytes`` are pending. At most ``max_queue_rows`` rows, holding at most
    ``max_queue_bytes`` (estimated as each call is queued: text and arrays by their size,
    a number as 64 bytes), wait in memory; beyond either bound the oldest are dropped and
    counted in ``status()["dropped_rows"]``. The batch being written is held beside them. No method raises because of the run directory, the
    disk or odd values; failures are counted in ``status()`` and logged once.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        meta: Mapping[str, Any] | None = None,
        *,
        flush_interval: float = 5.0,
        flush_rows: int = 100_000,
        max_queue_rows: int = 2_000_000,
        max_queue_bytes: int = 1 << 30,
        host: str | None = None,
    ):
        flush_interval = _positive("flush_interval", flush_interval, whole=False)
        flush_rows = int(_positive("flush_rows", flush_rows, whole=True))
        max_queue_rows = int(_positive("max_queue_rows", max_queue_rows, whole=True))
        max_queue_bytes = int(_positive("max_queue_bytes", max_queue_bytes, whole=True))
        self.run_dir = os.fspath(run_dir)
        self.host = host or socket.gethostname()
        self.writer_id = new_writer_id()
        self.flush_interval = flush_interval
        self.flush_rows = flush_rows
        self.max_queue_rows = max_queue_rows
        self.max_queue_bytes = max_queue_bytes
        self._queue: deque[tuple[str, Any, int, int]] = deque()  # (table, payload, rows, bytes)
        self._queued_rows = 0
        self._queued_bytes = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._flushed = threading.Condition(self._lock)
        self._flush_requests = 0
        self._flush_done = 0
        self._seq = 0
        self._closed = False
        self._forked = False  # a forked child's copy, not yet warned about
        self._fork_child = False  # this process's copy was forked from the one that opened it
        self._counters: dict[str, int] = {
            "rows_queued": 0,
            "rows_written": 0,
            "dropped_rows": 0,
            "write_errors": 0,
            "bad_rows": 0,
            "segments_written": 0,
        }
        self._last_error: str | None = None
        self._warned: set[str] = set()
        self._loc: RunLocation | None = None
        self._meta = dict(meta or {})  # merged into meta.json on open, and again after update_meta()
        self._meta_lock = threading.Lock()  # guards _meta, _meta_version, _meta_pending; never held for I/O
        self._open_lock = threading.Lock()
        self._meta_version = 0
        self._meta_pending = True
        self._waiting = False  # the run directory would not open: the queued rows wait for it
        self._lost = False  # the last flush dropped rows (a write failed)
        self._tally: int | None = None  # bad rows of the build in progress (writer thread)
        # the run directory is opened, and meta.json written, by the writer thread: a hung mount
        # or an unreachable object store must never block the caller (flush() waits for both)
        self._thread = threading.Thread(target=self._run, name=f"rlscope-writer-{self.writer_id}", daemon=True)
        self._thread.start()
        _live_recorders.add(self)

    # -- caller-side API: enqueue only ---------------------------------------------------

    def log_step(self, step: int, metrics: Mapping[str, Any], *, attempt: int = 0) -> None:
        """Queue one step's metrics (any key; numbers, numpy scalars, NaN/inf, None or text)."""
        try:
            if len(metrics):  # an empty dict records nothing; None is a bad argument (TypeError)
                queued, nbytes = _queued_metrics(metrics)
                self._enqueue("steps", (step, attempt, time.time(), queued), len(queued), nbytes)
        except Exception as exc:  # noqa: BLE001
            self._fail("bad_rows", exc, count="bad_rows")

    def log_trajectories(
        self,
        step: int,
        rows: Iterable[Mapping[str, Any]] | Mapping[str, Any] | pa.Table,
        *,
        attempt: int = 0,
    ) -> None:
        """Queue per-trajectory rows (dicts, a dict of columns, or a pyarrow/pandas table).

        Keys follow the ``trajectories`` schema (``docs/run-directory.md``); unknown keys are
        ignored (a dict of columns or a table lets go of them at once; row dicts are weighed
        with them, from a few sampled rows). ``step`` and ``attempt`` (as in :meth:`log_step`:
        1, 2, ... when a restarted run generates the step again) apply to every row, so that
        the analyzers keep only the last attempt's trajectories of a step. ``submit_time`` and
        ``finish_time`` are seconds since the step's rollout began: a clock's time (``time.time()``)
        is kept, and warned about once, since the long tail would read it as a rollout of years.
        """
        try:
            if hasattr(rows, "to_dict") and hasattr(rows, "columns"):  # pandas DataFrame
                rows = _frame_table(rows[[c for c in rows.columns if c in TRAJECTORIES.names]])
            if isinstance(rows, pa.Table):
                names = rows.column_names  # a name twice: the first column, as for a DataFrame
                payload = rows.select(
                    [i for i, c in enumerate(names) if c in TRAJECTORIES.names and names.index(c) == i]
                )
                # a slice's share, not its parent's buffers; no column the schema has: no rows
                n, nbytes = (payload.num_rows if payload.num_columns else 0), payload.nbytes
            elif (
                isinstance(rows, Mapping)
                and any(k in TRAJECTORIES.names for k in rows)  # no field the schema has: no row
                and not any(_is_column(v) for k, v in rows.items() if k in TRAJECTORIES.names)
            ):
                payload = [dict(rows)]  # one row given as a dict of values
                n, nbytes = 1, _row_bytes(rows)
            elif isinstance(rows, Mapping):
                payload = {k: _column_snapshot(v) for k, v in rows.items() if k in TRAJECTORIES.names}
                n = max((len(v) for v in payload.values()), default=0)
                nbytes = sum(_column_bytes(v) for v in payload.values())
            else:  # the caller may reuse a row dict for the next call: each is copied
                payload = [dict(r) if isinstance(r, dict) else r for r in rows]
                n, nbytes = len(payload), _sampled_bytes(payload, _row_bytes)
            if n:
                self._enqueue("trajectories", (step, attempt, payload), n, nbytes)
        except Exception as exc:  # noqa: BLE001
            self._fail("bad_rows", exc, count="bad_rows")

    def span(self, step: int, phase: str, role: str = "trainer", host: str | None = None) -> _Span:
        """``with rec.span(step, "gen", role="rollout"):`` records the phase's start and end."""
        return _Span(self, {"step": step, "phase": phase, "role": role, "host": host or self.host})

    def log_span(
        self,
        step: int,
        phase: str,
        start: float,
        end: float,
        role: str = "trainer",
        host: str | None = None,
        *,
        attempt: int = 0,
    ) -> None:
        """Record a phase span whose start and end (unix seconds) were measured elsewhere."""
        host = host or self.host
        row = {"step": step, "attempt": attempt, "phase": phase, "role": role, "host": host, "start": start, "end": end}
        self._enqueue("spans", row, 1, _row_bytes(row))

    def log_gpu(self, samples: Iterable[Mapping[str, Any]]) -> None:
        """Queue NVML samples: dicts with ``time``, ``gpu``, ``util_pct``, ... (see the ``gpu`` schema)."""
        try:
            rows = [dict(r) if isinstance(r, dict) else r for r in samples]
            if rows:
                self._enqueue("gpu", rows, len(rows), _sampled_bytes(rows, _row_bytes))
        except Exception as exc:  # noqa: BLE001
            self._fail("bad_rows", exc, count="bad_rows")

    def log_job_start(self, when: float | None = None) -> None:
        """Record that a job of the run started: now, or at ``when`` (unix seconds). Call it once
        per job (a first run, a resume, a restart), from the one process that starts it, not from
        each worker: the exporter times the job's warm-up and first step from the first start
        logged since the run's last step, with the first-step limit (or the run's own, if longer).

        A ``when`` that is no finite number, or lies more than ``JOB_START_SKEW_SECONDS`` after
        now (milliseconds for seconds, a skewed clock), is refused with one warning and the job
        recorded as started now, the latest it can have: a start in the future would hold the
        stall and GPU-idle alerts off until then. One in the past is kept as given (the job is timed
        from it, and a restart more than the relaunch gap after it gets its own clock)."""
        try:
            now = time.time()
            try:
                started = now if when is None else _job_time(when, now)
            except (TypeError, ValueError, OverflowError) as exc:
                self._fail("job_start", exc)
                started = now
            row = {"time": started, "host": self.host, "pid": os.getpid()}
            self._enqueue("jobs", row, 1, _row_bytes(row))
        except Exception as exc:  # noqa: BLE001
            self._fail("bad_rows", exc, count="bad_rows")

    def log_logprob_delta(self, step: int, deltas: Any, *, source: str = "recorder", attempt: int = 0) -> None:
        """Queue per-token ``log p_trainer - log p_rollout`` (an array, a list, or a tensor of any
        float dtype: a GPU tensor is copied to the host, which waits for it); the writer builds
        the histogram. ``attempt`` as in :meth:`log_step`: the mismatch analyzer keeps a step's
        last attempt's histograms."""
        try:
            if hasattr(deltas, "detach"):  # a tensor (bf16, on the GPU, with grad): a float32 copy on the host
                deltas = deltas.detach().float().cpu().numpy()
            arr = np.array(deltas, dtype=np.float32, copy=True).ravel()
            self._enqueue("logprob", (step, attempt, arr, source, time.time()), 1, _VALUE_BYTES + arr.nbytes)
        except Exception as exc:  # noqa: BLE001
            self._fail("bad_rows", exc, count="bad_rows")

    def _enqueue(self, table: str, payload: Any, rows: int, nbytes: int) -> None:
        """Queue ``rows`` rows whose payload holds about ``nbytes``."""
        forked = wake = late = False
        with self._lock:
            if self._closed:
                self._counters["dropped_rows"] += rows
                forked, self._forked = self._forked, False
                late = not (self._fork_child or _exiting) and "after-close" not in self._warned
                self._warned.add("after-close")
            else:
                self._queue.append((table, payload, rows, nbytes))
                self._queued_rows += rows
                self._queued_bytes += nbytes
                self._counters["rows_queued"] += rows
                self._trim()
                pending = self._queued_rows >= self.flush_rows or 4 * self._queued_bytes >= self.max_queue_bytes
                wake = pending and not self._waiting  # no spinning on a dead disk
        if forked:  # once
            log.warning(
                "rlscope recorder (%s): this process was forked from the one that opened it and records "
                "nothing; to record from other processes, start them with the spawn or forkserver method",
                self.run_dir,
            )
        if late:  # once
            log.warning(
                "rlscope recorder (%s): a log_* call after close(); its rows are dropped and counted", self.run_dir
            )
        if wake:
            self._wake.set()

    def _trim(self) -> None:
        """Drop the oldest queued calls, counted, while the queue is over either bound (the
        newest call stays, however large). Called with the lock held."""
        while (self._queued_rows > self.max_queue_rows or self._queued_bytes > self.max_queue_bytes) and len(
            self._queue
        ) > 1:
            _, _, rows, nbytes = self._queue.popleft()
            self._queued_rows -= rows
            self._queued_bytes -= nbytes
            self._counters["dropped_rows"] += rows

    # -- flushing ----------------------------------------------------------------------

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Write everything queued so far; True if it was written within ``timeout`` seconds."""
        with self._lock:
            if not self._thread.is_alive():
                return False
            self._flush_requests += 1
            target = self._flush_requests
        self._wake.set()
        with self._flushed:
            done = self._flushed.wait_for(lambda: self._flush_done >= target or not self._thread.is_alive(), timeout)
            return done and self._flush_done >= target and not (self._waiting or self._lost or self._meta_pending)

    def close(self, timeout: float | None = 30.0) -> None:
        """Flush and stop the writer thread, waiting ``timeout`` seconds in all; later ``log_*``
        calls are counted as dropped. Rows still unwritten when it gives up are logged once."""
        if self._closed:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        self.flush(timeout)
        with self._lock:
            self._closed = True
        self._wake.set()
        self._thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        _live_recorders.discard(self)
        if self._thread.is_alive():
            status = self.status()
            log.warning(
                "rlscope recorder (%s): closed after %g s with %d rows not written (the writer is still busy: "
                "a stalled disk or a value that does not convert); they are lost unless it finishes",
                self.run_dir,
                timeout,
                status["queued_rows"] + status["rows_in_flight"],
            )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def status(self) -> dict[str, Any]:
        """Counters: rows queued, written and dropped, write errors, bad rows, last error."""
        with self._lock:
            return {
                **self._counters,
                "queued_rows": self._queued_rows,
                "rows_in_flight": self._in_flight,  # taken by the writer, not yet written
                "queued_bytes": self._queued_bytes,  # estimated
                "last_error": self._last_error,
                "writer": self.writer_id,
            }

    # -- background writer ----------------------------------------------------------------

    def _run(self) -> None:
        if self._meta_pending:  # opened at once, on this thread
            self._open()
        while True:
            self._wake.wait(self.flush_interval)
            self._wake.clear()
            with self._lock:
                batch = list(self._queue)
                self._queue.clear()
                self._in_flight, self._queued_rows, self._queued_bytes = self._queued_rows, 0, 0
                target = self._flush_requests
                closed = self._closed
            if self._meta_pending:  # the first open failed, or meta from update_meta()
                self._open()
            waiting, lost = self._waiting, False  # waiting lasts until a write succeeds
            if batch:
                waiting, lost = self._write(batch, last=closed)
            with self._flushed:
                self._in_flight = 0
                self._waiting, self._lost = waiting, lost
                self._flush_done = max(self._flush_done, target)
                self._flushed.notify_all()
            if closed:
                return

    def _write(self, batch: list[tuple[str, Any, int, int]], *, last: bool) -> tuple[bool, bool]:
        """Write ``batch``; (waiting, lost): waiting if the run directory would not open (the
        rows wait in the queue for the next flush, or, on the ``last`` flush, are dropped and
        counted), lost if a write failed and its rows were dropped."""
        self._check_meta()
        if not self._open():
            rows = sum(item[2] for item in batch)
            with self._lock:
                self._counters["write_errors"] += 1
                self._in_flight -= rows  # dropped below, or back in the queue
                if last:
                    self._counters["dropped_rows"] += rows
                else:  # first in line again, under the same bounds as any queued row
                    self._queue.extendleft(reversed(batch))
                    self._queued_rows += rows
                    self._queued_bytes += sum(item[3] for item in batch)
                    self._trim()
            return not last, last
        lost = False
        by_table: dict[str, list[tuple[Any, int]]] = {}
        for table, payload, rows, _ in batch:
            by_table.setdefault(table, []).append((payload, rows))
        for table, items in by_table.items():
            try:
                data = self._build(table, items)
                if data is None or data.num_rows == 0:
                    continue
                try:
                    self._seq += 1
                    write_segment(self._loc, table, data, writer_id=self.writer_id, seq=self._seq)
                except Exception as exc:  # noqa: BLE001
                    self._fail(f"write-{table}", exc, count="write_errors")
                    with self._lock:
                        self._counters["dropped_rows"] += data.num_rows
                    lost = True
                    continue
                with self._lock:
                    self._counters["rows_written"] += data.num_rows
                    self._counters["segments_written"] += 1
            finally:
                with self._lock:  # this table's calls are settled, written or not
                    self._in_flight -= sum(rows for _, rows in items)
        self._write_status()
        return False, lost

    def _check_meta(self) -> None:
        """A local run directory deleted since it was opened would be re-created by the next
        segment without meta.json (and be no run directory): write meta.json again first."""
        loc = self._loc
        if loc is None or not loc.is_local or os.path.exists(os.path.join(loc.path, META_FILE)):
            return
        self._fail("meta-gone", FileNotFoundError(f"{loc.path}/{META_FILE} went away; written again"))
        with self._meta_lock:
            self._meta_pending = True

    def update_meta(self, meta: Mapping[str, Any]) -> None:
        """Merge ``meta`` into meta.json, nested objects key by key, on the writer thread at
        once (``flush()`` returns when it is written)."""
        if self._closed:
            self._fail("update_meta", RuntimeError("the recorder is closed; meta not merged"))
            return
        with self._meta_lock:
            self._meta = merge_meta(self._meta, meta)
            self._meta_version += 1
            self._meta_pending = True
        self._wake.set()

    def _open(self) -> bool:
        """Whether the run directory is open, opening it (and merging pending meta into its
        meta.json) if need be; a failure is counted, logged once and tried again later."""
        with self._open_lock:  # one opener at a time; update_meta() never waits for it
            with self._meta_lock:
                if self._loc is not None and not self._meta_pending:
                    return True
                meta, version = dict(self._meta), self._meta_version
            try:
                loc = self._loc or locate(self.run_dir)
                # two Recorders of one run, in one process or several, must not drop each other's keys
                with _meta_file_lock(loc), _meta_process_lock(loc) as unlocked:
                    write_meta(loc, merge_meta(_existing_meta(loc), meta))
            except Exception as exc:  # noqa: BLE001 - a recorder never raises into training
                self._fail("meta", exc)
                return self._loc is not None  # open, only meta.json behind: rows still go in
            if unlocked:
                self._fail("meta-lock", TimeoutError(unlocked))
            with self._meta_lock:
                self._loc = loc
                self._meta_pending = self._meta_version != version  # more came meanwhile
            return True

    def _build(self, table: str, items: list[tuple[Any, int]]) -> pa.Table | None:
        """The queued calls of ``table`` as one Arrow table. If a value breaks the batch, each
        call is built alone, and only the calls that still fail are dropped (as bad rows)."""
        build = _BUILDERS[table]
        try:
            return self._tallied(build, [p for p, _ in items])
        except Exception:  # noqa: BLE001 - find the bad call below
            pass
        parts = []
        for payload, rows in items:
            try:
                parts.append(self._tallied(build, [payload]))
            except Exception as exc:  # noqa: BLE001
                self._fail(f"build-{table}", exc, count="bad_rows", rows=rows)
        parts = [t for t in parts if t.num_rows]
        return pa.concat_tables(parts) if parts else None

    def _tallied(self, build: Callable[[Recorder, list], pa.Table], payloads: list) -> pa.Table:
        """``build(self, payloads)``, counting the bad rows it finds only if it succeeds (a failed
        batch is built again call by call, which finds them again)."""
        self._tally = 0
        try:
            table = build(self, payloads)
            bad = self._tally
        finally:
            self._tally = None
        if bad:
            with self._lock:
                self._counters["bad_rows"] += bad
        return table

    def _close_in_child(self) -> None:
        """After a fork, in the child: fresh locks, an empty queue (the parent writes its own
        rows) and closed. The parent's writer thread may have been inside Arrow at the fork,
        whose locks the child inherits held, so the child must not write with it."""
        self._lock = threading.Lock()
        self._meta_lock = threading.Lock()
        self._open_lock = threading.Lock()
        self._wake = threading.Event()
        self._flushed = threading.Condition(self._lock)
        self._queue.clear()
        self._queued_rows = self._queued_bytes = self._in_flight = 0
        self._thread = threading.Thread(target=lambda: None)  # never started: flush() returns False
        self._forked = self._closed = self._fork_child = True

    def _write_status(self) -> None:
        if self._loc is None or not self._loc.is_local:
            return
        try:
            folder = os.path.join(self._loc.path, "_status")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, f"{self.writer_id}.json")
            tmp = path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(self.status(), fh)
            os.replace(tmp, path)
        except OSError:
            pass  # the status file is a convenience; the counters stay in memory

    def _warn_once(self, kind: str, message: str) -> None:
        """Log ``message`` the first time ``kind`` happens: a value kept as given that is likely a mistake."""
        with self._lock:
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            log.warning("rlscope recorder (%s): %s", self.run_dir, message)

    def _fail(self, kind: str, exc: BaseException, *, count: str | None = None, rows: int = 1) -> None:
        message = f"{type(exc).__name__}: {exc}"
        tally = count == "bad_rows" and self._tally is not None and threading.current_thread() is self._thread
        with self._lock:
            if tally:  # found while building a batch: counted when the batch is kept (_tallied)
                self._tally = (self._tally or 0) + rows
            elif count:
                self._counters[count] += rows if count == "bad_rows" else 1
            self._last_error = f"{kind}: {message}"
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            log.warning(
                "rlscope recorder (%s): %s: %s; training continues, see Recorder.status()", self.run_dir, kind, message
            )


def _build_steps(rec: Recorder, payloads: list[tuple[int, int, float, dict]]) -> pa.Table:
    steps: list[int] = []
    attempts: list[int] = []
    times: list[float] = []
    keys: list[str] = []
    values: list[float | None] = []
    texts: list[str | None] = []
    for step, attempt, when, metrics in payloads:
        try:
            s, a = _whole(step), _whole(attempt)
        except (TypeError, ValueError, OverflowError) as exc:
            rec._fail("bad_step", exc, count="bad_rows", rows=len(metrics))
            continue
        for key, value in metrics.items():
            v, t = _coerce(value)
            steps.append(s)
            attempts.append(a)
            times.append(when)
            keys.append(str(key))
            values.append(v)
            texts.append(t)
    return pa.table(
        {
            "step": pa.array(steps, pa.int64()),
            "attempt": pa.array(attempts, pa.int32()),
            "time": pa.array(times, pa.float64()),
            "key": _text_array(keys),
            "value": pa.array(values, pa.float64()),
            "text": _text_array(texts),
        }
    )


def _whole(value: Any) -> int:
    """A step or attempt number: 5, 5.0, "5" and numpy or torch scalars read as 5; 5.9 is
    refused (ValueError) rather than filed under step 5."""
    number = int(value)
    if not isinstance(value, (int, str)) and float(value) != number:
        raise ValueError(f"step {value!r} is not a whole number")
    return number


def _text_array(values: list[str | None]) -> pa.Array:
    """Text as Arrow; a lone surrogate (not UTF-8) becomes "?" rather than losing the call."""
    try:
        return pa.array(values, pa.string())
    except UnicodeEncodeError:
        return pa.array([v if v is None else v.encode("utf-8", "replace").decode("utf-8") for v in values], pa.string())


_INT_TEXT = re.compile(r"-?[0-9]+")  # the text Arrow casts to an integer ("+5" it refuses)


def _whole_or_refused(name: str, value: Any) -> Any:
    """``value`` for an integer column: an exact int where it is a whole number (text of digits,
    a whole float or Decimal, never through a float that would round 2**53 + 1), None for a
    NaN (a gap), a ValueError for a fraction, and anything else as it is (Arrow refuses it)."""
    if isinstance(value, str):
        return int(value) if _INT_TEXT.fullmatch(value) else value
    if isinstance(value, decimal.Decimal):
        if value.is_nan():
            return None
        if value != value.to_integral_value():
            raise ValueError(f"{name} {value!r} is not a whole number")
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None  # a gap in a pandas integer column: missing
        if not value.is_integer():  # Arrow would truncate 7.5 tokens to 7
            raise ValueError(f"{name} {value!r} is not a whole number")
        return int(value)
    return value


def _fitted(row: Mapping[str, Any], schema: pa.Schema) -> dict[str, Any]:
    """``row`` with its values made to fit their columns as Arrow casts a table's: a numpy or
    torch scalar as a Python one, a number where text goes as its text, 0/1 or "true"/"false"
    as a bool, a whole number (5.0, "5", a Decimal) as an int and a NaN there as missing; a
    fraction where a whole number goes is refused (ValueError), never truncated. Text that is
    not UTF-8 gets "?" for what is not."""
    out = dict(row)
    for field in schema:
        value = out.get(field.name)
        if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
            value = value.item()  # numpy and torch scalars (np.bool_ among them)
        if value is None:
            continue
        if isinstance(value, bool):
            if pa.types.is_integer(field.type):
                out[field.name] = int(value)  # as Arrow casts a bool column into an integer one
            continue
        if isinstance(value, str) and not value.isascii():  # a lone surrogate is no UTF-8: shown as "?"
            value = out[field.name] = value.encode("utf-8", "replace").decode("utf-8")
        if pa.types.is_string(field.type):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
        elif pa.types.is_boolean(field.type):
            if isinstance(value, int) and value in (0, 1):
                value = bool(value)
            elif isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                value = value.lower() in ("true", "1")
        elif pa.types.is_floating(field.type) and isinstance(value, str):
            with contextlib.suppress(ValueError):  # as Arrow casts text to a float; else refused below
                value = float(value)
        elif pa.types.is_integer(field.type) and not isinstance(value, int):
            value = _whole_or_refused(field.name, value)
        out[field.name] = value
    return out


_BUILD_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)
# what Arrow takes into an integer column as it is (anything else, a bool or a fraction it would
# truncate, goes through _fitted)
_INTEGER_TYPES = frozenset({int, type(None), np.int64, np.int32, np.int16, np.int8, np.uint32, np.uint16, np.uint8})


@functools.cache
def _integer_fields(schema: pa.Schema) -> tuple[str, ...]:
    return tuple(f.name for f in schema if pa.types.is_integer(f.type))


def _rows_table(
    rec: Recorder, rows: list[Mapping[str, Any]], schema: pa.Schema, *, keyed_rows: bool = True
) -> pa.Table:
    """Rows as ``schema``; a row without the key column (``step`` or ``time``) is a bad row,
    unless not ``keyed_rows`` (the call gives the key: a trajectory's step).

    If the rows do not build as they are (or an integer column holds something else), every
    row is made to fit (:func:`_fitted`) and they are built again at once; only if that fails
    too is each row built alone, so that a bad value loses its row alone and a batch of
    fixable ones costs two builds, not one per row.
    """
    names, key = schema.names, schema.names[0]
    cleaned = [{k: row.get(k) for k in names} for row in rows]
    keyed = [row for row in cleaned if row[key] is not None] if keyed_rows else cleaned
    if len(keyed) < len(cleaned):
        rec._fail(f"no-{key}", ValueError(f"a row without {key!r}"), count="bad_rows", rows=len(cleaned) - len(keyed))
    # Arrow would truncate 7.5 where an integer goes without a word: anything but an integer
    # there sends every row through _fitted, which keeps a whole number and refuses the rest
    fit = any(not _INTEGER_TYPES.issuperset({type(row[k]) for row in keyed}) for k in _integer_fields(schema))
    if not fit:
        try:
            return pa.Table.from_pylist(keyed, schema=schema)
        except _BUILD_ERRORS:
            pass  # a value that fits no column as it is
    fitted = []
    for row in keyed:
        try:
            fitted.append(_fitted(row, schema))
        except _BUILD_ERRORS as exc:
            rec._fail("bad-value", exc, count="bad_rows")
    try:
        return pa.Table.from_pylist(fitted, schema=schema)
    except _BUILD_ERRORS:
        pass  # a value that fits no column at all: keep the other rows
    good = []
    for row in fitted:
        try:
            good.append(pa.Table.from_pylist([row], schema=schema))
        except _BUILD_ERRORS as exc:
            rec._fail("bad-value", exc, count="bad_rows")
    return pa.concat_tables(good) if good else schema.empty_table()


def _frame_table(frame: Any) -> pa.Table:
    """A pandas frame as Arrow; a column of mixed types ("1", 2, "x") as its values' text, which
    the writer casts as it casts any table, so each column keeps Arrow's cast and a bad value
    loses its row alone (a name twice: the first column)."""
    frame = frame.loc[:, ~frame.columns.duplicated()]
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except _BUILD_ERRORS:
        pass
    columns = {}
    for name in frame.columns:
        try:
            columns[str(name)] = pa.array(frame[name], from_pandas=True)
        except _BUILD_ERRORS:
            columns[str(name)] = _text_array([_as_text(v) for v in frame[name].tolist()])
    return pa.table(columns)


def _as_text(value: Any) -> str | None:
    """A value of a mixed pandas column as text Arrow casts back: a gap (None, NaN, pd.NA, NaT)
    missing, a bool as "true", a whole float as "2" (so that it casts to an integer)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _as_rows(rows: dict[str, Any]) -> list[dict[str, Any]]:
    """A dict of equally long columns as row dicts (columns of unequal length are no rows:
    ValueError)."""
    columns = {k: v.tolist() if hasattr(v, "tolist") else list(v) for k, v in rows.items()}
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"columns of different lengths {sorted(lengths)}")
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _table_rows(rec: Recorder, table: pa.Table) -> pa.Table:
    """``table`` cast to the trajectories schema, a value that does not cast losing its row
    alone: Arrow's cast ("5" reads as 5, "true" as true, 7.5 where an integer goes is
    refused; a NaN there is missing, as in row dicts). A column that does not cast whole is
    halved until the values that fail are found: a few casts per bad value, not one per row
    (a column where most values fail costs about one cast per row)."""
    bad = np.zeros(table.num_rows, dtype=bool)
    error: list[BaseException] = []
    for field in TRAJECTORIES:
        if field.name not in table.column_names or table.column(field.name).type == field.type:
            continue
        column = table.column(field.name)
        if pa.types.is_integer(field.type) and pa.types.is_floating(column.type):
            column = pc.if_else(pc.is_nan(column), pa.scalar(None, column.type), column)
            table = table.set_column(table.column_names.index(field.name), field.name, column)
        for i in _uncast(column, field.type, 0, error):
            bad[i] = True
    if error:
        rec._fail("bad-value", error[0], count="bad_rows", rows=int(bad.sum()))
    if bad.all():
        return TRAJECTORIES.empty_table()
    return conform(table.filter(pa.array(~bad)), TRAJECTORIES)


_ONE_BY_ONE = 16  # a failing stretch this short is cast value by value rather than halved again


def _uncast(column: pa.ChunkedArray, kind: pa.DataType, offset: int, error: list[BaseException]) -> list[int]:
    """Positions (from ``offset``) of the values of ``column`` that do not cast to ``kind``;
    the first failure goes into ``error`` (one, not one per bad value)."""
    try:
        column.cast(kind)
        return []
    except _BUILD_ERRORS as exc:
        if len(column) <= _ONE_BY_ONE:
            bad = []
            for i in range(len(column)):
                try:
                    column.slice(i, 1).cast(kind)
                except _BUILD_ERRORS as one:
                    bad.append(offset + i)
                    if not error:
                        error.append(one)
            return bad
        del exc  # its traceback holds the whole column
    half = len(column) // 2
    return _uncast(column.slice(0, half), kind, offset, error) + _uncast(column.slice(half), kind, offset + half, error)


def _build_trajectories(rec: Recorder, payloads: list[tuple[int, int, Any]]) -> pa.Table:
    parts = []
    for step, attempt, rows in payloads:
        s, a = _whole(step), _whole(attempt)  # a bad one fails its call alone (Recorder._build)
        if isinstance(rows, dict):  # a dict of columns: a table, if its columns are of one type each
            try:
                rows = pa.table({k: v for k, v in rows.items() if k in TRAJECTORIES.names})
            except _BUILD_ERRORS:  # a column of mixed types: row by row
                rows = _as_rows(rows)
        if isinstance(rows, pa.Table):
            try:
                table = conform(rows, TRAJECTORIES)
            except _BUILD_ERRORS:  # a value that does not cast: its row alone is lost
                table = _table_rows(rec, rows)
        else:
            table = _rows_table(rec, rows, TRAJECTORIES, keyed_rows=False)
        table = conform(table, TRAJECTORIES)
        table = table.set_column(0, "step", pa.array([s] * table.num_rows, pa.int64()))
        table = table.set_column(1, "attempt", pa.array([a] * table.num_rows, pa.int32()))
        parts.append(table)
    table = pa.concat_tables(parts)
    _warn_clock_times(rec, table)
    return table


def _warn_clock_times(rec: Recorder, table: pa.Table) -> None:
    """Warn once per column of trajectory times that read as a clock's, as rollouts of decades (t90
    1.8e9 s, no tail): the rows are kept as given, and the readers measure no tail in their steps."""
    for name in TRAJECTORY_TIMES:
        times = table.column(name).to_numpy()  # a missing time is NaN
        clock = times[np.isfinite(times) & (times >= CLOCK_TIME_S)]
        if clock.size:
            rec._warn_once(
                f"clock-{name}",
                f"trajectories' {name} of {clock[0]:.0f} s reads as a clock's time, but it is the seconds since the "
                "step's rollout began (docs/run-directory.md), which the long tail measures from: rows kept as given, "
                "their steps' tails not measured",
            )


def _build_spans(rec: Recorder, rows: list[dict]) -> pa.Table:
    return _rows_table(rec, [r for r in rows if "end" in r], SPANS)


def _build_gpu(rec: Recorder, batches: list[list[Mapping[str, Any]]]) -> pa.Table:
    rows = [dict(r, host=r.get("host") or rec.host) for batch in batches for r in batch]
    return _rows_table(rec, rows, GPU)


def _build_jobs(rec: Recorder, rows: list[dict]) -> pa.Table:
    return _rows_table(rec, rows, JOBS)


def _build_logprob(rec: Recorder, payloads: list[tuple[int, int, np.ndarray, str, float]]) -> pa.Table:
    rows = [
        logprob_histogram_row(step, arr, source=source, when=when, attempt=_whole(attempt))
        for step, attempt, arr, source, when in payloads
    ]
    return pa.Table.from_pylist(rows, schema=LOGPROB)


_BUILDERS = {
    "steps": _build_steps,
    "spans": _build_spans,
    "trajectories": _build_trajectories,
    "gpu": _build_gpu,
    "logprob": _build_logprob,
    "jobs": _build_jobs,
}

_live_recorders: weakref.WeakSet[Recorder] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    global _META_LOCKS_GUARD  # the parent's writer may have held one at the fork
    _META_LOCKS_GUARD = threading.Lock()
    _META_LOCKS.clear()
    for rec in list(_live_recorders):
        rec._close_in_child()
    _live_recorders.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_exiting = False  # atexit closed every Recorder: background loggers that tick on are not warned of


@atexit.register
def _close_all() -> None:
    global _exiting
    _exiting = True
    for rec in list(_live_recorders):
        with contextlib.suppress(Exception):
            rec.close(timeout=10.0)


def iter_status(run_dir: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The status files that recorders left in ``run_dir/_status``."""
    folder = os.path.join(os.fspath(run_dir), "_status")
    if not os.path.isdir(folder):
        return
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            with contextlib.suppress(OSError, ValueError):
                with open(os.path.join(folder, name)) as fh:
                    yield json.load(fh)
