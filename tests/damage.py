"""Damage a segment the way a bad disk or a torn copy does: its footer still reads, its data does not."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq


def damage_column(path: Path, column: str) -> None:
    """Overwrite ``column``'s pages in the segment at ``path``; the other columns still read."""
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(0).column(meta.schema.to_arrow_schema().get_field_index(column))
    start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None)
    data = bytearray(path.read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
