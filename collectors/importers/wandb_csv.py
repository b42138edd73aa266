"""Import a Weights & Biases history export (CSV) of a verl run.

The export (``run.history()`` / ``scan_history()`` written as CSV, or the run page's
download) has one row per logged step: ``_step`` (verl's step, which verl passes to
``wandb.log``), ``_runtime``, ``_timestamp`` (unix seconds, used as the row's time) and
one column per metric, empty where a step did not log it. Other W&B bookkeeping columns
(names starting with ``_``) are not imported. Cells that are not numbers (media and table
references) are skipped and counted.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rlscope.collectors.importers._common import (
    each_source,
    open_text_import,
    parse_number,
    run_import,
    source_lines,
    whole_step,
)
from rlscope.collectors.importers._sink import ImportSummary, StepSink
from rlscope.collectors.importers._source import IDLE, ImportInputError, Tail

__all__ = ["import_wandb_csv"]

_STEP_COLUMNS = ("_step", "step")


class _Rows:
    """The lines of one CSV source for ``csv.reader``, remembering the number of the last one and
    whether it was cut off (the last line, without its line end)."""

    def __init__(self, sink: StepSink, path: str, name: str, tail: Tail, follow: bool):
        self.name, self.lineno, self.cut = name, 0, False
        self._lines = source_lines(sink, path, name, tail, follow=follow)

    def __iter__(self) -> Iterator[str]:
        for item in self._lines:
            if item is not IDLE:
                self.lineno, line, self.cut = item
                yield line + "\n"


def _import_file(sink: StepSink, rows: _Rows) -> None:
    reader = csv.reader(rows)
    header = next(reader, None)
    if header is None:
        return
    step_col = next((header.index(c) for c in _STEP_COLUMNS if c in header), None)
    if step_col is None:
        raise ImportInputError(
            f"{rows.name}:1: no step column (one of {', '.join(_STEP_COLUMNS)}); is this a W&B history export?"
        )
    time_col = header.index("_timestamp") if "_timestamp" in header else None
    metric_cols = [(i, name) for i, name in enumerate(header) if name and not name.startswith("_") and i != step_col]
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # e.g. an oversized or malformed quoted cell: skip that row only
            sink.skip("bad_row", f"{rows.name}:{rows.lineno}", str(exc))
            continue
        where = f"{rows.name}:{rows.lineno}"
        if not any(cell.strip() for cell in row):
            continue
        if rows.cut:  # its last cell may stop mid-number
            row = _without_cut_cell(sink, where, header, row, step_col)
            if row is None:
                continue
        if len(row) != len(header):
            sink.skip("bad_row", where, f"{len(row)} cells, header has {len(header)}")
            continue
        number = parse_number(row[step_col])
        step = None if number is None else whole_step(number)
        if step is None:
            sink.skip("bad_row", where, f"step {row[step_col]!r}")
            continue
        when = parse_number(row[time_col]) if time_col is not None else None
        metrics: dict[str, float] = {}
        for i, name in metric_cols:
            cell = row[i].strip()
            if not cell:
                continue
            value = parse_number(cell)
            if value is None:
                sink.skip("non_numeric_value", where, name, bad=False)
            else:
                metrics[name] = value
        sink.add(step, metrics, when=when, where=where)


def _without_cut_cell(sink: StepSink, where: str, header: list[str], row: list[str], step_col: int) -> list[str] | None:
    """A cut-off last row with its last cell (maybe a number cut short) emptied and told, or None
    when that cell is the step, or the row stops short of its last column."""
    last = len(row) - 1
    whole = len(row) == len(header) and last != step_col
    sink.skip("cut_off_field", where, header[min(last, len(header) - 1)], bad=False)
    sink.note(
        f"{where}: the last line has no line end (copied while being written?); its last cell may be cut off, "
        + ("so it was left out" if whole else "so the row was left out")
    )
    return [*row[:last], ""] if whole else None


def import_wandb_csv(
    sources: Sequence[str | os.PathLike[str]],
    run_dir: str | os.PathLike[str],
    *,
    strict: bool = False,
    tail: Tail | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ImportSummary:
    """Import W&B history CSV exports (``-`` reads stdin) into ``run_dir``, row by row.

    Several files are read in order as one stream; with ``tail.follow`` the last one is
    followed until ``tail`` says stop or Ctrl-C. ``strict`` stops at the first bad row.
    """
    paths, tail, sink = open_text_import(sources, run_dir, "wandb-csv", strict=strict, tail=tail, meta=meta)

    def body() -> None:
        for path, name, follow in each_source(paths, tail):
            _import_file(sink, _Rows(sink, path, name, tail, follow))

    return run_import(sink, tail, body)
