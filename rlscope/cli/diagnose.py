"""Post-mortem of a run: where each step's time and FLOPs went, and what to change.

usage: rlscope diagnose RUN [--format text|markdown|html|json] [--output FILE] [--fail-on warn|critical]
                        [--gpus N] [--gpu-type NAME] [--peak-tflops X] [--active-params N] [--meta JSON]

RUN is a run directory (or pyarrow filesystem URI), or a verl console log or JSONL
metrics file, which is imported to a temporary run directory first ("-": standard input,
as in "zcat train.log.gz | rlscope diagnose -"). A saved report (--format json) is no run:
it is refused, naming its schema.

MFU and the topology what-if need the hardware, the model and the batch shape. A run
directory's meta.json says them; a console log says what its config dump or launch command
and its model-size lines state (never the GPU model). Give the rest here; these override
meta.json and the log:
  --gpus 8 --gpu-type H100 --active-params 7e9
  --meta '{"batch_size": 32, "group_size": 8, "topology": "async", "split": "4:4"}'
A meta.json value the analyzers cannot use (a count that is not a whole positive number,
say) is ignored with a warning; one given with --meta is a usage error.

Exit codes: 0 clean, 3 when a finding reaches --fail-on, 1 on error (a run with
no rows yet, an --output that cannot be written: a directory, a folder not there, an empty
path), 2 on bad usage (an option or value the command does not take).
The JSON format is documented in docs/diagnose-json.md.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from rlscope.cli._args import json_object, parser_for
from rlscope.errors import RLScopeError, RunDirError

if TYPE_CHECKING:
    from rlscope.analyzers import Diagnosis
    from rlscope.trace.reader import RunReader

__all__ = [
    "add_fact_options",
    "analysis_progress",
    "check_fact_options",
    "json_text",
    "main",
    "open_run",
    "read_with_facts",
    "reading_run",
    "warn_unusable_meta",
]

log = logging.getLogger("rlscope")

FINDINGS_EXIT = 3
_RANK = {"info": 0, "warn": 1, "critical": 2}


def _looks_like_jsonl(path: str, piped_from: str | None, pipe_into: str) -> bool:
    from rlscope.collectors.importers import check_text_file

    # a one-line error for a file that cannot be read or is not text
    check_text_file(path, piped_from=piped_from, pipe_into=pipe_into)
    if path.lower().endswith((".jsonl", ".ndjson")):
        return True
    with open(path, "rb") as fh:
        for raw in fh:
            line = raw.strip().removeprefix(b"\xef\xbb\xbf")  # a byte-order mark (Windows tools)
            if line:  # JSON quotes keys with ", a pprint-ed dict (verl's config dump) with '
                return re.match(rb'\{\s*["}]', line) is not None
    return False


def _is_pipe(path: str) -> bool:
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except OSError:
        return False


def _refuse_run_dir_file(path: str) -> None:
    """A one-line error naming the run directory for its ``meta.json`` or a Parquet segment, which
    would otherwise be read as a log and found to hold no metric lines (or to be binary)."""
    name = os.path.basename(path)
    folder = os.path.dirname(path)
    root = folder if name == "meta.json" else os.path.dirname(folder) if name.endswith(".parquet") else None
    if root is not None and os.path.isfile(os.path.join(root or ".", "meta.json")):
        raise RunDirError(f"{path}: a file of the run directory {root or '.'}: give the directory")


def _report_schema(path: str) -> str | None:
    """The schema of the saved rlscope report at ``path`` (``rlscope.diagnose/2``); None for anything else."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)  # the schema is the report's first key, compact or indented
    except OSError:
        return None
    found = re.match(rb'\s*\{\s*"schema"\s*:\s*"(rlscope\.[a-z]+/[0-9]+)"', head.removeprefix(b"\xef\xbb\xbf"))
    return found.group(1).decode() if found else None


def _not_a_run(schema: str) -> str:
    """Why a saved report is refused as a run, and what to give instead."""
    return f"an rlscope report ({schema}), not a run: give the run directory or log it was made from"


