"""Merge each table's segments into one, without losing or duplicating a row.

usage: rlscope compact RUN_DIR

Safe while a writer is still appending: segments that appear during compaction are left
for the next run. A crash mid-way leaves nothing that a reader would count twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from rlscope.cli._args import parser_for
from rlscope.trace.compact import compact_run

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    parser = parser_for("compact", __doc__)
    parser.add_argument("run_dir", metavar="RUN_DIR")
    args = parser.parse_args(argv)
    for r in compact_run(args.run_dir):
        if r.segments_before:
            print(f"{r.table:<13} {r.segments_before:>6} -> {r.segments_after} segments, {r.rows:,} rows")
    return 0
