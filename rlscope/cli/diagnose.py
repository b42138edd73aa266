"""Post-mortem of a run: where each step's time and FLOPs went, and what to change.

usage: rlscope diagnose RUN [--format text|markdown|html|json] [--output FILE] [--fail-on warn|critical]

RUN is a run directory (or pyarrow filesystem URI), or a verl console log or JSONL
metrics file, which is imported to a temporary run directory first.

Exit codes: 0 clean, 3 when a finding reaches --fail-on, 1 on error, 2 on bad usage.
The JSON format is documented in docs/diagnose-json.md.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rlscope.cli._args import parser_for
from rlscope.errors import RunDirError

if TYPE_CHECKING:
    from rlscope.analyzers import Diagnosis
    from rlscope.trace.reader import RunReader

__all__ = ["main", "open_run"]

FINDINGS_EXIT = 3
_RANK = {"info": 0, "warn": 1, "critical": 2}


def _looks_like_jsonl(path: str) -> bool:
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip()
            if line:
                return line.startswith(b"{")
    return False


@contextmanager
def open_run(path: str) -> Iterator[str]:
    """A run directory for ``path``: itself, or a temporary import of a log or JSONL file."""
    if not os.path.isfile(path):
        yield path
        return
    from rlscope.collectors.importers import IMPORTERS

    kind = "verl-jsonl" if _looks_like_jsonl(path) else "verl-log"
    with tempfile.TemporaryDirectory(prefix="rlscope-import-") as tmp:
        run_dir = os.path.join(tmp, "run")
        summary = IMPORTERS[kind]([path], run_dir)
        if not summary.steps:
            raise RunDirError(f"{path}: no verl metric lines found (read it as {kind})")
        yield run_dir


def main(argv: Sequence[str]) -> int:
    parser = parser_for("diagnose", __doc__)
    parser.add_argument("run", metavar="RUN")
    parser.add_argument("--format", choices=["text", "markdown", "html", "json"], default="text")
    parser.add_argument("--output", "-o", metavar="FILE", help="write the report here instead of stdout")
    parser.add_argument("--fail-on", choices=["warn", "critical"], help="exit 3 if a finding is this severe or more")
    args = parser.parse_args(argv)

    from rlscope.analyzers import STAGES, analyze_run
    from rlscope.report.document import build_document
    from rlscope.trace.reader import RunReader

    with open_run(args.run) as run_dir:
        reader = RunReader(run_dir)
        with _progress(len(STAGES)) as tick:
            diagnosis = analyze_run(reader, on_stage=tick)
        doc = build_document(diagnosis, reader, args.run)
        report = _render(args.format, doc, diagnosis, reader, to_terminal=args.output is None)
    if report is not None:
        if args.output:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(report)
        else:
            sys.stdout.write(report)
    if args.fail_on and any(_RANK[f["severity"]] >= _RANK[args.fail_on] for f in doc["findings"]):
        return FINDINGS_EXIT
    return 0


def _render(fmt: str, doc: dict, diagnosis: Diagnosis, reader: RunReader, *, to_terminal: bool) -> str | None:
    """The report as a string, or None when it was printed straight to the terminal."""
    if fmt == "json":
        return json.dumps(doc, allow_nan=False) + "\n"  # not indented: the C encoder, 4x faster
    if fmt == "markdown":
        from rlscope.report.markdown import render_markdown

        return render_markdown(doc)
    if fmt == "html":
        from rlscope.report.html import render_html

        return render_html(doc, diagnosis, reader)
    from rich.console import Console

    from rlscope.report.text import render_text

    if to_terminal:
        console = Console(highlight=False)
        if not console.is_terminal:
            console.width = 120
        render_text(doc, console)
        return None
    console = Console(record=True, width=120, file=io.StringIO(), highlight=False)
    render_text(doc, console)
    return console.export_text()


@contextmanager
def _progress(total: int) -> Iterator:
    """A transient progress bar on stderr when it is a terminal; a no-op tick otherwise."""
    if not sys.stderr.isatty():
        yield lambda _stage: None
        return
    from rich.progress import Progress

    with Progress(transient=True) as progress:
        task = progress.add_task("analysing", total=total)

        def tick(stage: str) -> None:
            progress.update(task, advance=1, description=f"analysing: {stage}")

        yield tick
