"""Reading a run directory: whole tables, chosen columns, or only what is new since a cursor.

Each table folder is opened as a pyarrow dataset over its valid segments. A segment that
cannot be read (truncated, corrupt, a column of the wrong type) is skipped with one
warning naming the file; the rest of the run is still read. Segments are immutable once
renamed into place, so what is learnt from a segment's footer is cached by name and a
live refresh only opens the segments it has not seen.

A compacted segment records in its footer which original segments (and how many rows of
each) it holds. Readers use that to never count a row twice: an original still lying
beside its compacted copy is ignored, and an incremental read skips the rows of originals
it has already returned.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rlscope.errors import RunDirError
from rlscope.trace.schema import CLOCK_TIME_S, TABLES, TRAJECTORY_TIMES
from rlscope.trace.store import RunLocation, is_segment_name, locate, read_meta, require_directory

if TYPE_CHECKING:
    import pyarrow.compute as pc
    import pyarrow.dataset as ds

__all__ = ["ORIGINS_KEY", "Cursor", "RunReader", "SegmentInfo", "error_line"]

log = logging.getLogger("rlscope")

ORIGINS_KEY = b"rlscope.origins"
# A listing is cached only once its folder's mtime is this old: a second rename within the
# filesystem's timestamp granularity would otherwise leave the mtime unchanged.
_MTIME_SETTLE_NS = 2_000_000_000
# a segment whose data fails this many reads, over at least this long, is given up on (before:
# read again each time, in case the failure was the store's and passes)
_GIVE_UP_READS = 3
_GIVE_UP_S = 60.0


@dataclass(frozen=True)
class SegmentInfo:
    """What a segment's footer says: its rows and, if compacted, the originals it replaces."""

    name: str
    path: str
    rows: int
    origins: tuple[tuple[str, int], ...]
    # some row may hold an ``attempt`` above 0 (a restarted run's), as its footer's statistics
    # tell: readers that keep a step's last attempt read that column only where one does
    attempts: bool = False
    # the trajectory time columns (``TRAJECTORY_TIMES``) some row may hold a clock's time in
    # (``CLOCK_TIME_S`` or more), as its footer's statistics tell: readers check those alone
    clock_times: frozenset[str] = frozenset()


@dataclass
class Cursor:
    """Which segments (by original name) a live reader has already returned, per table."""

    seen: dict[str, set[str]] = field(default_factory=dict)

    def seen_in(self, table: str) -> set[str]:
        return self.seen.setdefault(table, set())


def _without_overlaps(segments: list[SegmentInfo]) -> list[SegmentInfo]:
    """Segments with no original held twice: two compactions that ran at once each merged the
    same inputs, so the one holding more of them (then the first by name) stands for both."""
    held: set[str] = set()
    kept = set()
    for seg in sorted(segments, key=lambda s: (-len(s.origins), s.name)):
        names = {origin for origin, _ in seg.origins}
        if names & held:
            continue
        held |= names
        kept.add(seg.name)
    return [s for s in segments if s.name in kept]


def _compatible(actual: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a segment column can be read as the schema's type without losing meaning."""
    if actual == expected or pa.types.is_null(actual):
        return True
    if pa.types.is_dictionary(actual):
        return _compatible(actual.value_type, expected)
    if pa.types.is_integer(expected):
        return pa.types.is_integer(actual)
    if pa.types.is_floating(expected):
        return pa.types.is_integer(actual) or pa.types.is_floating(actual)
    if pa.types.is_string(expected):
        return pa.types.is_string(actual) or pa.types.is_large_string(actual)
    if pa.types.is_list(expected):
        return (pa.types.is_list(actual) or pa.types.is_large_list(actual)) and _compatible(
            actual.value_type, expected.value_type
        )
    return False


def _dictionary_schema(schema: pa.Schema, encoded: set[str]) -> pa.Schema:
    """``schema`` with the string columns in ``encoded`` typed as dictionaries of strings."""
    if not encoded:
        return schema
    fields = [
        pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable)
        if f.name in encoded and pa.types.is_string(f.type)
        else f
        for f in schema
    ]
    return pa.schema(fields, metadata=schema.metadata)


