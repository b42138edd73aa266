"""Two runs side by side: step time, phase seconds, tail, MFU, split, and what differs.

usage: rlscope compare RUN_A RUN_B [--format text|json]
                       [--gpus N] [--gpu-type NAME] [--peak-tflops X] [--active-params N] [--meta JSON]

Each RUN is a run directory, or a verl console log or JSONL file (imported first); one of
them may be "-", standard input. Not a saved report (`diagnose --format json`): compare reads
the runs themselves.
The explanation says first where the runs are not like for like (GPU count or type, batch
shape, model), then splits B's step-time difference into the phases (recent means) and the
generation difference into throughput part and tail. It says where a step time is summed
from the stage timers (a lower bound), a tail estimated from response lengths, or a phase
timed in some recent steps only (other too, where a step timer holds some only), and which
findings only one run has (or only one could evaluate) or are more or less severe in B.

The hardware and model options are those of `rlscope diagnose` and apply to both runs,
as when two logs of one job on the same GPUs are compared:
  rlscope compare before.log after.log --gpus 8 --gpu-type H100

Exit codes: 0 done, 1 on error (a run that cannot be read), 2 on bad usage.
The JSON format is documented in docs/diagnose-json.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from rlscope.cli._args import parser_for
from rlscope.cli.diagnose import (
    add_fact_options,
    analysis_progress,
    check_fact_options,
    open_run,
    read_with_facts,
    reading_run,
)

__all__ = ["main"]

log = logging.getLogger("rlscope")


def _document(parser: argparse.ArgumentParser, path: str, args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Run ``name`` (A or B) read and analysed, with a progress bar on a terminal as ``diagnose``."""
    with open_run(path, "rlscope compare - RUN_B" if name == "A" else "rlscope compare RUN_A -") as run_dir:
        reader = reading_run(run_dir)
        from rlscope.analyzers import STAGES, analyze_run  # imported while the run is read
        from rlscope.report.document import build_document

        reader = read_with_facts(parser, reader, args, path, name)
        with analysis_progress(len(STAGES), f"analysing {name}") as tick:
            diagnosis = analyze_run(reader, on_stage=tick)
        return build_document(diagnosis, reader, path)


def _cell(measure: str, unit: str, value: Any, doc: dict[str, Any]) -> str:
    """A row's value as the table shows it, as ``diagnose`` words it: a topology by name, generation
    beside the step against the step's length (as a share it would pass 100%), and a string from
    the data (a model name) with its control characters written out, so it cannot drive the terminal."""
    from rlscope.report._format import MFU_DIGITS, generation_beside, pct, secs, shown, topology_name

    if value is None:
        return "n/a"
    if measure == "topology":
        return shown(topology_name(value))
    if measure == "generation / step" and doc["headline"].get("generation_overlapped"):
        return generation_beside(value)
    if unit == "s":
        return secs(value)
    if unit == "share":  # as diagnose rounds it: shares of time to the whole percent, an MFU to a tenth
        return pct(value, MFU_DIGITS if "MFU" in measure else 0)
    return shown(value)


def main(argv: Sequence[str]) -> int:
    parser = parser_for("compare", __doc__)
    parser.add_argument("run_a", metavar="RUN_A")
    parser.add_argument("run_b", metavar="RUN_B")
    parser.add_argument("--format", choices=["text", "json"], default="text")
    add_fact_options(parser, "both runs")
    args = parser.parse_args(argv)
    check_fact_options(parser, args)
    if args.run_a == args.run_b == "-":  # the second read would find it empty
        parser.error("standard input (-) can be only one of RUN_A and RUN_B")

    docs = _document(parser, args.run_a, args, "A"), _document(parser, args.run_b, args, "B")
    from rlscope.report._format import shown  # the report's modules import the analysis: after A's read began
    from rlscope.report.compare import compare_documents

    result = compare_documents(*docs)
    if "://" not in args.run_a and os.path.realpath(args.run_a) == os.path.realpath(args.run_b):
        # a slip of the shell (the same run twice, or one named two ways): a comparison that says nothing
        log.warning("A and B are the same run (%s): nothing can differ", args.run_a)
    if args.format == "json":
        rows = [{"measure": m.strip(), "unit": u, "a": a, "b": b} for m, u, a, b in result["rows"]]
        json.dump({**result, "rows": rows}, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = 120
    # the paths in full above the table: a column cuts them short, and runs of one sweep differ at the end
    console.print(Text(f"A: {shown(args.run_a)}"), soft_wrap=True)
    console.print(Text(f"B: {shown(args.run_b)}"), soft_wrap=True)
    table = Table()
    for header in ("measure", "A", "B"):
        table.add_column(Text(header))
    for measure, unit, a, b in result["rows"]:
        table.add_row(Text(measure), *(Text(_cell(measure, unit, v, doc)) for v, doc in zip((a, b), docs, strict=True)))
    console.print(table)
    console.print(Text("What differs", style="bold underline"))
    for line in result["explanations"]:
        # to a file or a pipe one line each, as diagnose's warnings: no number cut from its unit at column 120
        console.print(Text(f"  - {shown(line)}"), soft_wrap=not console.is_terminal)
    return 0
