"""Import verl's console output (``trainer.logger=['console']``) as it was captured.

verl prints each step's metrics as one line, ``step:N - key:value - key:value ...``
(``verl/utils/logger/aggregate_logger.py``, numbers only, formatted by ``pprint.pformat``,
so numpy 2 values read ``np.float64(0.5)``). Captured logs are messier than that, and this
parser reads what it can of every line and never stops on one it cannot:

- Ray prefixes (``(TaskRunner pid=1)``, ``(main_task pid=1, ip=10.0.0.1)``), ANSI colours
  as real escapes, caret text (``^[[36m``) or without their ESC byte (``[36m``, as pasted
  into an issue), Ray's ``[repeated 2x across cluster]``, ``>`` quote marks, surrounding
  quotes, CRLF or CR line ends; a time stamp before each line (``kubectl logs --timestamps``,
  ``docker logs -t``, ``ts``);
- tqdm bars on the same line as a metric line, before or after it;
- metric lines hard-wrapped by a terminal or a paste, even mid-token: a following line
  without a Ray prefix that can only be the rest of the line is joined back;
- ``nan``, ``inf``, ``1e-06``, ``np.float64(..)``, ``True``; keys with parentheses
  (``critic/lr(1e-4)``); a key repeated in a line (the first value is kept);
  free-text fields between the metrics (skipped and counted);
- pretty-printed metric dicts: verl's ``Initial validation metrics: {...}`` (pprint-ed, so
  split over several quoted lines), ``Final validation metrics``, the fully async trainer's
  ``parameter version: N Validation metrics: {...}``, or a bare dict of ``a/b`` keys. Values
  that the neighbouring step line already holds are dropped (with the console logger on,
  verl logs the same dict as a step line too), also where the line rounds them (TinyZero's
  logger prints 3 decimals: the value keeps the dict's digits); the rest is imported at the
  step the text names; for the final validation, at the step of the validation-only step
  line after it that repeats some of it (verl <= 0.2 and TinyZero log it at the next step),
  else at the last step; for any other dict printed before a step line (the initial
  validation), at that line's step, less one when it is a training step (when none follows:
  at the last step, or 0). Other nested dicts, and dicts none of whose keys is a
  path like verl's (``sample 3 reward metrics: {'acc': 1.0}``, a reward function's own
  print), are ignored.

What the log says about the run goes to meta.json (``rlscope.collectors.verl_config``): the
config dump verl pprints at start, else the Hydra overrides of a launch command echoed into
the log (``+ python3 -m verl.trainer.main_ppo data.train_batch_size=128 ...``), and the
actor's and critic's sizes from verl's ``... contains 494.03M parameters`` lines.

Steps are numbered as logged (but for the fully async trainer's training metrics, which go
under the update they describe: ``verl_metrics.split_record``); a step logged again after a
restart becomes a new attempt (see ``StepSink``). Lines read while following a live log get the time they were read.
"""

from __future__ import annotations

import ast
import math
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
from rlscope.collectors.verl_config import MAX_LAUNCH_CHARS, LogFacts
from rlscope.collectors.verl_metrics import record_trains

__all__ = ["import_verl_log"]

