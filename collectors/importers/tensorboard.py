"""Import the TensorBoard event files of a verl run (``trainer.logger=['tensorboard']``).

verl's ``_TensorboardAdapter`` (``verl/utils/tracking.py``) calls ``add_scalar(key, value,
step)`` for every metric, into ``$TENSORBOARD_DIR`` (default
``tensorboard_log/<project>/<experiment>``); a restarted run adds a new event file there.
Scalars are read whether written as ``simple_value`` or as a scalar tensor; histograms,
images and text are skipped and counted. Consecutive events of one step form one record,
stamped with the first event's wall time.

Reading event files needs the ``tensorboard`` package (an optional dependency, imported
only here); it reads them without TensorFlow, one record at a time.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from rlscope.collectors.importers._common import run_import
from rlscope.collectors.importers._sink import ImportSummary, StepSink
from rlscope.collectors.importers._source import ImportInputError, Tail

__all__ = ["import_tensorboard"]

_EVENT_FILE = re.compile(r"events\.out\.tfevents\.(\d+)")


def _tensorboard() -> tuple[Any, Any, Any]:
    try:
        from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
        from tensorboard.compat.proto import event_pb2
        from tensorboard.util import tensor_util
    except ImportError:
        raise ImportInputError(
            "reading TensorBoard event files needs the tensorboard package: pip install tensorboard"
        ) from None
    return RawEventFileLoader, event_pb2, tensor_util


def _event_files(source: str) -> list[str]:
    """The event files of one run: ``source`` itself, or those under the directory ``source``."""
    if not os.path.exists(source):
        raise ImportInputError(f"{source}: no such file or directory")
    if os.path.isfile(source):
        if not _EVENT_FILE.search(os.path.basename(source)):
            raise ImportInputError(f"{source}: not a TensorBoard event file (events.out.tfevents.*)")
        return [source]
    found = [
        os.path.join(folder, name) for folder, _, names in os.walk(source) for name in names if _EVENT_FILE.match(name)
    ]
    folders = sorted({os.path.dirname(f) for f in found})
    if len(folders) > 1:
        shown = ", ".join(os.path.relpath(f, source) for f in folders[:3])
        raise ImportInputError(
            f"{source}: holds the event files of {len(folders)} runs ({shown}, ...); name one of them"
        )
    return sorted(found, key=_file_order)


def _file_order(path: str) -> tuple[int, str]:
    match = _EVENT_FILE.search(os.path.basename(path))
    return (int(match.group(1)) if match else 0, path)


class _Reader:
    """Groups consecutive scalar events of one step into one record for the sink."""

    def __init__(self, sink: StepSink, event_pb2: Any, tensor_util: Any):
        self.sink, self._event_pb2, self._tensor_util = sink, event_pb2, tensor_util
        self.step: int | None = None
        self.when: float | None = None
        self.where = ""  # the event file of the record's first event
        self.metrics: dict[str, float] = {}

    def event(self, where: str, record: bytes) -> None:
        self.sink.summary.lines += 1
        try:
            event = self._event_pb2.Event.FromString(record)
        except Exception as exc:  # noqa: BLE001 - protobuf raises its own DecodeError
            self.sink.skip("bad_event", where, str(exc))
            return
        if not event.HasField("summary"):
            return
        for value in event.summary.value:
            number = self._scalar(value)
            if number is None:
                self.sink.skip("non_scalar", where, value.tag, bad=False)
                continue
            if event.step != self.step or value.tag in self.metrics:
                self.flush()
                self.step, self.when, self.where = event.step, event.wall_time or None, where
            self.metrics[value.tag] = number

    def _scalar(self, value: Any) -> float | None:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            return float(value.simple_value)
        if kind != "tensor":
            return None
        try:
            array = self._tensor_util.make_ndarray(value.tensor)
        except Exception:  # noqa: BLE001 - a tensor this TensorBoard cannot decode
            return None
        if array.size != 1 or array.dtype.kind not in "biuf":
            return None
        return float(array.reshape(()))

    def flush(self) -> None:
        if self.metrics and self.step is not None:
            self.sink.add(self.step, self.metrics, when=self.when, where=self.where)
        self.metrics = {}


def import_tensorboard(
    sources: Sequence[str | os.PathLike[str]],
    run_dir: str | os.PathLike[str],
    *,
    strict: bool = False,
    tail: Tail | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ImportSummary:
    """Import the scalars of one run's event files (a directory, or event files) into ``run_dir``.

    With ``tail.follow`` the files keep being read as they grow, and new event files in
    the directory (a restart) are picked up, until ``tail`` says stop or Ctrl-C.
    """
    loader_cls, event_pb2, tensor_util = _tensorboard()
    names = [os.fspath(s) for s in sources]
    files = sorted({f for name in names for f in _event_files(name)}, key=_file_order)
    if not files and not (tail and tail.follow):
        raise ImportInputError(f"{', '.join(names)}: no TensorBoard event files (events.out.tfevents.*)")
    tail = tail or Tail()
    sink = StepSink(run_dir, importer="tensorboard", sources=names, strict=strict, meta=meta)

    def body() -> None:
        reader = _Reader(sink, event_pb2, tensor_util)
        loaders: dict[str, Any] = {}
        draining = False
        while True:
            for path in files:
                loader = loaders.setdefault(path, loader_cls(path))
                for record in loader.Load():
                    reader.event(path, record)
            reader.flush()
            if not tail.follow or draining:
                break
            sink.maybe_flush()
            draining = not tail.wait()  # once told to stop, read what is there one last time
            known = set(files)
            files.extend(
                sorted(
                    (f for n in names if os.path.isdir(n) for f in _event_files(n) if f not in known), key=_file_order
                )
            )

    return run_import(sink, tail, body)
