"""Merging a table's many small segments into one, without losing or duplicating a row.

The merged segment is written under a temporary name, renamed into place, and only then
are its inputs deleted. Its footer lists the inputs (by original name, with row counts),
so a crash between the rename and the deletes leaves duplicates on disk that every reader
ignores, and the next compaction deletes. Segments that appear while compacting (a live
writer) are left alone.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import pyarrow.parquet as pq

from rlscope.trace.reader import ORIGINS_KEY, RunReader
from rlscope.trace.schema import TABLES
from rlscope.trace.store import RunLocation, new_writer_id, segment_name, tmp_path_for

__all__ = ["CompactResult", "compact_run"]


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
        leftovers = _leftover_originals(reader, table, segments)
        for path in leftovers:
            loc.fs.delete_file(path)
        if len(segments) <= 1:
            results.append(CompactResult(table, len(segments), len(segments), sum(s.rows for s in segments)))
            continue
        origins = [list(o) for s in segments for o in s.origins]
        schema = TABLES[table].with_metadata({ORIGINS_KEY: json.dumps(origins).encode()})
        dest = f"{loc.join(table)}/{segment_name(writer_id, 0)}"
        tmp = tmp_path_for(dest)
        with loc.fs.open_output_stream(tmp) as sink, pq.ParquetWriter(sink, schema, compression="zstd") as out:
            for seg in segments:
                # one input at a time: memory stays at one segment, row order follows the origins
                out.write_table(reader.dataset(table, [seg]).to_table().replace_schema_metadata(schema.metadata))
        loc.fs.move(tmp, dest)
        for seg in segments:
            loc.fs.delete_file(seg.path)
        results.append(CompactResult(table, len(segments), 1, sum(s.rows for s in segments)))
    return results


def _leftover_originals(reader: RunReader, table: str, live: list) -> list[str]:
    """Paths of segments that a compacted segment already holds (a crash left them behind)."""
    folder = reader.location.join(table)
    live_names = {s.name for s in live}
    replaced = {o for s in live for o, _ in s.origins if o != s.name}
    return [
        path
        for path, info in reader._segments.items()
        if info is not None and path.startswith(folder + "/") and info.name in replaced and info.name not in live_names
    ]
