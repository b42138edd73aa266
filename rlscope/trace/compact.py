"""Merging a table's many small segments into one, without losing or duplicating a row.

The merged segment is written under a temporary name, renamed into place, and only then
are its inputs deleted. Its footer lists the inputs (by original name, with row counts),
so a crash between the rename and the deletes leaves duplicates on disk that every reader
ignores, and the next compaction deletes. Two compactions at once each write a merged
segment of the same inputs; readers keep one of them, and the next compaction deletes the
other, and temporary files of writes that died over an hour ago. Segments that appear while compacting
(a live writer) are left alone. A segment whose footer does not read is no segment to readers:
it stays, with a warning, and the others are merged. A table one of whose segments has data
that does not read is left as it is, with a warning naming the file; a copy is deleted only
when the segment that holds its rows reads whole.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rlscope.errors import RunDirError
from rlscope.trace.reader import ORIGINS_KEY, RunReader, SegmentInfo, error_line
from rlscope.trace.schema import TABLES
from rlscope.trace.store import RunLocation, new_writer_id, segment_name, tmp_path_for

__all__ = ["CompactResult", "compact_run"]

log = logging.getLogger("rlscope")

_STALE_TMP_NS = 3600 * 10**9  # a temporary file older than this belongs to a write that died


@dataclass(frozen=True)
class CompactResult:
    table: str
    segments_before: int
    segments_after: int
    rows: int


def compact_run(run_dir: str | os.PathLike[str] | RunLocation) -> list[CompactResult]:
    """Compact every table of ``run_dir``; return what changed per table."""
    reader = RunReader(run_dir, require_meta=False)
    loc = reader.location
    writer_id = "compact" + new_writer_id().rsplit("-", 1)[-1]
    results = []
    for table in TABLES:
        segments = reader.segments(table)
        leftovers = _leftover_originals(reader, table, segments) + _stale_temporaries(loc, table)
        for path in leftovers:
            with contextlib.suppress(FileNotFoundError):
                loc.fs.delete_file(path)
        if len(segments) <= 1:
            results.append(CompactResult(table, len(segments), len(segments), sum(s.rows for s in segments)))
            continue
        origins = [list(o) for s in segments for o in s.origins]
        schema = TABLES[table].with_metadata({ORIGINS_KEY: json.dumps(origins).encode()})
        dest = f"{loc.join(table)}/{segment_name(writer_id, 0)}"
        tmp = tmp_path_for(dest)
        try:
            with loc.fs.open_output_stream(tmp) as sink, pq.ParquetWriter(sink, schema, compression="zstd") as out:
                for seg in segments:
                    # one input at a time: memory stays at one segment, row order follows the origins
                    out.write_table(_read_whole(reader, table, seg).replace_schema_metadata(schema.metadata))
        except BaseException as exc:  # a full disk, Ctrl-C: leave no partial file to fill the disk further
            with contextlib.suppress(OSError):
                loc.fs.delete_file(tmp)
            if isinstance(exc, _Unreadable):
                # all or nothing: a merge of some inputs could overlap another compaction's merge of
                # others without either holding the other, which readers cannot settle
                log.warning(
                    "%s: unreadable data (%s); table %s left as it is: move the file out, then compact", *exc.args
                )
                results.append(CompactResult(table, len(segments), len(segments), sum(s.rows for s in segments)))
                continue
            if isinstance(exc, FileNotFoundError):
                raise RunDirError(
                    f"a {table} segment went away while compacting (another rlscope compact?): {exc}; "
                    "nothing was lost, run it again"
                ) from None
            if isinstance(exc, OSError):  # say where
                raise RunDirError(
                    f"{loc.join(table)}: cannot write the merged segment ({exc.strerror or error_line(exc)}); "
                    "the table is left as it was"
                ) from None
            raise
        loc.fs.move(tmp, dest)
        for seg in segments:
            with contextlib.suppress(FileNotFoundError):  # another compaction deleted it first
                loc.fs.delete_file(seg.path)
        results.append(CompactResult(table, len(segments), 1, sum(s.rows for s in segments)))
    return results


class _Unreadable(Exception):
    """A segment whose data does not read: (path, reason, table)."""


def _read_whole(reader: RunReader, table: str, seg: SegmentInfo) -> pa.Table:
    try:
        return reader.dataset(table, [seg]).to_table()
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise _Unreadable(seg.path, error_line(exc), table) from None


def _stale_temporaries(loc: RunLocation, table: str) -> list[str]:
    """Temporary files of writes that died (a full disk, SIGKILL) over an hour ago: a live
    write renames its temporary within seconds."""
    try:
        entries = loc.fs.get_file_info(pafs.FileSelector(loc.join(table)))
    except (FileNotFoundError, NotADirectoryError):
        return []
    cutoff = time.time_ns() - _STALE_TMP_NS
    return [
        e.path
        for e in entries
        if e.is_file and e.base_name.startswith(".") and e.base_name.endswith(".tmp") and (e.mtime_ns or 0) < cutoff
    ]


def _leftover_originals(reader: RunReader, table: str, live: list) -> list[str]:
    """Paths of segments whose every row a live segment already holds: inputs a crash left
    behind, or the merged copy of a compaction that ran beside another."""
    folder = reader.location.join(table)
    live_names = {s.name for s in live}
    holder = {o: s for s in live for o, _ in s.origins}
    reads: dict[str, bool] = {}

    def whole(seg: SegmentInfo) -> bool:  # a copy that does not read is no copy: keep the other
        if seg.name not in reads:
            try:
                _read_whole(reader, table, seg)
                reads[seg.name] = True
            except (_Unreadable, FileNotFoundError):  # or gone: another compaction's
                reads[seg.name] = False
        return reads[seg.name]

    return [
        path
        for path, info in reader._segments.items()
        if info is not None
        and path.startswith(folder + "/")
        and info.name not in live_names
        and all(o in holder for o, _ in info.origins)
        and all(whole(holder[o]) for o, _ in info.origins)
    ]
