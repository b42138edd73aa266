"""The run directory: schemas, the segment store, the reader, the Recorder and the simulator.

Names are imported from their modules when first asked for: a command that reads a run
(``rlscope.trace.reader``) starts reading before the Recorder's imports (pyarrow.compute, 0.07 s).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlscope.trace.reader import Cursor, RunReader
    from rlscope.trace.recorder import Recorder
    from rlscope.trace.schema import SCHEMA_VERSION, TABLES
    from rlscope.trace.store import read_meta, write_meta, write_segment

_HOMES = {
    "Cursor": "reader",
    "RunReader": "reader",
    "Recorder": "recorder",
    "SCHEMA_VERSION": "schema",
    "TABLES": "schema",
    "read_meta": "store",
    "write_meta": "store",
    "write_segment": "store",
}

__all__ = ["SCHEMA_VERSION", "TABLES", "Cursor", "Recorder", "RunReader", "read_meta", "write_meta", "write_segment"]


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"rlscope.trace.{_HOMES[name]}"), name)
    try:  # a submodule (rlscope.trace.store), as the package's eager imports once made it
        return importlib.import_module(f"rlscope.trace.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"rlscope.trace.{name}":
            raise
    raise AttributeError(f"module 'rlscope.trace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
