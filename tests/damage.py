"""Damage a segment the way a bad disk or a torn copy does: its footer still reads, its data does not."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq


def damage_column(path: Path, column: str, row_group: int = 0) -> None:
    """Overwrite ``column``'s pages of one row group in the segment at ``path``; the rest still reads."""
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(row_group).column(meta.schema.to_arrow_schema().get_field_index(column))
    start = min(o for o in (chunk.dictionary_page_offset, chunk.data_page_offset) if o is not None)
    data = bytearray(path.read_bytes())
    data[start : start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
