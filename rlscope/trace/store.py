"""Writing the run directory: ``meta.json`` and Parquet segments that appear atomically.

A segment is written under a hidden temporary name in its table folder and renamed into
place, so a reader never sees half a file and a killed writer loses only what it had not
yet renamed. Segment names sort by creation time and carry a writer id, so several
writers (one per host, say) can share a run directory without coordinating.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from rlscope.errors import MetaError, MetaMalformedError, RunDirError
from rlscope.trace.schema import SCHEMA_VERSION, TABLES

__all__ = [
    "RunLocation",
    "check_can_write",
    "conform",
    "is_segment_name",
    "locate",
    "merge_meta",
    "meta_to_extend",
    "new_writer_id",
    "read_meta",
    "require_directory",
    "segment_name",
    "segment_written_ns",
    "tmp_path_for",
    "unwritable_reason",
    "write_atomic_bytes",
    "write_meta",
    "write_segment",
]

META_FILE = "meta.json"
_SEGMENT_PREFIX = "part-"
_SEGMENT_SUFFIX = ".parquet"


@dataclass(frozen=True)
class RunLocation:
    """A run directory on some pyarrow filesystem (local unless a URI said otherwise)."""

    fs: pafs.FileSystem
    path: str

    @property
    def is_local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def join(self, *parts: str) -> str:
        return "/".join([self.path.rstrip("/"), *parts])

    def __str__(self) -> str:
        return self.path


def locate(run_dir: str | os.PathLike[str] | RunLocation) -> RunLocation:
    """Resolve a local path or a pyarrow filesystem URI (``file://``, ``s3://``, ...)."""
    if isinstance(run_dir, RunLocation):
        return run_dir
    text = os.fspath(run_dir)
    if "://" in text:
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise RunDirError(f"{text}: cannot open this filesystem URI ({exc})") from None
        return RunLocation(fs, path.rstrip("/") or "/")
    return RunLocation(pafs.LocalFileSystem(), os.path.abspath(text))


def require_directory(run_dir: str | os.PathLike[str] | RunLocation) -> RunLocation:
    """The run directory's location; ``RunDirError`` if it is missing, unreachable or a file."""
    loc = locate(run_dir)
    try:
        info = loc.fs.get_file_info(loc.path)
    except OSError as exc:
        raise RunDirError(f"{loc.path}: cannot access ({exc})") from None
    if info.type == pafs.FileType.NotFound:
        raise RunDirError(f"{loc.path}: no such run directory")
    if info.type != pafs.FileType.Directory:
        raise RunDirError(f"{loc.path}: is a file, expected a run directory{_file_hint(loc.path)}")
    return loc


def _file_hint(path: str) -> str:
    """What to give instead of the file ``path``: its run directory for a ``meta.json``, else
    the two ways a verl log is read (a file given here is most often one)."""
    if os.path.basename(path) == META_FILE:
        return f": give the directory {os.path.dirname(path)}"
    return (
        "; a verl log? rlscope diagnose FILE reads one directly, rlscope import verl-log FILE "
        "--out RUN_DIR makes a run directory of it (verl-jsonl for a JSONL metrics file)"
    )


def new_writer_id() -> str:
    """A short id unique to one writer process, used in its segment names."""
    host = "".join(c for c in socket.gethostname() if c.isalnum())[:12] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def is_segment_name(name: str) -> bool:
    return name.startswith(_SEGMENT_PREFIX) and name.endswith(_SEGMENT_SUFFIX)


def segment_name(writer_id: str, seq: int) -> str:
    """``part-<ns timestamp>-<seq>-<writer>.parquet``: sorts by creation time across writers."""
    return f"{_SEGMENT_PREFIX}{time.time_ns():020d}-{seq:06d}-{writer_id}{_SEGMENT_SUFFIX}"


def segment_written_ns(name: str) -> int:
    """When a segment was written, from its name (:func:`segment_name`); unknown: never before."""
    try:
        return int(name.split("-")[1])
    except (IndexError, ValueError):
        return 2**63


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Reorder and cast ``table`` to ``schema``; columns it lacks become nulls, extras are dropped."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            col = table.column(field.name)
            if col.type != field.type:
                col = col.cast(field.type)
            columns.append(col)
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def write_atomic_bytes(loc: RunLocation, dest: str, data: bytes) -> None:
    """Write ``data`` to a temporary name beside ``dest`` and rename it into place; a write
    that fails (a full disk) removes its partial temporary file, so failures do not fill the
    disk further."""
    tmp = tmp_path_for(dest)
    try:
        if loc.is_local:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, dest)
        else:
            with loc.fs.open_output_stream(tmp) as out:
                out.write(data)
            loc.fs.move(tmp, dest)
    except BaseException:
        with contextlib.suppress(Exception):
            if loc.is_local:
                os.unlink(tmp)
            else:
                loc.fs.delete_file(tmp)
        raise