def _refuse_report(source: str, path: str) -> None:
    """A one-line error for a saved rlscope report given as a run: the commands read the run itself,
    and a report of an older rlscope lacks the fields added since (``phases.step_timed``), which
    would read as a run without them."""
    schema = _report_schema(source)
    if schema:
        raise RunDirError(f"{path}: {_not_a_run(schema)}")


def _refuse_folder_near_runs(path: str) -> None:
    """A one-line error naming the run directories for a folder without meta.json that holds
    some (``runs/``) or lies in one (``run/steps``), the logs it holds (``logs/``, which
    ``diagnose`` takes one at a time), or the importer for one of TensorBoard event files, rather
    than "meta.json: missing"."""
    if os.path.isfile(os.path.join(path, "meta.json")):
        return
    parent = os.path.dirname(os.path.normpath(path))
    if os.path.isfile(os.path.join(parent or ".", "meta.json")):
        raise RunDirError(f"{path}: a folder of the run directory {parent or '.'}: give the directory")
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return  # the reader says what is wrong with it
    runs = [e for e in entries if os.path.isfile(os.path.join(path, e, "meta.json"))]
    if runs:
        raise RunDirError(f"{path}: not a run directory; it holds {len(runs)} ({_some(runs)}): give one")
    logs = [e for e in entries if e.lower().endswith(_LOG_SUFFIXES) and os.path.isfile(os.path.join(path, e))]
    if logs:
        raise RunDirError(f"{path}: not a run directory; it holds {len(logs)} logs ({_some(logs)}): give one")
    if _holds_event_files(path):
        raise RunDirError(
            f"{path}: TensorBoard event files, not a run directory: "
            f"rlscope import tensorboard {path} --out RUN_DIR, then diagnose RUN_DIR"
        )


_LOG_SUFFIXES = (".log", ".jsonl", ".ndjson")


