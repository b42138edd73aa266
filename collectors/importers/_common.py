"""What the importers share: number parsing, walking their sources, and the run loop that
turns Ctrl-C into a clean stop."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from rlscope.collectors.importers._sink import ImportSummary, StepSink
from rlscope.collectors.importers._source import IDLE, Tail, check_text_file, read_lines

__all__ = ["each_source", "open_text_import", "parse_number", "run_import", "source_lines", "whole_step"]

_WRAPPED = re.compile(r"^(?:np|numpy)\.\w+\((.*)\)$")  # numpy 2 reprs: np.float64(0.5), np.int64(3)
_BOOLS = {"True": 1.0, "true": 1.0, "False": 0.0, "false": 0.0}


def parse_number(text: str) -> float | None:
    """A logged number as float (``nan``, ``inf``, ``1e-06``, ``np.float64(0.5)``, ``True``), else None."""
    text = text.strip()
    match = _WRAPPED.match(text)
    if match:
        text = match.group(1).strip()
    if text in _BOOLS:
        return _BOOLS[text]
    try:
        return float(text)
    except ValueError:
        return None


def whole_step(value: float) -> int | None:
    """``value`` as a step number: a whole number from 0 (verl's validation before training) that
    the tables' int64 column holds, else None."""
    if isinstance(value, float) and not value.is_integer():  # also NaN and inf
        return None
    step = int(value)
    return step if 0 <= step < 1 << 63 else None


def open_text_import(
    sources: Sequence[str | os.PathLike[str]],
    run_dir: str | os.PathLike[str],
    importer: str,
    *,
    strict: bool,
    tail: Tail | None,
    meta: Mapping[str, Any] | None,
) -> tuple[list[str], Tail, StepSink]:
    """Check that every source is a readable text file (before anything is written) and open the sink."""
    paths = [os.fspath(s) for s in sources]
    tail = tail or Tail()
    for path in paths:
        check_text_file(path, look=not (tail.follow and path == "-"))  # a followed pipe: looked at as read
    return paths, tail, StepSink(run_dir, importer=importer, sources=paths, strict=strict, meta=meta)


def run_import(sink: StepSink, tail: Tail, body: Callable[[], None]) -> ImportSummary:
    """Run ``body`` (which feeds ``sink``) and close the sink.

    Ctrl-C while following ends the import normally: what was read is written and the
    summary says it was interrupted (or cut short by a second one: ``tail`` counts them for
    the CLI's handler, and has one wait for the close). Ctrl-C otherwise is re-raised after
    the same flush.
    Any other error (e.g. ``--strict`` meeting a bad line) propagates without writing
    the rows still buffered.
    """
    try:
        body()
    except KeyboardInterrupt:
        twice = tail.interrupts > 1  # the first waited for the lines read, the second did not
        with tail.closing():
            summary = sink.close(interrupted=True)
        summary.interrupted_twice = twice
        summary.signals = tuple(tail.signals)
        if not tail.follow:
            raise
        return summary
    with tail.closing():
        summary = sink.close()
    # one that came as the input ended, or during the close, waited for it and was not raised: still said
    summary.interrupted = tail.interrupts > 0
    summary.signals = tuple(tail.signals)
    return summary


def each_source(paths: list[str], tail: Tail) -> Iterator[tuple[str, str, bool]]:
    """``(path, name for messages, follow it?)`` for each source: only the last one is followed."""
    for index, path in enumerate(paths):
        yield path, "<stdin>" if path == "-" else path, tail.follow and index == len(paths) - 1


def source_lines(
    sink: StepSink, path: str, name: str, tail: Tail, *, follow: bool
) -> Iterator[tuple[int, str, bool] | None]:
    """``read_lines`` for an importer, as ``(line number, text, cut)``: lines counted, overlong
    ones counted as skipped, and a flush (when due) before passing ``IDLE`` on.

    ``cut`` is true for a last line without its line end (a file copied while being written):
    its last field may stop mid-number, so the importer leaves that field out and says so.
    """
    cut_at: list[int] = []

    def overlong(lineno: int) -> None:
        sink.summary.lines += 1  # a line, though not read
        sink.skip("overlong_line", f"{name}:{lineno}", bad=False)

    for item in read_lines(path, tail, follow=follow, on_overlong=overlong, on_unterminated=cut_at.append):
        if item is IDLE:
            sink.maybe_flush()
            yield IDLE
            continue
        sink.summary.lines += 1
        lineno, text = item
        yield lineno, text, lineno in cut_at