_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-?]*[ -/]*[@-~]")
_BARE_SGR = re.compile(r"\[(?:\d{1,3};)*\d{1,3}m")  # a colour code whose ESC byte was lost in a paste
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_QUOTE_MARKS = re.compile(r"^\s*(?:>\s?)+")
# a time stamp that a log collector puts before each line (kubectl logs --timestamps, docker logs -t, ts)
_LINE_STAMP = re.compile(
    r"^\s*(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)[ \t]"  # one blank: the line's own indentation stays
)
_RAY_PREFIX = re.compile(
    r"^\s*\((?:[^()\s][^()]*?\s)?pid=\d+[^()]*\)\s?|^\s*\((?:raylet|autoscaler|gcs_server|monitor|dashboard)\b[^()]*\)\s?"
)
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")
_TQDM = re.compile(
    r"(?:[A-Za-z][\w ]*:\s*)?\d{1,3}%\|[^|]*\|\s*[\d.]+[kMG]?/[\d.?]+[kMG]?\s*\[[^\]]*\]|\d+it \[[^\]]*\]"
)
_STEP = re.compile(r"(?<![\w/.-])step:(-?\d+)(?=\s+-|\s*$)")
_BAD_STEP = re.compile(r"(?<![\w/.-])step:(\S+)\s+-\s+[^\s:]+:")
_SPACE = re.compile(r"\s")
_SEP = re.compile(r"\s+-(?:\s+|(?=[A-Za-z_]))")
_TRAILING_JUNK = re.compile(r"(?:\\[nr]|[\s\"'`,])+$")
# the rest of a wrapped metric line: a fragment, " - key:value" fields, maybe the start of one more
_TAIL_FIELDS = re.compile(r"^\S*(?:\s+-\s+[^\s:]+:\S*)*(?:\s+-\s*[^\s:]*)?\s*$")
_ANY_STEP = re.compile(r"(?<![\w/.-])step\s*:", re.I)  # "Step:2", " step:3"; not timing_s/step, perf/time_per_step
_MID_FIELD = re.compile(r"^\s*(?::|-\s|[^\s:]*:\S*\s+-\s)")  # ":397.0 - ", "- a/b:1", "max:397.0 - "
_METRIC_FIELD = re.compile(r"(?:^|\s)-\s+[^\s:]+/[^\s:]*:(\S+)")  # " - a/b:value"
_TAIL_NUMBER = re.compile(r"^[\d.eE+-]+(?:\\[nr]|[\s\"'`,])*$")  # what _TRAILING_JUNK strips may follow
_STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_PAIR = re.compile(r"""['"]([^'"]+)['"]\s*:\s*([^,{}]+?)\s*(?=,|\}|$)""")
_PRINTED_NUMBER = re.compile(r"\d*\.?\d+(?:[eE][-+]?\d+)?")
_LABEL_STEP = re.compile(r"(?:step|version)\D{0,3}(\d+)", re.I)
# the first line of verl's config dump: pprint sorts keys, so it opens with one of these sections
_CONFIG_START = re.compile(
    r"""^\{['"](?:actor_rollout_ref|algorithm|critic|custom_reward_function|data|trainer)['"]\s*:"""
)

_MAX_BLOCK_LINES = 5000
_MAX_BLOCK_CHARS = 1 << 20


def _step_number(digits: str) -> int | None:
    """A logged step number if int64 holds it (checked before ``int()``, which refuses 4,300 digits)."""
    if digits.startswith("-"):
        return None  # steps count from 0
    magnitude = digits.lstrip("0") or "0"
    return whole_step(int(magnitude)) if len(magnitude) <= 19 else None


def _clean(piece: str) -> tuple[str, str]:
    """``(ray prefix, text)`` of one line piece, without colours, quote marks or Ray noise."""
    if "\x1b" in piece or "^[" in piece:
        piece = _ANSI.sub("", piece)
    if not piece.isprintable():
        piece = _CONTROL.sub("", piece)
    if "m" in piece and "[" in piece:
        piece = _BARE_SGR.sub("", piece)
    if piece.lstrip().startswith(">"):
        piece = _QUOTE_MARKS.sub("", piece)
    if piece.lstrip()[:1].isdigit() or piece.lstrip()[:1].isupper():  # the stamp, quoted or indented too
        piece = _LINE_STAMP.sub("", piece, count=1)
        if piece.lstrip().startswith(">"):  # quote marks after the stamp
            piece = _QUOTE_MARKS.sub("", piece)
    prefix = ""
    while match := _RAY_PREFIX.match(piece):
        prefix += match.group(0).strip()
        piece = piece[match.end() :]
    if "across cluster]" in piece:
        piece = _RAY_REPEATED.sub("", piece)
    return prefix, piece


def _strip_tqdm(text: str) -> str:
    return _TQDM.sub(" ", text) if "%|" in text or "it [" in text else text


def _wrapped_launch(text: str) -> bool:
    """Whether a line can be the rest of a launch command that a terminal wrapped: it goes on
    mid-word at its first character, and every word after the first is an override (``k=v``)."""
    words = text.split()
    return bool(words) and not text[0].isspace() and all("=" in w for w in words[1:])


def _orphaned_fields(text: str) -> bool:
    """Whether ``text`` (a line without a Ray prefix) is the rest of a wrapped metric line whose
    first part another line cut off: it opens mid-field (``:397.0 - ``, `` - a/b:1``), holds
    metric fields (`` - a/b:1.5 - c/d:2``), and no step of its own (``Step:2``, `` step:3``; a key
    such as ``training/global_step:5`` or ``perf/time_per_step:9`` is a field like any other)."""
    if _ANY_STEP.search(text) or not _MID_FIELD.match(text):
        return False
    return sum(parse_number(value) is not None for value in _METRIC_FIELD.findall(text)) >= 2


