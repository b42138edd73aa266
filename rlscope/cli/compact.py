"""Merge each table's segments into one, without losing or duplicating a row.

usage: rlscope compact RUN_DIR

Safe while a writer is still appending: segments that appear during compaction are left
for the next run. A crash mid-way leaves nothing that a reader would count twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow.fs as pafs

from rlscope.advice.finding import fmt_count
from rlscope.cli._args import parser_for
from rlscope.errors import RunDirError
from rlscope.trace.compact import compact_run
from rlscope.trace.store import META_FILE, locate

__all__ = ["main"]


def main(argv: Sequence[str]) -> int:
    parser = parser_for("compact", __doc__)
    parser.add_argument("run_dir", metavar="RUN_DIR")
    args = parser.parse_args(argv)
    results = compact_run(args.run_dir)
    if not any(r.segments_before for r in results) and not _has_meta(args.run_dir):
        raise RunDirError(f"{args.run_dir}: no meta.json and no table segments: not an rlscope run directory")
    if not any(r.segments_before for r in results):
        print(f"{args.run_dir}: no table segments yet: nothing to compact")
    for r in results:
        if r.segments_before:
            print(
                f"{r.table:<13} {r.segments_before:>6} -> {fmt_count(r.segments_after, 'segment')}, {r.rows:,} row{'' if r.rows == 1 else 's'}"
            )
    return 0


def _has_meta(run_dir: str) -> bool:
    loc = locate(run_dir)
    return loc.fs.get_file_info(loc.join(META_FILE)).type != pafs.FileType.NotFound