def error_line(exc: BaseException) -> str:
    """The first line of an error, printable (a decoder's message may quote the bytes it met)."""
    lines = str(exc).splitlines()
    text = lines[0] if lines else type(exc).__name__
    return "".join(c if c.isprintable() else "?" for c in text)


def _may_reach(metadata: pq.FileMetaData, schema: pa.Schema, name: str, least: float) -> bool:
    """Whether a segment's column ``name`` may hold a value of ``least`` or more: False when it has
    no such column or every row group's statistics say its values are below it or missing (no data
    read; a float column's statistics leave NaN out)."""
    if name not in schema.names:
        return False
    leaves = [metadata.schema.column(j).path for j in range(metadata.num_columns)]  # a list column is a leaf too
    index = leaves.index(name)
    for i in range(metadata.num_row_groups):
        column = metadata.row_group(i).column(index)
        stats = column.statistics
        if stats is None:
            return True
        if stats.null_count == column.num_values:
            continue
        if not stats.has_min_max or stats.max >= least:
            return True
    return False


@dataclass
class _Prefetch:
    """A read started in the background: its columns by name, until each is taken (see
    :meth:`RunReader.prefetch`)."""

    read: Future[dict[str, pa.ChunkedArray]]
    encoded: frozenset[str]
    untaken: set[str]
    segments: list[SegmentInfo]