def _half_unit(raw: str) -> float:
    """How far from a value printed as ``raw`` the value it rounds may lie: half a unit in its
    last digit (``0.008``: 0.0005, ``1.5e-05``: 5e-07); 0 for an integer, ``nan`` or ``inf``."""
    numbers = _PRINTED_NUMBER.findall(raw)
    if not numbers or not any(c in numbers[-1] for c in ".eE"):
        return 0.0
    mantissa, _, exponent = numbers[-1].lower().partition("e")
    return 0.5 * 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


@dataclass
class _StepLine:
    """A step line's metrics, and per key how far the value it rounds may lie (``_half_unit``)."""

    step: int
    metrics: dict[str, float]
    half_units: dict[str, float]

    def holds(self, key: str, value: float) -> bool:
        """Whether the line holds ``value`` for ``key``, as printed (a console logger that prints
        ``.3f`` shows a dict's 0.0078125 as 0.008)."""
        other = self.metrics.get(key)
        if other is None:
            return False
        if other == value or (math.isnan(other) and math.isnan(value)):
            return True
        return abs(other - value) <= self.half_units.get(key, 0.0) * (1 + 1e-9)

    def unseen(self, metrics: Mapping[str, float]) -> dict[str, float]:
        """The metrics that this line does not already hold."""
        return {key: value for key, value in metrics.items() if not self.holds(key, value)}


class _Block:
    """A metric dict being collected over several lines (only lines with the same Ray prefix)."""

    def __init__(self, where: str, prefix: str, kind: str, text: str):
        self.where, self.prefix, self.kind = where, prefix, kind
        self.lines = [text]
        self.chars = len(text)
        self.braces = self.parens = 0
        self.seen_brace = False
        self._count(text)

    def _count(self, text: str) -> None:
        self.braces += text.count("{") - text.count("}")
        self.parens += text.count("(") - text.count(")")
        self.seen_brace = self.seen_brace or "{" in text

    def add(self, text: str, *, wrapped: bool = False) -> None:
        if wrapped:
            self.lines[-1] += text
        else:
            self.lines.append(text)
        self.chars += len(text)
        self._count(text)

    @property
    def done(self) -> bool:
        closed = self.braces <= 0 and (self.kind != "strings" or self.parens <= 0)
        return closed and (self.seen_brace or self.kind == "strings")

    @property
    def too_big(self) -> bool:
        return len(self.lines) > _MAX_BLOCK_LINES or self.chars > _MAX_BLOCK_CHARS

    def text(self) -> str:
        if self.kind != "strings":
            return " ".join(self.lines)
        parts = []
        for literal in _STRING_LITERAL.findall("\n".join(self.lines)):
            try:
                parts.append(ast.literal_eval(literal))
            except (ValueError, SyntaxError):
                parts.append(literal[1:-1])
        return "".join(parts)


