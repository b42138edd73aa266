"""The run directory: schemas, the segment store, the reader, the Recorder and the simulator."""

from rlscope.trace.reader import Cursor, RunReader
from rlscope.trace.recorder import Recorder
from rlscope.trace.schema import SCHEMA_VERSION, TABLES
from rlscope.trace.store import read_meta, write_meta, write_segment

__all__ = ["SCHEMA_VERSION", "TABLES", "Cursor", "Recorder", "RunReader", "read_meta", "write_meta", "write_segment"]