class RunReader:
    """Read the tables of one run directory (a local path or a pyarrow filesystem URI).

    ``RunReader(run_dir)`` checks that the directory exists and holds rlscope data and
    reads ``meta.json`` (a missing or invalid one is an error naming the file; pass
    ``require_meta=False`` to read the tables anyway). ``read(table, columns)`` returns a
    ``pyarrow.Table`` of the schema's columns; ``read_new(table, cursor)`` returns only the
    rows added since the cursor last saw the table, and advances it.
    """

    def __init__(self, run_dir: str | os.PathLike[str] | RunLocation, *, require_meta: bool = True):
        self.location = locate(run_dir)
        self._check_directory()
        self.meta: dict = read_meta(self.location) if require_meta else {}
        self._segments: dict[str, SegmentInfo | None] = {}
        self._listings: dict[str, tuple[int, list[SegmentInfo]]] = {}  # table -> (folder mtime, segments)
        self.warnings: list[str] = []
        self._failed_reads: dict[str, tuple[int, float]] = {}  # path -> (failed reads, first failure)
        self._prefetched: dict[tuple[str, tuple[str, ...]], _Prefetch] = {}  # (table, segment paths) -> read
        self._prefetch_lock = threading.Lock()
        self._warn_lock = threading.Lock()

    # -- discovery ---------------------------------------------------------------------

    def _check_directory(self) -> None:
        loc = require_directory(self.location)
        try:
            entries = loc.fs.get_file_info(pafs.FileSelector(loc.path))
        except OSError as exc:
            raise RunDirError(f"{loc.path}: cannot list ({exc})") from None
        if not entries:
            raise RunDirError(f"{loc.path}: empty directory, not an rlscope run directory")

    def _warn(self, message: str) -> None:
        with self._warn_lock:  # two threads may read at once (analyze_run's)
            if message in self.warnings:  # a table read again (a column at a time) warns once
                return
            self.warnings.append(message)
        log.warning(message)

    def segments(self, table: str) -> list[SegmentInfo]:
        """Valid segments of ``table`` in name order, with compaction leftovers removed."""
        if table not in TABLES:
            raise RunDirError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
        loc = self.location
        folder = loc.join(table)
        info = loc.fs.get_file_info(folder)
        if info.type == pafs.FileType.NotFound:
            if loc.is_local and os.path.islink(folder) and folder not in self._segments:  # unmounted storage?
                self._segments[folder] = None
                self._warn(f"{folder}: a link to {os.readlink(folder)}, which does not exist; table {table} skipped")
            return []
        if info.type != pafs.FileType.Directory:
            if folder not in self._segments:
                self._segments[folder] = None
                self._warn(f"{folder}: is a file, expected a folder of segments; table {table} skipped")
            return []
        # A segment appears or goes only by a rename or delete in its folder, which changes the
        # folder's mtime: while that is unchanged, the last listing still holds (live refreshes
        # of a long run then cost one stat, not a walk over thousands of segments).
        mtime = info.mtime_ns
        cached = self._listings.get(table)
        if cached is not None and mtime is not None and cached[0] == mtime:
            return cached[1]
        entries = loc.fs.get_file_info(pafs.FileSelector(folder))
        names = sorted(e.base_name for e in entries if e.is_file and is_segment_name(e.base_name))
        infos = [s for s in (self._segment(table, folder, n) for n in names) if s is not None]
        replaced = {origin for s in infos for origin, _ in s.origins if origin != s.name}
        listing = _without_overlaps([s for s in infos if s.name not in replaced])
        if mtime is not None and time.time_ns() - mtime > _MTIME_SETTLE_NS:
            self._listings[table] = (mtime, listing)
        return listing

    def _segment(self, table: str, folder: str, name: str) -> SegmentInfo | None:
        path = f"{folder}/{name}"
        if path in self._segments:
            return self._segments[path]
        result: SegmentInfo | None = None
        try:
            with self.location.fs.open_input_file(path) as fh:
                pf = pq.ParquetFile(fh)
                schema = pf.schema_arrow
                rows = pf.metadata.num_rows
                kv = pf.metadata.metadata or {}
        except (OSError, pa.ArrowException) as exc:
            self._warn(f"{path}: unreadable segment skipped ({error_line(exc)})")
        else:
            problem = self._schema_problem(table, schema)
            if problem:
                self._warn(f"{path}: segment skipped, {problem}")
            else:
                origins = tuple((str(n), int(r)) for n, r in json.loads(kv[ORIGINS_KEY])) if ORIGINS_KEY in kv else ()
                attempts = _may_reach(pf.metadata, schema, "attempt", 1)  # an attempt above 0
                clock = frozenset(
                    c
                    for c in TRAJECTORY_TIMES
                    if table == "trajectories" and _may_reach(pf.metadata, schema, c, CLOCK_TIME_S)
                )
                result = SegmentInfo(name, path, rows, origins or ((name, rows),), attempts, clock)
        self._segments[path] = result
        return result

    @staticmethod
    def _schema_problem(table: str, schema: pa.Schema) -> str | None:
        expected = TABLES[table]
        for fld in expected:
            idx = schema.get_field_index(fld.name)
            if idx < 0:
                if not fld.nullable:
                    return f"required column {fld.name!r} is missing"
                continue
            actual = schema.field(idx).type
            if not _compatible(actual, fld.type):
                return f"column {fld.name!r} has type {actual}, expected {fld.type}"
        return None

    # -- reading -----------------------------------------------------------------------

    def tables(self) -> list[str]:
        """Names of the tables that have at least one readable segment."""
        return [t for t in TABLES if self.segments(t)]

    def row_count(self, table: str) -> int:
        """Rows in ``table``, from segment footers alone (no data read)."""
        return sum(s.rows for s in self.segments(table))

    def dataset(
        self, table: str, segments: Sequence[SegmentInfo] | None = None, dictionary: Iterable[str] = ()
    ) -> ds.Dataset:
        """The table (or the given segments of it) as a pyarrow dataset with rlscope's schema.

        String columns named in ``dictionary`` are read dictionary-encoded.
        """
        import pyarrow.dataset as ds  # imports pandas: 0.2 s that commands which read nothing skip

        segs = self.segments(table) if segments is None else segments
        schema = _dictionary_schema(TABLES[table], set(dictionary))
        encoded = {f.name for f in schema if pa.types.is_dictionary(f.type)}
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=encoded))
        return ds.dataset([s.path for s in segs], schema=schema, format=fmt, filesystem=self.location.fs)

    def read(
        self,
        table: str,
        columns: Iterable[str] | None = None,
        filter: pc.Expression | None = None,
        dictionary: Iterable[str] = (),
        segments: Sequence[SegmentInfo] | None = None,
    ) -> pa.Table:
        """Read ``table`` (only ``columns`` if given); an absent table reads as zero rows.

        String columns named in ``dictionary`` come back dictionary-encoded (pandas: categorical),
        which spares a string per row when a column repeats few values (engine, data source).
        ``segments`` (from :meth:`segments`) pins what is read, so that columns read one at a
        time line up even while a live run adds segments.
        """
        return self.read_available(table, columns, filter, dictionary, segments)[0]

    def read_available(
        self,
        table: str,
        columns: Iterable[str] | None = None,
        filter: pc.Expression | None = None,
        dictionary: Iterable[str] = (),
        segments: Sequence[SegmentInfo] | None = None,
    ) -> tuple[pa.Table, set[str]]:
        """:meth:`read`, and the paths of the segments left out of it because their data did
        not read (each warned about once): a caller that lines up columns read one at a time
        needs to know whose rows are missing."""
        cols = self._columns(table, columns)
        encoded = [c for c in self._columns(table, dictionary) if c in cols]
        segs = self.segments(table) if segments is None else segments
        empty = _dictionary_schema(TABLES[table], set(encoded)).empty_table().select(cols)
        if not segs:
            return empty, set()
        taken = self._take_prefetched(table, segs, cols, encoded) if filter is None else None
        if taken is not None:
            return taken
        data, left_out, _ = self._scan(table, segs, cols, encoded, filter)
        return (data if data is not None else empty), left_out

    def prefetch(
        self,
        table: str,
        columns: Iterable[str],
        dictionary: Iterable[str] = (),
        segments: Sequence[SegmentInfo] | None = None,
    ) -> None:
        """Start reading ``columns`` of ``table`` (over ``segments``, default all) in the background.

        A later unfiltered read of some of them over the same segments, encoded alike, takes
        them from it (each column once, so that its memory goes with the taker) instead of
        reading again: a command starts its big read, then imports its analysis meanwhile.
        If some segment does not read, the prefetch says nothing and holds nothing: each taker
        reads again, and its read warns of what it could not read, as reads do. A prefetch over
        another listing of the table (segments landed meanwhile) replaces the one before.
        """
        cols = self._columns(table, columns)
        encoded = frozenset(c for c in self._columns(table, dictionary) if c in cols)
        segs = list(self.segments(table) if segments is None else segments)
        key = (table, tuple(s.path for s in segs))
        with self._prefetch_lock:
            if not segs or key in self._prefetched:
                return
            for older in [k for k in self._prefetched if k[0] == table]:  # over an older listing: let go
                del self._prefetched[older]
            pool = ThreadPoolExecutor(1, thread_name_prefix="rlscope-prefetch")
            read = pool.submit(self._read_columns, table, segs, cols, list(encoded))
            pool.shutdown(wait=False)
            self._prefetched[key] = _Prefetch(read, encoded, set(cols), segs)

    def prefetched_segments(self, table: str) -> list[SegmentInfo] | None:
        """The segments a prefetch of ``table`` reads, or None: a reader that lines its columns up
        over one listing (``Trajectories``) takes this one, so that segments landing since the
        prefetch began do not make it read everything again."""
        with self._prefetch_lock:
            fetches = [fetch for (name, _), fetch in self._prefetched.items() if name == table]
        return list(fetches[0].segments) if fetches else None

    def _read_columns(
        self, table: str, segs: Sequence[SegmentInfo], cols: list[str], encoded: list[str]
    ) -> dict[str, pa.ChunkedArray]:
        # raises for a segment that does not read; a remote store's objects are fetched by a dataset
        # scan, which overlaps their requests where a file at a time would wait on each in turn
        if self.location.is_local:
            data = self._read_files(table, segs, cols, encoded)
        else:
            data = self.dataset(table, segs, encoded).to_table(columns=cols)
        return dict(zip(data.column_names, data.columns, strict=True))

    def _take_prefetched(
        self, table: str, segs: Sequence[SegmentInfo], cols: list[str], encoded: list[str]
    ) -> tuple[pa.Table, set[str]] | None:
        """``cols`` from a prefetch over ``segs`` that holds them all untaken, encoded as asked (and
        no segment left out: a prefetch reads every segment or fails); None if there is none, or
        it failed."""
        key = (table, tuple(s.path for s in segs))
        with self._prefetch_lock:
            fetch = self._prefetched.get(key)
            if fetch is None or not fetch.untaken.issuperset(cols) or fetch.encoded & set(cols) != set(encoded):
                return None
            if len(set(cols)) < len(cols):  # a column asked for twice: each is taken once
                return None
            fetch.untaken.difference_update(cols)
            if not fetch.untaken:
                del self._prefetched[key]
        try:
            data = fetch.read.result()
        except Exception:  # noqa: BLE001 - read again by the caller, a column at a time, which warns of what fails
            return None
        schema = _dictionary_schema(TABLES[table], set(encoded))
        fields = pa.schema([schema.field(c) for c in cols])
        return pa.Table.from_arrays([data.pop(c) for c in cols], schema=fields), set()

    def _scan(
        self,
        table: str,
        segs: Sequence[SegmentInfo],
        cols: list[str],
        encoded: Iterable[str] = (),
        filter: pc.Expression | None = None,
    ) -> tuple[pa.Table | None, set[str], set[str]]:
        """``segs`` read in one scan, the paths left out of it, and those of them skipped for good. If the scan fails,
        each segment is read alone; one whose data does not read even whole and unfiltered
        (bytes overwritten behind a footer that reads, or a store that is down) is left out of
        this read with a warning, and skipped for good once it has failed
        ``_GIVE_UP_READS`` reads over ``_GIVE_UP_S`` seconds. An error that is not the data's
        (a filter of the caller's) is raised."""
        encoded = list(encoded)

        def scan(some: Sequence[SegmentInfo]) -> pa.Table:
            return self.dataset(table, some, encoded).to_table(columns=cols, filter=filter)

        try:
            return scan(segs), set(), set()
        except FileNotFoundError:  # a segment compacted away meanwhile: the caller says so
            raise
        except (OSError, pa.ArrowInvalid):
            pass
        parts, left_out, given_up = [], set(), set()
        for seg in segs:
            try:
                parts.append(scan([seg]))
                continue
            except FileNotFoundError:
                raise
            except (OSError, pa.ArrowInvalid) as exc:
                problem = exc
            try:
                self.dataset(table, [seg]).to_table()  # the whole segment reads: the error was not its data's
            except FileNotFoundError:
                raise
            except (OSError, pa.ArrowInvalid):
                what = (
                    ""
                    if set(cols) >= set(TABLES[table].names)
                    else f" in {', '.join(cols)}"
                    if len(cols) <= 3
                    else f" in one of the {len(cols)} columns read"
                )
                self._warn(f"{seg.path}: unreadable data{what} ({error_line(problem)}); skipped")
                left_out.add(seg.path)
                count, first = self._failed_reads.get(seg.path, (0, time.monotonic()))
                self._failed_reads[seg.path] = (count + 1, first)
                if count + 1 >= _GIVE_UP_READS and time.monotonic() - first >= _GIVE_UP_S:
                    given_up.add(seg.path)
                continue
            parts.append(scan([seg]))  # a blip that passed reads now; the caller's own error raises
        data = pa.concat_tables(parts, promote_options="permissive") if parts else None
        return data, left_out, given_up

    def _read_files(self, table: str, segs: Sequence[SegmentInfo], cols: list[str], encoded: list[str]) -> pa.Table:
        """``segs``'s ``cols`` read a file at a time with pyarrow.parquet, typed as a dataset types
        them (a column a segment lacks is all null; an older type is cast): a prefetch's read.
        Unlike a dataset, this imports no pandas (0.4 s), so a command can read while it imports
        its analysis; a dataset reads many small segments faster (1.4x, 2,000 of 300 rows)."""
        target = _dictionary_schema(TABLES[table], set(encoded))
        fields = [target.field(c) for c in cols]
        parts = []
        for seg in segs:
            with self.location.fs.open_input_file(seg.path) as fh:
                # pre-buffered: the columns' byte ranges fetched in few large reads, in parallel
                pf = pq.ParquetFile(fh, pre_buffer=True)
                names = set(pf.schema_arrow.names)
                if any(c in names for c in encoded):  # the footer parsed once
                    dictionary = [c for c in encoded if c in names]
                    pf = pq.ParquetFile(fh, metadata=pf.metadata, read_dictionary=dictionary, pre_buffer=True)
                data = pf.read(columns=[c for c in cols if c in names])
            columns = [data.column(f.name) if f.name in names else pa.nulls(data.num_rows, f.type) for f in fields]
            columns = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, fields, strict=True)]
            parts.append(pa.Table.from_arrays(columns, schema=pa.schema(fields)))
        return pa.concat_tables(parts)

    def read_new(self, table: str, cursor: Cursor, columns: Iterable[str] | None = None) -> pa.Table:
        """Rows of ``table`` added since ``cursor`` last saw it; advances the cursor.

        Segments none of whose rows were seen are read together in one scan (a first read
        of a long run is one dataset, not one per segment); a compacted segment that holds
        some seen rows is read alone and sliced.
        """
        cols = self._columns(table, columns)
        seen = cursor.seen_in(table)
        whole: list[SegmentInfo] = []
        partial: list[SegmentInfo] = []
        for seg in self.segments(table):
            if seg.name in seen or all(o in seen for o, _ in seg.origins):
                seen.add(seg.name)
            elif any(o in seen for o, _ in seg.origins):
                partial.append(seg)
            else:
                whole.append(seg)
        parts: list[pa.Table] = []
        left_out: set[str] = set()  # not marked seen, so read again next time, unless given up on
        given_up: set[str] = set()
        if whole:
            data, left_out, given_up = self._scan(table, whole, cols)
            if data is not None:
                parts.append(data)
        for seg in partial:
            data, missed, dropped = self._scan(table, [seg], cols)
            left_out |= missed
            given_up |= dropped
            if data is None:
                continue
            offset = 0
            for origin, rows in seg.origins:
                if origin not in seen:
                    parts.append(data.slice(offset, rows))
                offset += rows
        for seg in whole + partial:
            if seg.path not in left_out or seg.path in given_up:
                seen.add(seg.name)
                seen.update(o for o, _ in seg.origins)
        if not parts:
            return TABLES[table].empty_table().select(cols)
        return pa.concat_tables(parts)

    @staticmethod
    def _columns(table: str, columns: Iterable[str] | None) -> list[str]:
        if table not in TABLES:
            raise RunDirError(f"unknown table {table!r}; tables are {', '.join(TABLES)}")
        names = TABLES[table].names
        if columns is None:
            return list(names)
        cols = list(columns)
        unknown = [c for c in cols if c not in names]
        if unknown:
            raise RunDirError(f"table {table} has no column {unknown[0]!r}")
        return cols