class _Parser:
    """Turns log lines into sink records, holding back at most one step line (the next line
    may continue it), one dict being collected and one dict waiting for its step line."""

    def __init__(self, sink: StepSink):
        self.sink = sink
        self.step_text: str | None = None  # a step line that the next line may continue
        self.step_where = ""
        self.step_time: float | None = None
        self.step_cut = False  # the pending step line ends in a line cut off (no line end)
        self.piece_cut = False  # the text being fed is the end of such a line
        self.block: _Block | None = None
        # a dict printed before its step line: where, its metrics, whether it is the final validation
        self.waiting: tuple[str, dict[str, float], bool] | None = None
        self.last_line: _StepLine | None = None
        self.tail = ""  # the last characters of the last line classified: a wrap may split "step:"
        self.facts = LogFacts()
        self.launch_text: str | None = None  # a launch command that the next line may continue
        self.launch_continued = False  # its last line ended with "\\"

    # -- input ---------------------------------------------------------------------------

    def feed(self, where: str, line: str, when: float | None, *, cut: bool = False) -> None:
        """Read one line; ``cut``: the last line of a file, without its line end."""
        pieces = [p for p in line.split("\r") if p] or [""]
        for index, piece in enumerate(pieces):
            self.piece_cut = cut and index == len(pieces) - 1
            prefix, text = _clean(piece)
            if self.launch_text is not None:
                if not (prefix or _STEP.search(text)) and (self.launch_continued or _wrapped_launch(text)):
                    self._continue_launch(text)
                    continue
                self._end_launch()  # the command ended: a step line, another process's output, other text
            if self.step_text is not None:
                if self._continues(prefix, text):
                    self.step_text += text
                    self.step_cut = self.piece_cut
                    continue
                if text.strip() and not _strip_tqdm(text).strip():
                    continue  # a progress bar redrawn between the pieces of a wrapped line
                self._emit_step()
            if self.block is not None and self.block.kind == "config" and self._leaves_dump(prefix, text):
                self._drop_block()  # it never closed
            if self.block is not None and not _STEP.search(text):
                if prefix == self.block.prefix:
                    self._grow_block(text)
                    continue
                # the rest of a hard-wrapped line of it (a config dump's process prints whole lines)
                if not prefix and self.block.kind != "config" and _strip_tqdm(text).strip():
                    self._grow_block(text, wrapped=True)
                    continue
            self._classify(where, prefix, text, when)

    def idle(self) -> None:
        """No more input for now: a pending step line is complete (verl prints whole lines)."""
        if self.step_text is not None:
            self._emit_step()

    def end_of_source(self) -> None:
        """A source ended: nothing continues across files except a dict waiting for its step."""
        self.idle()
        if self.launch_text is not None:
            self._end_launch()
        if self.block is not None:
            self._drop_block()

    def finish(self) -> None:
        """All sources ended."""
        self.end_of_source()
        if self.waiting is not None:
            self._settle_waiting(None)

    # -- classification ------------------------------------------------------------------

    def _classify(self, where: str, prefix: str, text: str, when: float | None) -> None:
        tail, self.tail = self.tail, text[-5:]
        if not prefix and tail:  # a wrap inside "step:" itself: "(TaskRunner pid=1) ste" + "p:3 - a:1"
            match = _STEP.search(tail + text[:24])
            if match and match.start() < len(tail):
                self.step_text, self.step_where, self.step_time = (tail + text)[match.start() :], where, when
                self.step_cut = self.piece_cut
                return
        if "step:" in text:
            text = _strip_tqdm(text)
            match = _STEP.search(text)
            if match:
                self.step_text, self.step_where, self.step_time = text[match.start() :], where, when
                self.step_cut = self.piece_cut
                return
            bad = _BAD_STEP.search(text)
            if bad:
                self.sink.skip("bad_step", where, bad.group(0))
                return
        if not prefix and _orphaned_fields(text):
            self.sink.skip("orphaned_fields", where, text, bad=False)
            return
        stripped = text.strip()
        lowered = stripped.lower()
        if " contains " in text:
            self._model_size(where, text)
        if ("=" in text or text.rstrip().endswith("\\")) and LogFacts.is_launch(text):
            self._start_launch(text)
            return
        kind = None
        if stripped.startswith(("{'", '{"')) and _CONFIG_START.match(stripped):
            kind = "config"
        elif stripped.startswith(("('", '("')) and "metrics" in lowered:
            kind = "strings"  # pprint of a long string: ("Initial validation metrics: {'a': "\n "1.0}")
        elif "metrics" in lowered and "{" in stripped[lowered.index("metrics") :]:
            kind = "text"
        elif stripped.startswith(("{'", '{"')) and "/" in stripped.split(":", 1)[0]:
            kind = "dict"  # a bare pprint-ed dict of metric keys
        if kind is None:
            return
        if self.block is not None:  # another process's block while one is open
            if kind == "config":  # a dump never displaces metrics
                self.sink.skip("unreadable_config_dump", where, bad=False)
                return
            if self.block.kind == "config":
                self._drop_block()
        self.block = _Block(where, prefix, kind, text)
        self._grow_block(None)

    def _continues(self, prefix: str, text: str) -> bool:
        """Whether ``text`` (a line without a Ray prefix) is the rest of the pending step line."""
        if prefix or not _strip_tqdm(text).strip():
            return False
        head = _TRAILING_JUNK.sub("", self.step_text or "")
        _, colon, value = _SEP.split(head)[-1].rpartition(":")
        step = _STEP.search(text) or _BAD_STEP.match(text)  # "step:2.0 - a:1" starts a (bad) line too
        if step:  # a step line of its own, unless this one stopped inside a key ("training/global_" + "step:7 - ")
            return step.start() == 0 and not colon and bool(head) and not head.endswith("-")
        if head.endswith("-") or not colon or parse_number(value) is None:
            return True  # the line cannot end there
        if text.startswith(":") or _SEP.match(" " + text):  # ": 1.5 - ...", "- key:1", not "-----"
            return True
        if " -" in text and _TAIL_FIELDS.match(text):
            return True
        # the rest of a number wrapped inside it, if the two make one ("31.2" + "5", not "8.991" + "0.5")
        inside = _TAIL_NUMBER.match(text) and not (self.step_text or " ")[-1].isspace()
        return bool(inside) and parse_number(value + _TRAILING_JUNK.sub("", text.strip())) is not None

    # -- step lines ----------------------------------------------------------------------

    def _emit_step(self) -> None:
        text, where, when = self.step_text or "", self.step_where, self.step_time
        self.step_text = None
        text = _TRAILING_JUNK.sub("", _strip_tqdm(text))
        match = _STEP.match(text)
        if match is None:  # only possible if joining broke the line: treat as unreadable
            self.sink.skip("bad_step", where, text)
            return
        step = _step_number(match.group(1))
        if step is None:
            self.sink.skip("bad_step", where, match.group(0))
            return
        fields = [f.strip() for f in _SEP.split(text[match.end() :])]
        cut, self.step_cut = self.step_cut, False
        if cut:  # the line stops where the copy did: its last field may be a number cut short
            last = next((i for i in reversed(range(len(fields))) if fields[i] not in ("", "-")), None)
            if last is not None:
                self.sink.skip("cut_off_field", where, fields[last], bad=False)
                self.sink.note(
                    f"{where}: this step line ends the file without a line end (copied while being written?); "
                    f"its last field, {fields[last][:80]!r}, may be cut off and was left out"
                )
                del fields[last]
        line = _StepLine(step, {}, {})
        for field in fields:
            if not field or field == "-":
                continue
            key, sep, raw = field.rpartition(":")
            key = key.strip()
            if not sep or not key or _SPACE.search(key):
                self.sink.skip("free_text_field", where, field)
                continue
            value = parse_number(raw)
            if value is None:
                self.sink.skip("bad_value", where, field)
            elif key in line.metrics:
                self.sink.skip("duplicate_key", where, key, bad=False)
            else:
                line.metrics[key], line.half_units[key] = value, _half_unit(raw)
        if not line.metrics:
            if not cut:  # else the field left out was its only one
                self.sink.skip("empty_step_line", where, text)
            return
        if self.waiting is not None:
            self._settle_waiting(line)
        self.sink.add(step, line.metrics, when=when, where=where)
        self.last_line = line

    # -- metric dicts --------------------------------------------------------------------

    def _grow_block(self, text: str | None, *, wrapped: bool = False) -> None:
        block = self.block
        assert block is not None
        if text is not None:
            block.add(text, wrapped=wrapped)
        if block.done:
            self.block = None
            self._block_done(block)
        elif block.too_big:
            self._drop_block()

    def _drop_block(self) -> None:
        """The open block will not close: count it (a config dump or a metrics dict) and forget it."""
        block, self.block = self.block, None
        assert block is not None
        if block.kind == "config":
            self.sink.skip("unreadable_config_dump", block.where, bad=False)
        else:
            self.sink.skip("unterminated_block", block.where, block.lines[0])

    def _block_done(self, block: _Block) -> None:
        text = block.text()
        start = text.find("{")
        if start < 0:
            return
        label, body = text[:start], text[start + 1 :]
        if block.kind == "config":
            self._config_dump(block.where, text[start:])
            return
        if "{" in body:  # nested, and not a config dump: not metrics
            return
        metrics: dict[str, float] = {}
        for key, raw in _PAIR.findall(body):
            value = parse_number(raw)
            if _SPACE.search(key):
                self.sink.skip("free_text_field", block.where, key)
            elif value is None:
                self.sink.skip("bad_value", block.where, f"{key}: {raw}")
            else:
                metrics.setdefault(key, value)
        if not any("/" in k for k in metrics):  # verl's metric keys are paths; {'acc': 1.0} is someone's print
            return
        last = self.last_line
        named = _LABEL_STEP.search(label)
        if named:  # the step it names
            step = _step_number(named.group(1))
            if step is None:
                self.sink.skip("dict_without_step", block.where, bad=False)
                return
            if last is not None and step == last.step:
                metrics = last.unseen(metrics)
            if metrics:
                self.sink.add(step, metrics, where=block.where)
            else:
                self.sink.skip("duplicate_of_step_line", block.where, bad=False)
            return
        # pprint(metrics) after logging them, or the final validation after the last step line
        metrics = last.unseen(metrics) if last is not None else metrics
        if not metrics:
            self.sink.skip("duplicate_of_step_line", block.where, bad=False)
            return
        if self.waiting is not None:
            self._settle_waiting(None)
        self.waiting = (block.where, metrics, "final" in label.lower())

    # -- run facts -----------------------------------------------------------------------

    def _leaves_dump(self, prefix: str, text: str) -> bool:
        """Whether a line of the process printing the config dump cannot belong to it: pprint
        indents every line after the first, so an unindented one starts something else."""
        assert self.block is not None
        return prefix == self.block.prefix and bool(text.strip()) and not text[0].isspace()

    def _config_dump(self, where: str, text: str) -> None:
        if self.facts.config_dump(text):
            self.sink.found(self.facts.meta())
        else:
            self.sink.skip("unreadable_config_dump", where, bad=False)

    def _start_launch(self, text: str) -> None:
        self.launch_text = ""
        self._continue_launch(text)

    def _continue_launch(self, text: str) -> None:
        """Gather a launch command: lines continued with ``\\`` are joined with a space; a line
        that ends without one may still go on where a terminal wrapped it (``_wrapped_launch``)."""
        assert self.launch_text is not None
        head = text.rstrip()
        if len(self.launch_text) + len(head) >= MAX_LAUNCH_CHARS:
            self._end_launch()
            return
        self.launch_continued = head.endswith("\\")
        self.launch_text += head[:-1] + " " if self.launch_continued else head

    def _end_launch(self) -> None:
        """Take the overrides of the launch command gathered so far."""
        command, self.launch_text = self.launch_text or "", None
        self.facts.launch(command)
        self.sink.found(self.facts.meta())

    def _model_size(self, where: str, text: str) -> None:
        taken, mixture = self.facts.model_size(text)
        if taken:
            self.sink.found(self.facts.meta())
        elif mixture:
            self.sink.skip("moe_total_params", where, mixture, bad=False)  # not the active count MFU needs

    def _settle_waiting(self, following: _StepLine | None) -> None:
        """Import the dict printed before a step line unless that line repeats it: the initial
        validation, or the final one of verl <= 0.2 and TinyZero, which print it and then log it
        at the next step. A value the line holds rounded takes the dict's digits there."""
        assert self.waiting is not None
        where, metrics, final = self.waiting
        self.waiting = None
        last = self.last_line
        if final and following is not None and last is not None:
            # its own step line trains nothing, after the last step, and repeats it; any other (a
            # restarted run's first line, the log of this one cut short) is not the final validation's
            own = following.step > last.step and not record_trains(following.metrics)
            if not own or following.unseen(metrics) == metrics:
                following = None
        if following is None:
            if final and last is None:  # no step line before it or after it
                self.sink.skip("dict_without_step", where, bad=False)
                return
            step = last.step if last is not None else 0
        else:
            step, after = following.step, following.metrics
            unseen = following.unseen(metrics)
            for key in metrics.keys() - unseen.keys():
                after[key] = metrics[key]
            metrics = unseen
            if record_trains(after):
                step = max(step - 1, 0)  # validation before a training step: of the weights before it
        if metrics:
            self.sink.add(step, metrics, where=where)
        else:
            self.sink.skip("duplicate_of_step_line", where, bad=False)