def _some(names: list[str]) -> str:
    """The first five ``names``, and "..." for more."""
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _holds_event_files(path: str, depth: int = 2) -> bool:
    """Whether TensorBoard event files lie in ``path`` or up to ``depth`` folders below it (verl
    writes them to tensorboard_log/PROJECT/EXPERIMENT), looked for no deeper: a home folder given by
    mistake is not walked."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    if any(e.name.startswith("events.out.tfevents.") and e.is_file() for e in entries):
        return True
    return depth > 0 and any(e.is_dir() and _holds_event_files(e.path, depth - 1) for e in entries)


@contextmanager
def open_run(path: str, pipe_into: str = "rlscope diagnose -") -> Iterator[str]:
    """A run directory for ``path``: itself, or a temporary import of a log or JSONL file
    (``-``: standard input, read once into a file as a pipe is). ``pipe_into``: the command that
    would read the log on standard input, which a compressed log is told to be decompressed into."""
    stdin = path == "-"
    if stdin and sys.stdin is None:  # started with it closed (``<&-``)
        raise RunDirError("standard input: closed, nothing to read")
    if not stdin and "://" not in path and not os.path.exists(path):
        raise RunDirError(f"{path}: no such run directory or log file")
    piped = stdin or _is_pipe(path)
    if not (piped or os.path.isfile(path)):
        if "://" not in path:
            _refuse_folder_near_runs(path)
        yield path
        return
    _refuse_run_dir_file(path)
    from rlscope.collectors.importers import IMPORTERS

    with tempfile.TemporaryDirectory(prefix="rlscope-import-") as tmp:
        source = path
        if piped:  # ``<(zcat x.log.gz)``: read once into a file, which both formats can then read
            source = os.path.join(tmp, "piped-input")
            with nullcontext(sys.stdin.buffer) if stdin else open(path, "rb") as pipe, open(source, "wb") as copy:
                shutil.copyfileobj(pipe, copy)
        # the likelier format first, then the other: a log may open with a JSON line, a JSONL with junk
        looks_jsonl = _looks_like_jsonl(source, path if piped else None, pipe_into)
        kinds = ("verl-jsonl", "verl-log") if looks_jsonl else ("verl-log", "verl-jsonl")
        for kind in kinds:
            run_dir = os.path.join(tmp, kind)
            if IMPORTERS[kind]([source], run_dir).steps:
                break
        else:
            _refuse_report(source, path)
            hint = ""
            if path.lower().endswith(".csv"):
                hint = "; a W&B CSV export: rlscope import wandb-csv FILE --out RUN_DIR, then diagnose RUN_DIR"
            elif "tfevents" in os.path.basename(path):
                hint = "; TensorBoard events: rlscope import tensorboard FILE --out RUN_DIR, then diagnose RUN_DIR"
            raise RunDirError(f"{path}: no verl metric lines found (read as {kinds[0]} and as {kinds[1]}){hint}")
        yield run_dir


def main(argv: Sequence[str]) -> int:
    parser = parser_for("diagnose", __doc__)
    parser.add_argument("run", metavar="RUN")
    parser.add_argument("--format", choices=["text", "markdown", "html", "json"], default="text")
    parser.add_argument(
        "--output", "-o", metavar="FILE", help="write the report here instead of stdout (-: stdout, as without)"
    )
    parser.add_argument("--fail-on", choices=["warn", "critical"], help="exit 3 if a finding is this severe or more")
    add_fact_options(parser, "this report")
    args = parser.parse_args(argv)
    check_fact_options(parser, args)
    if args.output == "":  # -o "$REPORT" with REPORT unset: not stdout, as if no --output were given
        raise RLScopeError("cannot write '': an empty path")
    if args.output == "-":  # stdout, as for most tools; ./- names a file of that name
        args.output = None
    if args.output:
        _check_writable(args.output)  # before minutes of analysis, not after
        _check_not_read(args.output, args.run)

    with open_run(args.run) as run_dir:
        reader = reading_run(run_dir)
        from rlscope.analyzers import STAGES, analyze_run  # imported while the run is read
        from rlscope.report.document import build_document

        reader = read_with_facts(parser, reader, args, args.run)
        with analysis_progress(len(STAGES)) as tick:
            diagnosis = analyze_run(reader, on_stage=tick)
        doc = build_document(diagnosis, reader, args.run)
        report = _render(args.format, doc, diagnosis, reader, to_terminal=args.output is None)
    if report is not None:
        if args.output:
            try:
                _write_whole(args.output, report)
            except OSError as exc:
                raise RLScopeError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        else:
            sys.stdout.write(report)
    if args.fail_on and any(_RANK[f["severity"]] >= _RANK[args.fail_on] for f in doc["findings"]):
        return FINDINGS_EXIT
    return 0


def add_fact_options(parser: argparse.ArgumentParser, scope: str) -> None:
    """``--gpus``, ``--gpu-type``, ``--peak-tflops``, ``--active-params`` and ``--meta``: the
    facts MFU and the what-if need that meta.json (or the log) may lack, for ``scope``."""
    parser.add_argument("--gpus", type=_positive(int, "GPUs"), metavar="N", help="GPUs the job ran on, in all")
    parser.add_argument("--gpu-type", metavar="NAME", help="GPU model for its peak FLOP/s, e.g. H100, A100, RTX 4090")
    parser.add_argument(
        "--peak-tflops",
        type=_positive(float),
        metavar="X",
        help="peak dense bf16 TFLOP/s per GPU (overrides the table)",
    )
    parser.add_argument("--active-params", type=_positive(float), metavar="N", help="active parameters, e.g. 7e9")
    parser.add_argument(
        "--meta",
        type=json_object,
        metavar="JSON",
        help=f'meta.json entries for {scope} (no run is changed), e.g. \'{{"batch_size": 32, "group_size": 8}}\'',
    )


def check_fact_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A usage error for a GPU type whose peak FLOP/s neither the table nor ``--peak-tflops`` gives."""
    if args.gpu_type is None or args.peak_tflops is not None:
        return
    from rlscope.analyzers.gpus import PEAK_BF16_DENSE_FLOPS, peak_flops  # imports the analysis: only when asked

    if peak_flops(args.gpu_type) is None:
        known = ", ".join(PEAK_BF16_DENSE_FLOPS)
        parser.error(f"unknown --gpu-type {args.gpu_type!r}; give --peak-tflops too, or use one of {known}")


