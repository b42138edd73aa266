"""Reading input files line by line in bounded memory, optionally tailing a live one."""

from __future__ import annotations

import contextlib
import os
import re
import select
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from rlscope.errors import RLScopeError

__all__ = ["IDLE", "MAX_LINE_BYTES", "ImportInputError", "Tail", "check_text_file", "read_lines", "stdin_is_file"]

MAX_LINE_BYTES = 1 << 20  # a longer line is skipped: no metric line is anywhere near this long
_SNIFF_BYTES = 8192
# NUL bytes at the start of a file (or of a line) are a hole, not text: left by logrotate's
# copytruncate under a writer that does not append (``python train.py > train.log``), which
# goes on writing at its offset in the emptied file. They are skipped, this many at a read.
_HOLE_READ_BYTES = 1 << 20
_CONTROL_BYTES = re.compile(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f]")  # not in text: tab, line ends and ESC are
_MIN_JUDGED = 64  # bytes: fewer (a pipe's first byte) say too little to call them binary

IDLE = None  # yielded by ``read_lines`` while a followed file has no new data


class ImportInputError(RLScopeError):
    """An input file is missing, unreadable, not the format asked for, or (with --strict) malformed."""


@dataclass
class Tail:
    """Whether to keep reading a file as it grows, and when to stop: ``stop`` set, or
    ``max_seconds`` elapsed (a bound for tests and scripts); Ctrl-C also stops it."""

    follow: bool = False
    poll_interval: float = 0.5
    max_seconds: float | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # with --follow, from each read of any source until the next wait for input (the lines read
    # are imported), and from the end of a source until the next is read or the import closes:
    # an interrupt raised there would lose what was read, so one waits (``hold``)
    holding: bool = field(default=False, init=False)
    held: bool = field(default=False, init=False)
    interrupts: int = field(default=0, init=False)  # Ctrl-C and SIGTERM the CLI's handler passed to ``hold``
    signals: list[str] = field(default_factory=list, init=False)  # their names, in order ("SIGTERM")

    def __post_init__(self) -> None:
        self._deadline = None if self.max_seconds is None else time.monotonic() + self.max_seconds

    def hold(self, signal_name: str = "") -> bool:
        """Whether an interrupt that just came is to wait (for ``release``); False: raise it now
        (nothing read is being imported, or one already waits: a second stops at once).
        ``signal_name``: the signal that brought it, which the summary names."""
        self.interrupts += 1
        if signal_name:
            self.signals.append(signal_name)
        if not self.holding or self.held:
            return False
        self.held = True
        return True

    def release(self) -> None:
        """Hold interrupts no longer, raising the one held. Called before waiting for input, so
        that an interrupt never waits on the input, only on the lines already read."""
        self.holding = False
        if self.held:
            self.held = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """Hold an interrupt while the import writes what it read and ends: ending anyway, it
        does not raise one that waited (``run_import``'s summary says it came). A second one
        still stops it at once."""
        self.holding, self.held = True, False
        try:
            yield
        finally:
            self.holding = self.held = False

    def should_stop(self) -> bool:
        return self.stop.is_set() or (self._deadline is not None and time.monotonic() >= self._deadline)

    def wait(self) -> bool:
        """Sleep one poll interval; False when following should end."""
        if self.should_stop():
            return False
        self.stop.wait(self.poll_timeout())
        return not self.should_stop()

    def poll_timeout(self) -> float:
        """Seconds to wait for input: one poll interval, or what is left before ``max_seconds``."""
        if self._deadline is None:
            return self.poll_interval
        return max(0.0, min(self.poll_interval, self._deadline - time.monotonic()))