def tmp_path_for(dest: str) -> str:
    head, _, name = dest.rpartition("/")
    return f"{head}/.{name}.{uuid.uuid4().hex[:8]}.tmp"


def write_segment(
    run_dir: str | os.PathLike[str] | RunLocation,
    table_name: str,
    table: pa.Table,
    *,
    writer_id: str,
    seq: int,
) -> str:
    """Write ``table`` as one new segment of ``table_name``; return the segment's path."""
    loc = locate(run_dir)
    schema = TABLES[table_name]
    data = conform(table, schema)
    folder = loc.join(table_name)
    loc.fs.create_dir(folder, recursive=True)
    dest = f"{folder}/{segment_name(writer_id, seq)}"
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink, compression="zstd")
    write_atomic_bytes(loc, dest, sink.getvalue().to_pybytes())
    return dest


def merge_meta(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``over``, nested objects key by key: a config that states
    ``{"gpu": {"count": 8}}`` keeps the ``gpu.type`` a user wrote into meta.json."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        out[key] = merge_meta(old, value) if isinstance(old, Mapping) and isinstance(value, Mapping) else value
    return out


def write_meta(run_dir: str | os.PathLike[str] | RunLocation, meta: Mapping[str, Any]) -> None:
    """Write ``meta.json`` atomically, adding ``schema_version`` and ``created`` if absent."""
    loc = locate(run_dir)
    loc.fs.create_dir(loc.path, recursive=True)
    doc = {"schema_version": SCHEMA_VERSION, "created": time.time(), **dict(meta)}
    text = json.dumps(doc, indent=2, sort_keys=True, default=_json_default, allow_nan=False)
    write_atomic_bytes(loc, loc.join(META_FILE), (text + "\n").encode())


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    return str(obj)


def check_can_write(loc: RunLocation) -> None:
    """``RunDirError`` unless a local ``loc`` is, or can be made, a directory this process may
    write (a one-line error before any work, not a traceback after it); remote ones are not checked."""
    if not isinstance(loc.fs, pafs.LocalFileSystem):
        return
    existing = loc.path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        what = (
            "is a file, expected a run directory" if existing == loc.path else f"cannot create it, {existing} is a file"
        )
        raise RunDirError(f"{loc.path}: {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunDirError(f"{loc.path}: cannot write there, {existing} is not writable ({unwritable_reason(existing)})")


def unwritable_reason(path: str) -> str:
    """Why a local ``path`` that ``os.access`` refuses cannot be written: a read-only mount is
    no matter of permissions (root gets it too), and saying so points at the mount, not chmod."""
    try:
        read_only = bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (AttributeError, OSError):  # no statvfs (Windows), or the path went away
        read_only = False
    return "read-only file system" if read_only else "permission denied"


def read_meta(run_dir: str | os.PathLike[str] | RunLocation) -> dict[str, Any]:
    """Read and check ``meta.json``; raise ``MetaError`` with a one-line reason if it is bad."""
    return _load_meta(locate(run_dir), hand_written=False)


def meta_to_extend(run_dir: str | os.PathLike[str] | RunLocation) -> dict[str, Any]:
    """``meta.json`` as a writer about to merge into it reads it: ``{}`` when there is none, a
    JSON object written by hand (without ``schema_version``) as it is. ``MetaError`` for one
    that a merge would lose (not JSON, not an object, a newer schema): never overwrite that."""
    loc = locate(run_dir)
    if loc.fs.get_file_info(loc.join(META_FILE)).type == pafs.FileType.NotFound:
        return {}
    return _load_meta(loc, hand_written=True)


def _load_meta(loc: RunLocation, *, hand_written: bool) -> dict[str, Any]:
    path = loc.join(META_FILE)
    info = loc.fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise MetaError(f"{path}: missing (is {loc.path} an rlscope run directory?)")
    if info.type != pafs.FileType.File:
        raise MetaError(f"{path}: is not a file")
    try:
        with loc.fs.open_input_stream(path) as fh:
            doc = json.loads(fh.read().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MetaMalformedError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise MetaError(f"{path}: cannot read ({exc})") from None
    if not isinstance(doc, dict):
        raise MetaMalformedError(f"{path}: expected a JSON object, found {type(doc).__name__}")
    version = doc.get("schema_version")
    if version is None and hand_written:
        return doc
    if version is None:
        raise MetaError(f"{path}: schema_version is missing or not an integer")
    if isinstance(version, float) and version.is_integer():  # 1.0, as some JSON writers put it
        version = int(version)
    if not isinstance(version, int) or isinstance(version, bool):
        raise MetaMalformedError(f"{path}: schema_version {version!r} is not a whole number")
    if version > SCHEMA_VERSION:
        raise MetaError(
            f"{path}: schema_version {version} is newer than this rlscope reads ({SCHEMA_VERSION}); upgrade rlscope"
        )
    return doc