def reading_run(run_dir: str) -> RunReader:
    """A reader of ``run_dir`` already reading, in the background, the trajectory columns every
    diagnosis reads: a caller imports the analysis (pandas and numpy, half a second) meanwhile."""
    import pyarrow as pa

    from rlscope.trace.reader import RunReader
    from rlscope.trace.schema import ANALYZED_TRAJECTORIES, TRAJECTORIES

    reader = RunReader(run_dir)
    text = [c for c in ANALYZED_TRAJECTORIES if pa.types.is_string(TRAJECTORIES.field(c).type)]
    reader.prefetch("trajectories", ANALYZED_TRAJECTORIES, dictionary=text)
    return reader


def read_with_facts(
    parser: argparse.ArgumentParser, reader: RunReader, args: argparse.Namespace, source: str, name: str | None = None
) -> RunReader:
    """``reader`` with its meta holding the fact options over meta.json's own values.

    A value the options bring in that the analyzers cannot use is a usage error; meta.json's
    own are warned about, unless an option replaced them. ``name`` (A or B, of ``compare``) is
    said in the error, with ``source``: the options apply to both runs, and may fit only one.
    """
    from rlscope.analyzers._data import meta_problems
    from rlscope.trace.store import merge_meta

    if not any(reader.row_count(table) for table in reader.tables()):
        raise RunDirError(
            f"{source}: no rows yet (no step metrics, trajectories, spans or GPU samples): nothing to diagnose"
        )
    stated = meta_problems(reader.meta)
    reader.meta = _with_overrides(merge_meta(reader.meta, args.meta or {}), args)
    unusable = meta_problems(reader.meta)
    added = [p for p in unusable if p not in stated]
    if added:
        whose = f" ({name}: {source})" if name else ""
        parser.error((f"--meta: {added[0]}" if args.meta else added[0]) + whose)
    warn_unusable_meta(source, unusable)
    return reader


def warn_unusable_meta(source: str, problems: list[str]) -> None:
    """One warning per meta.json value the analyzers ignore (see ``analyzers._data.meta_problems``)."""
    for problem in problems:
        log.warning("%s: meta.json: %s; ignored", source, problem)


def _write_whole(path: str, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (a CI gate never reads half a report): under
    a temporary name beside the file (a link's target), then renamed. A device or a pipe
    (``/dev/stdout``), or a file in a folder this process may not write, is written in place."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    special = os.path.abspath(path).startswith(("/dev/", "/proc/")) or (
        os.path.exists(path) and not os.path.isfile(path)
    )
    if special or not os.access(folder, os.W_OK | os.X_OK):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    from rlscope.trace.store import locate, write_atomic_bytes

    mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else None
    write_atomic_bytes(locate(folder), target, text.encode("utf-8"))
    if mode is not None:  # a report replaced keeps who may read it
        os.chmod(target, mode)


def _check_writable(path: str) -> None:
    """A one-line error now if the report could not be written to ``path`` later."""
    # a link is written through: its target's folder (a dangling link's too) must be there
    folder = os.path.dirname(os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path))
    if os.path.isdir(path):
        raise RLScopeError(f"cannot write {path}: it is a directory")
    if not os.path.isdir(folder):
        raise RLScopeError(f"cannot write {path}: no such directory {folder}")
    target = path if os.path.exists(path) else folder
    if not os.access(target, os.W_OK):
        from rlscope.trace.store import unwritable_reason

        raise RLScopeError(f"cannot write {path}: {unwritable_reason(target)}")


