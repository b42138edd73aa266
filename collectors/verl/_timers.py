"""``marked_timer``: the start and end of every phase the trainer times (gen, reward, old_log_prob, ...).

verl's trainers wrap each stage in ``with marked_timer(name, timing_raw):`` and keep only
the summed seconds (``timing_s/<name>``). The wrapper keeps the wall-clock start and end
as well; the step is not known inside the timer, so the span waits in the hook for the
trainer's next ``Tracking.log``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from rlscope.collectors.verl._hook import Hook

__all__ = ["wrap_marked_timer"]


class _Phase:
    """Enters and exits verl's own context manager; on a clean exit, hands the span to the hook."""

    __slots__ = ("_cm", "_hook", "_name", "_start")

    def __init__(self, hook: Hook, cm: Any, name: Any):
        self._hook, self._cm, self._name = hook, cm, name
        self._start = 0.0

    def __enter__(self) -> Any:
        self._start = time.time()
        return self._cm.__enter__()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        suppress = self._cm.__exit__(exc_type, exc, tb)
        if exc_type is None:  # verl adds to timing_raw only on a clean exit; so does the span
            try:
                self._hook.add_span(self._name, self._start, time.time())
            except Exception as err:  # noqa: BLE001 - never harm training
                self._hook.fault("spans", err)
        return suppress


def wrap_marked_timer(hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def marked_timer(*args: Any, **kwargs: Any) -> Any:
        return _Phase(hook, original(*args, **kwargs), args[0] if args else kwargs.get("name"))

    return marked_timer
