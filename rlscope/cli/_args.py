"""Shared argparse helpers: a parser whose usage errors are one line and exit code 2."""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Callable
from typing import Any, NoReturn

from rlscope.errors import UsageError

_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of printing usage and calling ``sys.exit``.

    A value that reads as a negative number, exponent included (``--active-params -7e9``), is a
    value, so the option's own check can say what is wrong with it; argparse alone takes
    ``-7e9`` for an option and says "expected one argument"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog.removeprefix('rlscope ')}: {message}")  # printed after "rlscope: "


def parser_for(command: str, doc: str | None) -> ArgumentParser:
    """A parser for ``rlscope COMMAND`` whose help is the command module's docstring."""
    return ArgumentParser(
        prog=f"rlscope {command}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def json_object(text: str) -> dict[str, Any]:
    """An argparse type: a JSON object (``--meta '{"gpu": {"count": 8}}'``)."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object")
    return value


def seconds(*, zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds above 0 (from 0 with ``zero``); NaN refused."""
    bound = "0 or more" if zero else "above 0"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
        if not (math.isfinite(value) and (value >= 0 if zero else value > 0)):
            raise argparse.ArgumentTypeError(f"expected a finite number of seconds {bound}, got {text}")
        return value

    return parse


def check_port(port: int) -> None:
    """A TCP port to listen on (0: the system picks one), else a usage error."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0-65535, got {port}")