def _check_not_read(path: str, run: str) -> None:
    """A one-line error if the report would replace what it reads: the log being diagnosed (or a
    saved report given in its place, named as one), or the run directory's meta.json or a file in
    its table folders (a report beside them is fine)."""
    if "://" in run:
        return
    target, source = os.path.realpath(path), os.path.realpath(run)
    if target == source:
        schema = _report_schema(source) if os.path.isfile(source) else None
        what = f"the input, {_not_a_run(schema)}" if schema else "the log being diagnosed"
        raise RLScopeError(f"cannot write {path}: it is {what}")
    if os.path.isdir(source) and os.path.commonpath([target, source]) == source:
        if target == os.path.join(source, "meta.json") or os.path.dirname(target) != source:
            raise RLScopeError(f"cannot write {path}: it is part of the run directory {run}")


def _positive(kind: type, counted: str = "") -> Callable[[str], Any]:
    """An argparse type: a finite number of ``kind`` above 0 (a whole one for int, 1e3 allowed);
    ``counted``: what an int counts, named when a value is not a whole number of them."""

    def parse(text: str) -> Any:
        try:
            number = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (math.isfinite(number) and number > 0):
            raise argparse.ArgumentTypeError(f"must be a finite number above 0: {text!r}")
        if kind is int:
            if not number.is_integer() or number >= 2**31:
                bound = " below 2^31" if number.is_integer() else ""
                raise argparse.ArgumentTypeError(
                    f"expected a whole number of {counted or 'units'}{bound}, got {text!r}"
                )
            return int(number)
        return number

    return parse


def _with_overrides(meta: dict, args: argparse.Namespace) -> dict:
    """``meta`` with the hardware and model given on the command line in place of its own."""
    gpu = dict(meta.get("gpu") or {}) if isinstance(meta.get("gpu"), dict) else {}
    model = dict(meta.get("model") or {}) if isinstance(meta.get("model"), dict) else {}
    if args.gpus is not None:
        gpu["count"] = args.gpus
    out = dict(meta)
    if args.gpu_type is not None:
        gpu["type"] = args.gpu_type
        for stated in ("peak_bf16_flops", "peak_flops"):  # the table's peak for the type given, unless given too
            gpu.pop(stated, None)
            out.pop(stated, None)
    if args.peak_tflops is not None:
        gpu["peak_bf16_flops"] = args.peak_tflops * 1e12
    if args.active_params is not None:
        model["active_params"] = args.active_params
    if gpu:
        out["gpu"] = gpu
    if model:
        out["model"] = model
    return out


def _render(fmt: str, doc: dict, diagnosis: Diagnosis, reader: RunReader, *, to_terminal: bool) -> str | None:
    """The report as a string, or None when it was printed straight to the terminal."""
    if fmt == "json":
        return json_text(doc)
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
        if console.is_terminal:
            render_text(doc, console)
            return None
    # a file or a pipe: 120 columns, without the spaces rich pads each table line with to that width
    console = Console(record=True, width=120, file=io.StringIO(), highlight=False)
    render_text(doc, console)
    return "".join(line.rstrip() + "\n" for line in console.export_text().splitlines())


def json_text(doc: dict) -> str:
    """``doc`` (clean: no NaN) as one line of ASCII JSON, which a terminal or pipe of any
    encoding takes: orjson's, 15x faster than the standard library on a long run's 2 MB report,
    where it is ASCII; the standard library's (which escapes the rest) for text beyond ASCII from
    the data (a path, a source's name) and for a number orjson cannot write (an integer beyond
    64 bits, from meta.json, say)."""
    import orjson

    try:
        text: str | None = orjson.dumps(doc).decode()
    except orjson.JSONEncodeError:
        text = None
    if text is None or not text.isascii():
        text = json.dumps(doc, allow_nan=False)
    return text + "\n"


@contextmanager
def analysis_progress(total: int, label: str = "analysing") -> Iterator:
    """A transient progress bar on stderr when it is a terminal; a no-op tick otherwise."""
    if not sys.stderr.isatty():
        yield lambda _stage: None
        return
    from rich.console import Console
    from rich.progress import Progress

    # on stderr's console: rich's default is stdout's, where the bar stayed unseen when stdout was
    # redirected (``> report.json``) and its end wrote a blank line into the report
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(label, total=total)

        def tick(stage: str) -> None:
            progress.update(task, advance=1, description=f"{label}: {stage}")

        yield tick
