"""The ``rlscope`` command line: one module per command, each with ``main(argv) -> int``.

Errors that are the user's (a bad path, a bad option) are ``RLScopeError``s: printed as
one ``rlscope: ...`` line on stderr with the error's exit code, never a traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence
from typing import NoReturn

from rlscope.errors import RLScopeError

__all__ = ["COMMANDS", "main", "run"]

# command -> (module, one-line summary); modules are imported only when their command runs
COMMANDS: dict[str, tuple[str, str]] = {
    "compare": ("rlscope.cli.compare", "two runs side by side, with the differences explained"),
    "diagnose": ("rlscope.cli.diagnose", "post-mortem of a run: where time and FLOPs went, what to change"),
    "info": ("rlscope.cli.info", "print a run directory's model, GPUs and batch, tables, rows, steps and time range"),
    "compact": ("rlscope.cli.compact", "merge a run directory's segments without losing a row"),
    "collect": ("rlscope.cli.collect", "sample GPU counters (NVML) into a run directory"),
    "import": (
        "rlscope.cli.import_",
        "import verl logs (console, file logger, W&B CSV, TensorBoard) into a run directory",
    ),
    "simulate": ("rlscope.cli.simulate", "write a simulated run (ledger model) with its ground truth"),
    "export": ("rlscope.cli.export", "serve run directories' metrics for Prometheus (/metrics)"),
    "dashboard": ("rlscope.cli.dashboard", "serve a live web dashboard of run directories (Dash)"),
}


# Commands whose work is all done when ``main`` returns: no Recorder, server, child process or
# temporary file is left for exit handlers. Their process ends without the interpreter's teardown
# of pandas, numpy and pyarrow, 0.15 s of every such command, more than diagnose's report takes.
_ENDS_AT_ONCE = frozenset({"diagnose", "compare", "info"})


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: rlscope COMMAND [options]   (rlscope COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


# Unicode's Cc but line breaks and tabs: a path or a string from the data in a message cannot
# drive the terminal (recolour it, clear it), and a message's own lines stay lines
_DRIVES_TERMINAL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _plain(text: str) -> str:
    """``text`` with the control characters that drive a terminal written out (``\\x1b``)."""
    return _DRIVES_TERMINAL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class _StderrLines(logging.Handler):
    """``rlscope: warning: ...`` on whatever ``sys.stderr`` is when a record is emitted; a record
    logged with an exception (a dashboard page that failed, say) carries its traceback below."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            trace = f"{logging.Formatter().formatException(record.exc_info)}\n" if record.exc_info else ""
            sys.stderr.write(f"rlscope: {record.levelname.lower()}: {_plain(record.getMessage())}\n{trace}")
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


def _setup_logging() -> None:
    logger = logging.getLogger("rlscope")
    if not any(isinstance(h, _StderrLines) for h in logger.handlers):
        logger.addHandler(_StderrLines())
    logger.setLevel(logging.INFO)


def _use_jemalloc() -> None:
    """Allocate Arrow memory with jemalloc rather than pyarrow's default mimalloc.

    Reading a large run, mimalloc hands freed pages back to the kernel and faults them in
    again: on an 8.2M-row run ``diagnose`` spent 2 s in the kernel with it and 0.7 s with
    jemalloc or the system allocator (bench/README.md). ``ARROW_DEFAULT_MEMORY_POOL`` still
    wins when set; builds without jemalloc use the system allocator.
    """
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except NotImplementedError:
        pa.set_memory_pool(pa.system_memory_pool())


def _os_error(exc: OSError) -> str:
    """``PATH: reason`` as rlscope's other one-line errors say it, where the error names a file
    (a rename names two); else what the OS said."""
    if exc.filename is None or not exc.strerror:
        return str(exc)
    path = f"{exc.filename} -> {exc.filename2}" if exc.filename2 is not None else str(exc.filename)
    return f"{_plain(path)}: {exc.strerror}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rlscope`` with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from rlscope import __version__

        print(f"rlscope {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"rlscope: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        _setup_logging()
        _use_jemalloc()
        module = importlib.import_module(COMMANDS[name][0])  # Ctrl-C while importing is an interrupt too
        return int(module.main(rest))
    except RLScopeError as exc:
        print(f"rlscope: {_plain(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("rlscope: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except OSError as exc:  # what the machine refused (a full disk, a path that cannot be written)
        print(f"rlscope: {' '.join(_os_error(exc).split())}", file=sys.stderr)
        return 1


def run() -> NoReturn:
    """The ``rlscope`` program (its console script and ``python -m rlscope``): :func:`main`, then
    the exit. A command of ``_ENDS_AT_ONCE`` flushes what it wrote and ends the process at once."""
    # numpy's BLAS (OpenBLAS) otherwise starts a thread per core whose workers spin after each
    # call: rlscope's few least-squares fits are tiny, and the spinning cost diagnose 0.18 s of CPU
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = sys.argv[1:]
    if not args or args[0] not in _ENDS_AT_ONCE:
        sys.exit(main(args))
    try:
        code = main(args)
    except SystemExit as exc:  # argparse's usage error or --help: exited as Python would
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:  # a closed descriptor (>&-): there is nothing to flush
                stream.flush()
        except (OSError, ValueError) as exc:
            if stream is sys.stdout:  # a reader gone (| head) as main says of it, or a full disk
                code = code or 1
                if not isinstance(exc, BrokenPipeError) and sys.stderr is not None:
                    print(f"rlscope: cannot write the output: {exc}", file=sys.stderr)
    os._exit(code)
