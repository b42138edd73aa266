"""Print what a run directory holds: what meta.json says of the model, GPUs and batch (as
diagnose reads it, with any value it ignores), and its tables, rows, steps and time range.

usage: rlscope info RUN_DIR [--json]

RUN_DIR may be a local path or a pyarrow filesystem URI (file://, s3://, ...).
Unreadable segments are skipped with a warning naming the file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from rlscope.cli._args import parser_for
from rlscope.trace.reader import RunReader
from rlscope.trace.recorder import iter_status

if TYPE_CHECKING:
    from rlscope.analyzers._data import RunFacts
from rlscope.trace.schema import TABLES

__all__ = ["main", "run_summary"]

_TIME_COLUMNS = {"steps": "time", "spans": "start", "gpu": "time", "logprob": "time", "jobs": "time"}


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


def _json_safe(value: Any) -> Any:
    """``value`` with NaN and infinities (JSON has neither) as None."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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
        from rlscope.analyzers._data import meta_problems

        summary["ignored"] = meta_problems(reader.meta)
        print(json.dumps(_json_safe(summary), indent=2, sort_keys=True, allow_nan=False))
        return 0

    from rich.console import Console
    from rich.table import Table

    meta = reader.meta
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 120  # piped or captured: don't wrap at rich's default 80 columns
    from rich.text import Text

    from rlscope.analyzers._data import RunFacts, meta_problems
    from rlscope.report._format import shown  # strings from meta.json: no markup, no control characters

    stated = RunFacts.from_meta(meta)  # as diagnose reads it
    model = meta.get("model") if isinstance(meta.get("model"), dict) else {}
    console.print(Text(shown(summary["run_dir"]), style="bold"))
    facts = [
        ("framework", meta.get("framework")),
        ("model", _model(model.get("name"), stated.active_params)),
        ("gpus", _gpus(stated)),
        ("batch", _batch(stated)),
        ("topology", _topology(_topology_wording(meta.get("topology")), stated)),
        ("scenario", meta.get("scenario")),
    ]
    facts += [("ignored", problem) for problem in meta_problems(meta)]
    for key, value in facts:
        if value is not None:
            console.print(f"  {key:<10} {shown(value)}", markup=False)
    table = Table("table", "segments", "rows", "steps", "step range", "start (UTC) +duration")
    for name, e in summary["tables"].items():
        steps = f"{e['first_step']}..{e['last_step']}" if "first_step" in e else "-"
        span = _when(e["time_start"], e["time_end"]) if "time_start" in e else "-"
        table.add_row(Text(name), str(e["segments"]), f"{e['rows']:,}", str(e.get("steps", "-")), steps, span)
    if summary["tables"]:
        console.print(table)
    else:
        console.print("  no table has any rows yet")
    for status in summary.get("recorders", []):
        lost = status.get("dropped_rows", 0) + status.get("write_errors", 0) + status.get("bad_rows", 0)
        if lost:
            console.print(
                Text(
                    shown(
                        f"  recorder {status.get('writer')}: {status.get('dropped_rows', 0)} rows dropped, "
                        f"{status.get('write_errors', 0)} write errors, {status.get('bad_rows', 0)} bad rows"
                    ),
                    style="yellow",
                )
            )
    return 0


def _model(name: object, params: float | None) -> str | None:
    size = f"{params / 1e9:.3g}B active parameters" if params else None
    return ", ".join(str(x) for x in (name, size) if x) or None


def _topology_wording(topology: object) -> object:
    """A topology object's ``kind``, which diagnose reads as the topology (docs/run-directory.md)."""
    return topology.get("kind") if isinstance(topology, dict) else topology


def _topology(wording: object, facts: RunFacts) -> str | None:
    """meta.json's topology with its rollout:train split, which the topology what-if reads
    (a colocated run's pools are all GPUs each: no split to state)."""
    split = f"split {facts.rollout_gpus}:{facts.train_gpus} (rollout:train GPUs)"
    has_split = facts.kind != "colocated" and facts.rollout_gpus is not None and facts.train_gpus is not None
    if not isinstance(wording, str):
        return split if has_split else None
    return f"{wording}, {split}" if has_split else wording


def _gpus(facts: RunFacts) -> str | None:
    if facts.n_gpus is None and facts.gpu_type is None:
        return None
    count = facts.n_gpus if facts.n_gpus is not None else "?"
    if facts.gpu_type:
        return f"{count} x {facts.gpu_type}"
    if facts.peak_flops:
        return f"{count}, {facts.peak_flops / 1e12:g} TFLOP/s peak each"
    return f"{count} (type not stated: diagnose --gpu-type)"


def _batch(facts: RunFacts) -> str | None:
    if facts.batch_size is None:
        return None
    if facts.group_size is None:
        return f"{facts.batch_size} prompts a step"
    return f"{facts.batch_size} prompts x {facts.group_size} samples a step"