def check_text_file(
    path: str, *, piped_from: str | None = None, look: bool = True, pipe_into: str | None = None
) -> None:
    """Raise ``ImportInputError`` unless ``path`` is a readable file that looks like text
    (``-``: unless what waits on standard input looks like text). ``piped_from``: ``path`` is a
    copy of what that pipe (``<(zcat x.gz)``, ``-``: standard input) gave, and messages name the
    pipe. ``look=False``: standard input is looked at as it is read (a followed pipe may not have
    written yet, and a look would wait for it where Ctrl-C and ``--max-seconds`` cannot end the
    import), unless it is a file. ``pipe_into``: the command that reads a log on standard input
    (``rlscope diagnose -``), which a compressed log is told to be decompressed into; without
    it, ``rlscope import``."""
    stdin_decompress = (
        _STDIN_DECOMPRESS if pipe_into is None else f"decompress it in the pipe: zcat FILE.gz | {pipe_into}"
    )
    if path == "-":
        if sys.stdin is None:  # started with it closed (``<&-``)
            raise ImportInputError("standard input: closed, nothing to read")
        if look or stdin_is_file():  # a file never waits
            _check_head("standard input", _stdin_head(), stdin_decompress)
        return
    if not os.path.exists(path):
        raise ImportInputError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ImportInputError(f"{path}: is a directory, expected a file")
    if not os.path.isfile(path):  # a pipe (``<(zcat x.gz)``): what a look reads would be lost
        return
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
            while head and not head.strip(b"\0"):  # a hole (below): the text starts after it
                head = fh.read(_HOLE_READ_BYTES)
    except OSError as exc:
        raise ImportInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if piped_from == "-":
        _check_head("standard input", head, stdin_decompress)
        return
    if piped_from is not None:
        _check_head(piped_from, head, _PIPE_DECOMPRESS)
        return
    if pipe_into is not None:
        _check_head(path, head, f"decompress it in the pipe: zcat {path} | {pipe_into}")
        return
    how = f"gunzip -k {path}" if path.endswith(".gz") else f"zcat {path} > {path}.txt"
    _check_head(path, head, f"decompress it first ({how}) and import that")


_STDIN_DECOMPRESS = "decompress it in the pipe: zcat FILE.gz | rlscope import ... -"
_PIPE_DECOMPRESS = "decompress it in the pipe: <(zcat FILE.gz)"


def stdin_is_file() -> bool:
    """Whether standard input is a regular file (``< train.log``), which is followed as its path
    would be: from where it stands, to its end, then what is appended, not as a pipe."""
    try:
        return stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode)
    except (AttributeError, OSError, ValueError):  # closed, or replaced by something without a descriptor
        return False


def _stdin_head() -> bytes:
    """The first bytes waiting on standard input, left there to be read (b"" if it cannot peek)."""
    stream = getattr(sys.stdin, "buffer", None)
    peek = getattr(stream, "peek", None)
    if peek is None:
        return b""
    try:
        return peek(_SNIFF_BYTES)[:_SNIFF_BYTES]
    except (OSError, ValueError):  # closed, or not readable: reading it says so
        return b""


def _check_head(name: str, head: bytes, decompress: str) -> None:
    """Refuse what is not a text log. Text in another 8-bit encoding (GBK, Latin-1) is read,
    its other characters replaced: verl's metric lines are ASCII."""
    if head.startswith(b"\x1f\x8b"):
        raise ImportInputError(f"{name}: gzip-compressed; {decompress}")
    if _is_utf16(head):  # PowerShell's ``>`` writes UTF-16
        raise ImportInputError(f"{name}: UTF-16 text; convert it to UTF-8 first (iconv -f utf-16 -t utf-8)")
    head = head.lstrip(b"\0")[:_SNIFF_BYTES]  # after a hole
    if b"\0" in head:
        raise ImportInputError(f"{name}: binary data (NUL bytes), not a text file")
    if len(head) >= _MIN_JUDGED and len(_CONTROL_BYTES.findall(head)) > len(head) // 10:
        raise ImportInputError(f"{name}: binary data (control bytes), not a text file")


