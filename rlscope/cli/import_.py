"""Import the logs a verl run already wrote into a run directory, or follow a live one.

usage: rlscope import FORMAT SOURCE... --out RUN_DIR [--strict] [--follow] [--poll 0.5] [--meta JSON]

formats:
  verl-log      verl console output as captured: Ray prefixes, colours, tqdm bars, wrapped
                lines and pretty-printed validation dicts are handled
  verl-jsonl    the JSON lines of verl's file logger ({"step": N, "data": {...}})
  wandb-csv     a W&B history export (_step, _runtime, _timestamp, metric columns)
  tensorboard   one run's TensorBoard event files, a directory or files (needs tensorboard)

Several SOURCEs are read in order as one run (a restarted run often starts a new file);
"-" reads stdin. Metrics are stored under verl's current names (timing/gen -> timing_s/gen,
mfu/actor -> perf/mfu/actor, ...) and meta.json lists every key renamed. A step logged
again after a restart is kept as attempt 1, 2, ... of that step. RUN_DIR must not hold a
steps table yet. A verl-log's config dump or launch command and its model-size lines give
meta.json the batch shape, GPU count, model size and, for pooled trainers, the topology;
--meta adds what the log does not say (the GPU model, the topology of a separated run: see
docs/run-directory.md) and wins over what it does; a value the analyzers would then ignore
(a split that does not add up to the GPUs the log states) is said in the summary.

--follow keeps reading the last SOURCE as it grows (like tail -f; "-" too, when it is a file:
"- < train.log"), writing new steps every few seconds, until Ctrl-C or SIGTERM (a pipe: or
its end), which end the import normally (exit 0); a line still being written then is read as
a cut-off last line (its last field left out, and counted). One never waits for input, but
waits for the import of the lines already read (a file's last line, a pipe's last read), for a
write that makes (of up to 50,000 rows) and, at the end, for the final write: mostly a fraction
of a second, seconds to a slow or remote RUN_DIR; a second one stops at once. A signal ignored
when the import starts (Ctrl-C in a job started with "&") stays ignored.
--strict stops with an error naming FILE:LINE at the first line that looks like metrics but
cannot be read; without it such lines are skipped, and counted in the summary.

Exit codes: 0 done, 1 on error (input that cannot be imported), 2 on bad usage (an --out
that is a file or already holds a steps table).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import threading
from collections.abc import Iterator, Sequence

from rlscope.cli._args import json_object, parser_for, seconds
from rlscope.collectors.importers import IMPORTERS, ImportInputError, Tail

__all__ = ["main"]


_CONSOLE_STEP = re.compile(r"\bstep:\d+ - ")
_JSON_STEP = re.compile(r'^\s*\{\s*"')
_SNIFF_LINES = 1000  # a console log's first step line can follow a config dump of hundreds of lines


def _other_format_hint(fmt: str, source: str) -> str:
    """Name the other verl format when ``source``, which read as ``fmt`` gave nothing, looks like
    it: verl's JSONL opens with a JSON object, a console log holds ``step:N - `` lines."""
    if fmt not in ("verl-log", "verl-jsonl") or source == "-":
        return ""
    try:
        with open(source, encoding="utf-8", errors="replace") as fh:
            lines = [line for _, line in zip(range(_SNIFF_LINES), fh, strict=False)]
    except OSError:
        return ""
    first = next((line for line in lines if line.strip()), "")
    if fmt == "verl-log" and _JSON_STEP.match(first):
        return "; it reads as verl's JSONL: rlscope import verl-jsonl"
    if fmt == "verl-jsonl" and any(_CONSOLE_STEP.search(line) for line in lines):
        return "; it reads as a verl console log: rlscope import verl-log"
    return ""


@contextlib.contextmanager
def _interrupts(tail: Tail) -> Iterator[None]:
    """Make SIGTERM stop a followed import like Ctrl-C does, and let either wait while the lines
    already read are imported and written (``Tail.hold``; when, see ``Tail.holding``), which an
    interrupt raised in the middle would lose; a second one stops at once. Main thread only; a signal
    that is ignored (Ctrl-C in a job a script started with ``&``; SIGTERM, by the parent's
    choice), or a Ctrl-C handled by someone else, is left so."""
    if not tail.follow or threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        if not tail.hold(signal.Signals(signum).name):
            raise KeyboardInterrupt

    signals = [signal.SIGTERM] if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN else []
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    previous = {sig: signal.signal(sig, interrupt) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str]) -> int:
    parser = parser_for("import", __doc__)
    parser.add_argument("format", choices=list(IMPORTERS), metavar="FORMAT")
    parser.add_argument("sources", nargs="+", metavar="SOURCE")
    parser.add_argument("-o", "--out", required=True, metavar="RUN_DIR", help="run directory to write")
    parser.add_argument("--strict", action="store_true", help="stop at the first unreadable metric line")
    parser.add_argument("--follow", action="store_true", help="keep reading the last SOURCE as it grows")
    parser.add_argument(
        "--poll", type=seconds(zero=False), default=0.5, metavar="SECONDS", help="--follow's poll interval (0.5)"
    )
    parser.add_argument(
        "--meta", type=json_object, metavar="JSON", help='meta.json entries, e.g. \'{"gpu": {"count": 8}}\''
    )
    parser.add_argument("--max-seconds", type=float, help=argparse.SUPPRESS)  # bound for tests and scripts
    args = parser.parse_args(argv)
    if args.meta:
        from rlscope.analyzers._data import meta_problems

        problems = meta_problems(args.meta)  # as diagnose --meta refuses them: not written to be ignored later
        if problems:
            parser.error(f"--meta: {problems[0]}")
    tail = Tail(follow=args.follow, poll_interval=args.poll, max_seconds=args.max_seconds)
    with _interrupts(tail):
        summary = IMPORTERS[args.format](args.sources, args.out, strict=args.strict, tail=tail, meta=args.meta)
    if summary.values == 0 and not args.follow:  # nothing written: no summary that says "-> RUN_DIR"
        skipped = summary.skips()
        raise ImportInputError(
            f"no metrics found in {', '.join(args.sources)} (read as {args.format}"
            + (f"; skipped {skipped}" if skipped else "")
            + ")"
            + _other_format_hint(args.format, args.sources[0])
        )
    print(summary)
    return 0
