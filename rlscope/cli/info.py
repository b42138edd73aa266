"""Print what a run directory holds: its tables, rows, steps and time range.

usage: rlscope info RUN_DIR [--json]

RUN_DIR may be a local path or a pyarrow filesystem URI (file://, s3://, ...).
Unreadable segments are skipped with a warning naming the file.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import pyarrow.compute as pc

from rlscope.cli._args import parser_for
from rlscope.trace.reader import RunReader
from rlscope.trace.recorder import iter_status
from rlscope.trace.schema import TABLES

__all__ = ["main", "run_summary"]

_TIME_COLUMNS = {"steps": "time", "spans": "start", "gpu": "time", "logprob": "time"}


def run_summary(reader: RunReader) -> dict[str, Any]:
    """Per table: segments, rows, distinct steps, first/last step and time range."""
    tables: dict[str, Any] = {}
    for name in TABLES:
        segments = reader.segments(name)
        if not segments:
            continue
        entry: dict[str, Any] = {"segments": len(segments), "rows": sum(s.rows for s in segments)}
        if "step" in TABLES[name].names:
            steps = reader.read(name, ["step"]).column("step")
            if len(steps):
                entry.update(
                    steps=len(pc.unique(steps)), first_step=pc.min(steps).as_py(), last_step=pc.max(steps).as_py()
                )
        col = _TIME_COLUMNS.get(name)
        if col:
            times = reader.read(name, [col]).column(col)
            lo, hi = pc.min(times).as_py(), pc.max(times).as_py()
            if lo is not None:
                entry.update(time_start=lo, time_end=hi)
        tables[name] = entry
    return {"run_dir": str(reader.location), "meta": reader.meta, "tables": tables}


def _when(start: float, end: float) -> str:
    """``2026-11-29 12:38:25 +1:02:03``: start in UTC and how long the table spans."""
    first = dt.datetime.fromtimestamp(start, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"{first} +{dt.timedelta(seconds=round(end - start))}"


def main(argv: Sequence[str]) -> int:
    parser = parser_for("info", __doc__)
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    reader = RunReader(args.run_dir)
    summary = run_summary(reader)
    if reader.location.is_local:
        summary["recorders"] = list(iter_status(reader.location.path))
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
        return 0

    from rich.console import Console
    from rich.table import Table

    meta = reader.meta
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 120  # piped or captured: don't wrap at rich's default 80 columns
    model = meta.get("model") or {}
    gpu = meta.get("gpu") or {}
    console.print(f"[bold]{summary['run_dir']}[/bold]")
    facts = [
        ("framework", meta.get("framework")),
        ("model", _model(model)),
        ("gpus", _gpus(gpu) if isinstance(gpu, dict) and gpu else None),
        ("batch", _batch(meta)),
        ("topology", meta.get("topology")),
        ("scenario", meta.get("scenario")),
    ]
    for key, value in facts:
        if value is not None:
            console.print(f"  {key:<10} {value}", markup=False)
    table = Table("table", "segments", "rows", "steps", "step range", "start (UTC) +duration")
    for name, e in summary["tables"].items():
        steps = f"{e['first_step']}..{e['last_step']}" if "first_step" in e else "-"
        span = _when(e["time_start"], e["time_end"]) if "time_start" in e else "-"
        table.add_row(name, str(e["segments"]), f"{e['rows']:,}", str(e.get("steps", "-")), steps, span)
    if summary["tables"]:
        console.print(table)
    else:
        console.print("  no table has any rows yet")
    for status in summary.get("recorders", []):
        lost = status.get("dropped_rows", 0) + status.get("write_errors", 0) + status.get("bad_rows", 0)
        if lost:
            console.print(
                f"  [yellow]recorder {status.get('writer')}: {status.get('dropped_rows', 0)} rows dropped, "
                f"{status.get('write_errors', 0)} write errors, {status.get('bad_rows', 0)} bad rows[/yellow]"
            )
    return 0


def _model(model: object) -> str | None:
    if not isinstance(model, dict):
        return None if model is None else str(model)
    params = model.get("active_params")
    size = f"{params / 1e9:.3g}B active parameters" if isinstance(params, (int, float)) and params > 0 else None
    return ", ".join(str(x) for x in (model.get("name"), size) if x) or None


def _gpus(gpu: dict) -> str:
    count, kind = gpu.get("count"), gpu.get("type")
    if kind is None:
        return f"{count if count is not None else '?'} (type not stated: diagnose --gpu-type)"
    return f"{count if count is not None else '?'} x {kind}"


def _batch(meta: dict) -> str | None:
    batch, group = meta.get("batch_size"), meta.get("group_size")
    if batch is None:
        return None
    return f"{batch} prompts x {group} samples a step" if group is not None else f"{batch} prompts a step"