def _is_utf16(head: bytes) -> bool:
    """A byte-order mark, or text whose every other byte is NUL (ASCII in UTF-16 without one)."""
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    sample = head[: min(len(head), 256) // 2 * 2]
    if len(sample) < 8:
        return False
    even, odd = sample[0::2], sample[1::2]
    return (not odd.strip(b"\0") and b"\0" not in even) or (not even.strip(b"\0") and b"\0" not in odd)


def read_lines(
    path: str,
    tail: Tail,
    *,
    follow: bool,
    on_overlong: Callable[[int], None],
    on_unterminated: Callable[[int], None],
) -> Iterator[tuple[int, str] | None]:
    """Yield ``(line number, text without its line ending)``; while following, yield ``IDLE``
    whenever the file has no new data, and keep going until ``tail`` says stop.

    A line longer than ``MAX_LINE_BYTES`` is passed to ``on_overlong`` and skipped; a last line
    without its line end (a file copied while being written) is read and passed to
    ``on_unterminated``. A file that
    shrinks while followed (truncated by a log rotator) is read again from its start.
    """
    tail.release()  # one held since the last source's end stops here, not in a wait for this one (a FIFO's open)
    if path == "-":
        assert sys.stdin is not None  # check_text_file refused a closed one
        # a file, read as its path would be: at its end it waits for more (a pipe's end is the end), and
        # a followed import holds an interrupt as it does for a path (its look left bytes buffered: read them)
        if (follow or tail.follow) and stdin_is_file():
            chunks = _file_lines(sys.stdin.buffer, tail, follow)
        else:
            chunks = _pipe_lines(sys.stdin.buffer, "standard input", _STDIN_DECOMPRESS, tail, follow)
        yield from _numbered(chunks, on_overlong, on_unterminated)
        return
    with open(path, "rb") as fh:
        if os.path.isfile(path):
            chunks = _file_lines(fh, tail, follow)
        else:  # a pipe (``<(tail -f x)``, mkfifo), which check_text_file could not look into: read as stdin is
            chunks = _pipe_lines(fh, path, _PIPE_DECOMPRESS, tail, follow)
        yield from _numbered(chunks, on_overlong, on_unterminated)


def _numbered(
    chunks: Iterator[bytes | None], on_overlong: Callable[[int], None], on_unterminated: Callable[[int], None]
) -> Iterator[tuple[int, str] | None]:
    """Number the lines of ``chunks`` (pieces of at most MAX_LINE_BYTES) and drop overlong ones."""
    lineno, dropping, after_cr = 0, False, False
    for chunk in chunks:
        if chunk is None:
            yield IDLE
            continue
        if after_cr and chunk == b"\n":  # a CR LF pair that a read of MAX_LINE_BYTES split: one line end
            after_cr = False
            continue
        after_cr = chunk.endswith(b"\r")
        complete = chunk.endswith((b"\n", b"\r"))  # a CR ends a line too (old Mac tools)
        if dropping:
            dropping = not complete
            continue
        lineno += 1
        if not complete and len(chunk) >= MAX_LINE_BYTES:
            on_overlong(lineno)
            dropping = True
            continue
        if not complete:  # only the end of the input stops short of a line end
            on_unterminated(lineno)
        text = chunk.rstrip(b"\r\n").decode("utf-8", "replace")
        yield lineno, text.lstrip("\ufeff") if lineno == 1 else text  # a byte-order mark (Windows tools)


def _pipe_lines(stream: BinaryIO, name: str, decompress: str, tail: Tail, follow: bool) -> Iterator[bytes | None]:
    """Pieces of a pipe (standard input, or a path to one) as :func:`_file_lines` gives a file's
    (a leading hole skipped too); while following, ``None`` whenever a poll interval passes
    without input, so that the import writes what it has while a live job's pipe is quiet. Read
    in blocks, not lines: a line being written when the import is stopped is kept, not lost in
    a read waiting for its end.

    Its first bytes are checked to look like text (:func:`_check_head`) as they are read: up to
    ``_SNIFF_BYTES`` of them, or what came before it went quiet (``_MIN_JUDGED`` at least) or
    ended. A look before the import (not made for a followed pipe) may have seen only a byte."""
    pieces = _Pieces()
    head: bytes | None = b""  # what was read before the input was judged; None once it is
    try:
        if follow:
            blocks = _followed(stream.fileno(), tail)
        elif tail.follow:  # a pipe before the source followed: no look was made (nothing buffered), read held
            blocks = _to_its_end(stream.fileno(), tail)
        else:  # what the look at the input left buffered comes first
            blocks = iter(lambda: stream.read1(MAX_LINE_BYTES), b"")
        for block in blocks:
            if head is not None:  # not judged yet
                if block is not None:
                    head += block
                    if not head.strip(b"\0"):  # a hole so far: nothing to judge, nothing to keep
                        head = b""
                    if len(head) < _SNIFF_BYTES:
                        continue
                elif len(head) < _MIN_JUDGED:  # quiet before enough came to judge (a gzip's first byte)
                    yield None
                    continue
                yield from _judged(name, decompress, head, pieces)  # enough of it, or it went quiet
                head = None
                if block is None:
                    yield None
            elif block is None:
                yield None
            else:
                yield from pieces.add(block)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM while following: what was read is the input
        if tail.held:  # a second one, while the first waited: stop at once
            raise
        if head:
            yield from _judged(name, decompress, head, pieces)
        yield from pieces.rest()
        raise
    if head:
        yield from _judged(name, decompress, head, pieces)
    yield from pieces.rest()


def _judged(name: str, decompress: str, head: bytes, pieces: _Pieces) -> Iterator[bytes]:
    """The pieces of a pipe's first bytes, once they look like text."""
    _check_head(name, head, decompress)
    yield from pieces.add(head)


def _to_its_end(fd: int, tail: Tail) -> Iterator[bytes]:
    """Blocks read from ``fd`` until the input ends: a pipe read before the source that is
    followed. ``tail`` holds an interrupt from a read until the next wait for input, as
    :func:`_followed` does, and from the end on (the source's last lines are imported then)."""
    try:
        while True:
            tail.release()
            select.select([fd], [], [])  # a wait an interrupt ends at once
            tail.holding = True  # before the read (which select says will not wait): the block is kept
            block = os.read(fd, MAX_LINE_BYTES)
            if not block:
                return
            yield block
    except BaseException:
        tail.holding = False
        raise


def _followed(fd: int, tail: Tail) -> Iterator[bytes | None]:
    """Blocks read from ``fd`` as they come, ``None`` after a poll interval without any, until
    the input ends or ``tail`` says stop (then what is there is read one last time). Read in
    this thread: a thread left blocked in a read would keep the interpreter from exiting.

    From a read until the next wait for input, ``tail`` holds an interrupt: raised while the
    block's lines (hundreds, from a busy pipe) are parsed, it would lose those not yet parsed
    and the one being parsed; so too after it ends (what is left, a cut-off line, is imported
    then). It never waits on the input itself."""
    try:
        while True:
            tail.release()
            if select.select([fd], [], [], tail.poll_timeout())[0]:
                tail.holding = True  # before the read (which select says will not wait): the block is kept
                block = os.read(fd, MAX_LINE_BYTES)
                if not block:
                    break
                yield block
            elif not tail.should_stop():
                tail.holding = True  # what the import does while it is quiet: the last line read's import
                yield None
                continue
            if tail.should_stop():  # checked after a read too: a busy pipe is never quiet
                tail.release()
                if select.select([fd], [], [], 0)[0]:
                    tail.holding = True
                    if block := os.read(fd, MAX_LINE_BYTES):
                        yield block
                break
        tail.holding = True  # the end: what is left (a cut-off line) is imported, and the import closes
    except BaseException:
        tail.holding = False
        raise


_NOT_NUL = re.compile(rb"[^\0]")


class _Pieces:
    """Bytes read in blocks, handed out as ``_file_lines`` hands out a file's: each a whole line
    or MAX_LINE_BYTES of one (:func:`_whole_cr_lines`), NUL bytes before a line skipped. Walks
    each block by offset (slicing what is left after every line would copy it quadratically)."""

    def __init__(self) -> None:
        self._buf = b""
        self._at = 0  # where the next piece starts in _buf
        self._within = False  # the next piece goes on with what a CR split kept: no hole before it

    def add(self, block: bytes) -> Iterator[bytes]:
        self._buf, self._at = self._buf[self._at :] + block, 0
        yield from self._whole_pieces()

    def rest(self) -> Iterator[bytes]:
        """What is left when the input ends: its pieces, the last without its line end."""
        yield from self._whole_pieces()
        if self._at < len(self._buf):
            piece, self._buf, self._at = self._buf[self._at :], b"", 0
            yield piece

    def _whole_pieces(self) -> Iterator[bytes]:
        buf = self._buf
        while True:
            at = self._at
            if not self._within and buf.startswith(b"\0", at):  # a hole (copytruncate, through tail -F)
                found = _NOT_NUL.search(buf, at)
                at = self._at = found.start() if found else len(buf)
            end = buf.find(b"\n", at, at + MAX_LINE_BYTES)
            if end < 0 and len(buf) - at < MAX_LINE_BYTES:
                return
            cut = end + 1 if end >= 0 else at + MAX_LINE_BYTES
            whole, kept = _whole_cr_lines(buf[at:cut])
            self._at, self._within = cut - len(kept), bool(kept)  # before handing it out
            yield whole


def _whole_cr_lines(piece: bytes) -> tuple[bytes, bytes]:
    """``piece`` as (what to give now, what to keep for the next read): a piece of
    MAX_LINE_BYTES without a line feed gives the lines that end with a lone CR, if any."""
    if piece.endswith(b"\n") or len(piece) < MAX_LINE_BYTES:
        return piece, b""
    cr = piece.rfind(b"\r")
    return (piece[: cr + 1], piece[cr + 1 :]) if cr >= 0 else (piece, b"")


def _file_lines(fh: BinaryIO, tail: Tail, follow: bool) -> Iterator[bytes | None]:
    """Pieces of the file, each a whole line or MAX_LINE_BYTES of one; ``None`` when idle.

    While a piece is imported, ``tail`` holds an interrupt until the next read (reading a file
    never waits): raised in the middle, it would lose the line being imported."""
    partial, draining = b"", False
    guard = tail.follow  # only a followed import's interrupts are held (rlscope import --follow)
    try:
        while True:
            try:
                if guard:
                    tail.release()  # one held while the last piece was imported stops here
                chunk = fh.readline(MAX_LINE_BYTES - len(partial))
            except KeyboardInterrupt:
                if partial:
                    yield partial
                raise
            if chunk:
                if not partial and chunk.startswith(b"\0"):  # a hole, not the start of a line
                    chunk = chunk.lstrip(b"\0")
                    if not chunk:
                        continue
                partial += chunk
                if partial.endswith(b"\n") or len(partial) >= MAX_LINE_BYTES:
                    whole, partial = _whole_cr_lines(partial)
                    tail.holding = guard
                    yield whole
                continue
            if not follow or draining:
                break
            tail.holding = guard  # what the import does while it is quiet: the last line read's import
            yield None
            if os.fstat(fh.fileno()).st_size < fh.tell():  # truncated in place: start over
                fh.seek(0)
                partial = b""
            try:
                if guard:
                    tail.release()
                draining = not tail.wait()  # once told to stop, read what is there one last time
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM while following: the line begun is read as cut off
                if partial:
                    yield partial
                raise
        tail.holding = guard  # the end: its cut-off line is imported, and the import closes (Tail.closing)
        if partial:
            yield partial
    except BaseException:
        tail.holding = False
        raise