def import_verl_log(
    sources: Sequence[str | os.PathLike[str]],
    run_dir: str | os.PathLike[str],
    *,
    strict: bool = False,
    tail: Tail | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ImportSummary:
    """Import verl console logs (``-`` reads stdin) into ``run_dir``; see the module docstring.

    Several logs are read in order as one stream (a restarted run often starts a new file).
    With ``tail.follow`` the last one is followed as it grows until ``tail`` says stop or
    Ctrl-C. ``strict`` stops at the first metric line that cannot be read.
    """
    paths, tail, sink = open_text_import(sources, run_dir, "verl-log", strict=strict, tail=tail, meta=meta)

    def body() -> None:
        parser = _Parser(sink)
        try:
            for path, name, follow in each_source(paths, tail):
                # a followed pipe: lines arrive as they are logged (a file on stdin: from its end on)
                live = follow and path == "-" and not stdin_is_file()
                for item in source_lines(sink, path, name, tail, follow=follow):
                    if item is IDLE:
                        live = True
                        parser.idle()
                        continue
                    lineno, line, cut = item
                    parser.feed(f"{name}:{lineno}", line, time.time() if live else None, cut=cut)
                parser.end_of_source()
        except KeyboardInterrupt:  # a followed log stopped: what was read is the input's end
            parser.finish()
            raise
        parser.finish()

    return run_import(sink, tail, body)
