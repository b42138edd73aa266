"""Import the JSON-lines file of verl's ``file`` logger (``trainer.logger=['file']``).

verl's ``FileLogger`` (``verl/utils/tracking.py``, since 7bc70bbf0, 2025-09-06, v0.6.0)
writes one line per ``log`` call, ``{"step": N, "data": {metric: value, ...}}``, with orjson,
which turns NaN and infinities into ``null``: those are imported as NaN. A line without
``data`` is read as ``{"step": N, metric: value, ...}``. Values that are not numbers are
skipped and counted; a line that is not such an object is skipped as ``bad_json``. The
file holds no time: lines read while following a live file get the time they were read.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping, Sequence
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
from rlscope.collectors.importers._source import IDLE, Tail, stdin_is_file

__all__ = ["import_verl_jsonl"]


def _number(value: Any) -> float | None:
    if value is None:
        return math.nan  # orjson writes NaN and +-inf as null
    if isinstance(value, (bool, int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer past float's range: as the text importers read it
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        return parse_number(value)
    return None


def _integer(digits: str) -> int | float:
    """A JSON integer; one of more digits than ``int()`` takes (4,300) is +-inf, as the text
    importers read a number past float's range, rather than a line lost."""
    try:
        return int(digits)
    except ValueError:
        return -math.inf if digits.startswith("-") else math.inf


_HUGE_INTEGERS = json.JSONDecoder(parse_int=_integer)


def _step(value: Any) -> int | None:
    return whole_step(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_line(sink: StepSink, where: str, line: str, when: float | None, *, cut: bool = False) -> None:
    if not line.strip():
        return
    try:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # not JSON: no second try
            raise
        except ValueError:  # an integer of more digits than int() takes: read it as +-inf
            record = _HUGE_INTEGERS.decode(line)
    except (ValueError, RecursionError) as exc:
        if cut:  # the last line, cut off where a copy stopped: told, not a bad line (as in the other formats)
            sink.skip("cut_off_field", where, str(exc), bad=False)
            sink.note(
                f"{where}: the last line has no line end (copied while being written?) and does not parse; left out"
            )
        else:
            sink.skip("bad_json", where, str(exc))
        return
    if cut:
        sink.note(f"{where}: the last line has no line end (copied while being written?); read as it is")
    if not isinstance(record, dict) or "step" not in record:
        sink.skip("bad_json", where, "expected an object with a step")
        return
    step = _step(record["step"])
    data = record.get("data", {k: v for k, v in record.items() if k != "step"})
    if step is None or not isinstance(data, dict):
        sink.skip("bad_json", where, f"step {record['step']!r} or data of type {type(data).__name__}")
        return
    metrics: dict[str, float] = {}
    for key, value in data.items():
        number = _number(value)
        if number is None:
            sink.skip("non_numeric_value", where, str(key), bad=False)
        else:
            metrics[str(key)] = number
    sink.add(step, metrics, when=when, where=where)


def import_verl_jsonl(
    sources: Sequence[str | os.PathLike[str]],
    run_dir: str | os.PathLike[str],
    *,
    strict: bool = False,
    tail: Tail | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ImportSummary:
    """Import verl ``file`` logger output (``-`` reads stdin) into ``run_dir``, line by line.

    Several files are read in order as one stream; with ``tail.follow`` the last one is
    followed until ``tail`` says stop or Ctrl-C. ``strict`` stops at the first bad line.
    """
    paths, tail, sink = open_text_import(sources, run_dir, "verl-jsonl", strict=strict, tail=tail, meta=meta)

    def body() -> None:
        for path, name, follow in each_source(paths, tail):
            # the file logger writes no time: a line read live gets one (a file on stdin: from its end on)
            live = follow and path == "-" and not stdin_is_file()
            for item in source_lines(sink, path, name, tail, follow=follow):
                if item is IDLE:
                    live = True
                else:
                    lineno, line, cut = item
                    _read_line(sink, f"{name}:{lineno}", line, time.time() if live else None, cut=cut)

    return run_import(sink, tail, body)
