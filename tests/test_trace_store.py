"""The run-directory store and reader: atomic segments, incremental reads, compaction, bad input."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rlscope.cli import main
from rlscope.errors import MetaError, RunDirError
from rlscope.trace.compact import compact_run
from rlscope.trace.reader import Cursor, RunReader
from rlscope.trace.schema import STEPS, TABLES
from rlscope.trace.store import read_meta, write_meta, write_segment


def _steps(step_values: list[int], key: str = "timing_s/gen") -> pa.Table:
    n = len(step_values)
    return pa.table({"step": step_values, "key": [key] * n, "value": [float(s) for s in step_values]})


def _run(tmp_path, segments: list[list[int]]) -> str:
    run = str(tmp_path / "run")
    write_meta(run, {"framework": "test"})
    for seq, steps in enumerate(segments):
        write_segment(run, "steps", _steps(steps), writer_id="w", seq=seq)
    return run


def test_segments_conform_to_schema_and_read_selected_columns(tmp_path):
    run = _run(tmp_path, [[0, 1], [2]])
    reader = RunReader(run)
    table = reader.read("steps")
    assert table.schema == STEPS
    assert sorted(table.column("step").to_pylist()) == [0, 1, 2]
    assert table.column("attempt").null_count == 3  # absent in the input: nulls, not an error
    only = reader.read("steps", ["step"])
    assert only.column_names == ["step"]
    assert reader.read("gpu").num_rows == 0  # a table nobody wrote reads as empty


def test_no_temporary_files_are_left_and_names_sort_by_creation(tmp_path):
    run = _run(tmp_path, [[0], [1], [2]])
    names = sorted(os.listdir(os.path.join(run, "steps")))
    assert len(names) == 3 and all(n.startswith("part-") and n.endswith(".parquet") for n in names)
    reader = RunReader(run)
    firsts = [pq.read_table(s.path).column("step")[0].as_py() for s in reader.segments("steps")]
    assert firsts == [0, 1, 2]


def test_incremental_read_returns_only_new_segments(tmp_path):
    run = _run(tmp_path, [[0, 1]])
    reader = RunReader(run)
    cursor = Cursor()
    assert reader.read_new("steps", cursor).column("step").to_pylist() == [0, 1]
    assert reader.read_new("steps", cursor).num_rows == 0
    write_segment(run, "steps", _steps([2, 3]), writer_id="w", seq=9)
    assert reader.read_new("steps", cursor, ["step"]).column("step").to_pylist() == [2, 3]
    assert reader.read_new("steps", cursor).num_rows == 0


def test_compaction_keeps_every_row_once_even_for_a_live_reader(tmp_path):
    run = _run(tmp_path, [[0], [1], [2], [3]])
    reader = RunReader(run)
    cursor = Cursor()
    assert reader.read_new("steps", cursor).num_rows == 4
    write_segment(run, "steps", _steps([4]), writer_id="w", seq=10)  # not yet seen by the cursor
    results = {r.table: r for r in compact_run(run)}
    assert (results["steps"].segments_before, results["steps"].segments_after, results["steps"].rows) == (5, 1, 5)
    assert len(os.listdir(os.path.join(run, "steps"))) == 1
    # the live reader gets exactly the one row it had not seen, not the merged copies
    assert reader.read_new("steps", cursor).column("step").to_pylist() == [4]
    fresh = RunReader(run)
    assert sorted(fresh.read("steps").column("step").to_pylist()) == [0, 1, 2, 3, 4]
    # compacting a compacted table changes nothing
    assert {r.table: r.segments_after for r in compact_run(run)}["steps"] == 1
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2, 3, 4]


def test_a_compaction_that_fills_the_disk_leaves_no_temporary_file_and_says_so(tmp_path, capsys, monkeypatch):
    import rlscope.trace.compact as compact_module

    run = _run(tmp_path, [[0], [1], [2]])
    before = sorted(os.listdir(os.path.join(run, "steps")))
    read_whole = compact_module._read_whole
    calls = []

    def then_full(*args):
        calls.append(1)
        if len(calls) == 2:  # the merged file half written
            raise OSError(28, "No space left on device")
        return read_whole(*args)

    monkeypatch.setattr(compact_module, "_read_whole", then_full)
    assert main(["compact", run]) == 1
    # the OS names no file for a full disk: the message names the table being merged
    said = f"rlscope: {os.path.join(run, 'steps')}: cannot write the merged segment (No space left on device); "
    assert capsys.readouterr().err == said + "the table is left as it was\n"
    assert sorted(os.listdir(os.path.join(run, "steps"))) == before  # the originals, and nothing else
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2]


def test_an_os_error_naming_a_file_is_said_with_it(tmp_path, capsys, monkeypatch):
    import rlscope.cli.compact as compact_cli

    segment = str(tmp_path / "run" / "steps" / "part-1.parquet")

    def refused(_run_dir):
        raise PermissionError(13, "Permission denied", segment)

    monkeypatch.setattr(compact_cli, "compact_run", refused)
    assert main(["compact", str(tmp_path / "run")]) == 1
    assert capsys.readouterr().err == f"rlscope: {segment}: Permission denied\n"


def test_crash_between_compaction_rename_and_delete_counts_no_row_twice(tmp_path):
    run = _run(tmp_path, [[0], [1], [2]])
    folder = os.path.join(run, "steps")
    originals = {n: open(os.path.join(folder, n), "rb").read() for n in sorted(os.listdir(folder))}
    compact_run(run)
    # the state a crash after the rename and the first delete leaves: merged copy + two originals
    for name in list(originals)[1:]:
        with open(os.path.join(folder, name), "wb") as fh:
            fh.write(originals[name])
    assert len(os.listdir(folder)) == 3
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2]
    compact_run(run)  # the next compaction removes the leftovers
    assert len(os.listdir(folder)) == 1
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2]


def test_filesystem_uri_reads_like_a_path(tmp_path):
    run = _run(tmp_path, [[0, 1, 2]])
    reader = RunReader("file://" + run)
    assert reader.read("steps", ["step"]).num_rows == 3
    assert reader.meta["framework"] == "test"
    write_segment("file://" + run, "steps", _steps([3]), writer_id="u", seq=1)
    assert RunReader(run).row_count("steps") == 4


def test_truncated_and_corrupt_segments_are_skipped_with_a_warning_naming_the_file(tmp_path, caplog):
    run = _run(tmp_path, [[0], [1]])
    folder = os.path.join(run, "steps")
    victim = sorted(os.listdir(folder))[0]
    data = open(os.path.join(folder, victim), "rb").read()
    with open(os.path.join(folder, victim), "wb") as fh:
        fh.write(data[: len(data) // 2])
    with open(os.path.join(folder, "part-99999999999999999999-000000-x.parquet"), "wb") as fh:
        fh.write(b"this is not parquet at all")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        reader = RunReader(run)
        assert reader.read("steps").column("step").to_pylist() == [1]
    assert len(reader.warnings) == 2
    assert any(victim in w for w in reader.warnings)
    assert all("\n" not in w and "unreadable segment skipped" in w for w in reader.warnings)
    assert any(victim in r.getMessage() for r in caplog.records)


def test_a_column_of_the_wrong_type_skips_that_segment(tmp_path):
    run = _run(tmp_path, [[0]])
    bad = pa.table({"step": ["three"], "key": ["k"], "value": [1.0]})
    pq.write_table(bad, os.path.join(run, "steps", "part-99999999999999999999-000001-bad.parquet"))
    reader = RunReader(run)
    assert reader.read("steps").column("step").to_pylist() == [0]
    assert reader.warnings == [
        f"{run}/steps/part-99999999999999999999-000001-bad.parquet: segment skipped, "
        "column 'step' has type string, expected int64"
    ]


def test_narrower_compatible_types_are_widened(tmp_path):
    run = _run(tmp_path, [[0]])
    narrow = pa.table({"step": pa.array([5], pa.int32()), "key": ["k"], "value": pa.array([1.5], pa.float32())})
    pq.write_table(narrow, os.path.join(run, "steps", "part-99999999999999999999-000001-n.parquet"))
    table = RunReader(run).read("steps")
    assert sorted(table.column("step").to_pylist()) == [0, 5]
    assert table.schema.field("step").type == pa.int64()


@pytest.mark.parametrize(
    ("setup", "error", "fragment"),
    [
        ("missing", RunDirError, "no such run directory"),
        ("file", RunDirError, "is a file, expected a run directory"),
        ("empty", RunDirError, "empty directory"),
        ("no-meta", MetaError, "meta.json: missing"),
        ("bad-json", MetaError, "meta.json: not valid JSON"),
        ("json-list", MetaError, "expected a JSON object"),
        ("no-version", MetaError, "schema_version is missing"),
        ("future", MetaError, "newer than this rlscope reads"),
    ],
)
def test_bad_run_directories_give_one_line_errors(tmp_path, capsys, setup, error, fragment):
    run = tmp_path / "run"
    if setup == "file":
        run.write_text("x")
    elif setup != "missing":
        run.mkdir()
    if setup not in ("missing", "file", "empty"):
        write_segment(str(run), "steps", _steps([0]), writer_id="w", seq=0)
    meta = {
        "bad-json": "{not json",
        "json-list": "[1, 2]",
        "no-version": json.dumps({"framework": "x"}),
        "future": json.dumps({"schema_version": 999}),
    }
    if setup in meta:
        (run / "meta.json").write_text(meta[setup])
    with pytest.raises(error, match=fragment):
        RunReader(str(run))
    assert main(["info", str(run)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlscope: ") and fragment in err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["info", "export", "compact", "dashboard"])
def test_a_log_file_given_for_a_run_directory_says_how_to_read_it(tmp_path, capsys, command):
    log_file = tmp_path / "train.log"
    log_file.write_text("step:1 - timing_s/step:2.0\n")
    assert main([command, str(log_file)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, expected a run directory" in err
    assert "rlscope diagnose FILE" in err and "rlscope import verl-log FILE --out RUN_DIR" in err


def test_a_meta_json_given_for_a_run_directory_names_the_directory(tmp_path, capsys):
    run = _run(tmp_path, [[0]])
    assert main(["info", os.path.join(run, "meta.json")]) == 1
    assert (
        capsys.readouterr().err
        == f"rlscope: {run}/meta.json: is a file, expected a run directory: give the directory {run}\n"
    )


def test_a_file_where_a_table_folder_should_be_is_a_warning(tmp_path):
    run = _run(tmp_path, [[0]])
    with open(os.path.join(run, "gpu"), "w") as fh:
        fh.write("oops")
    reader = RunReader(run)
    assert reader.read("gpu").num_rows == 0
    assert reader.read("steps").num_rows == 1
    assert reader.warnings == [f"{run}/gpu: is a file, expected a folder of segments; table gpu skipped"]


def test_a_table_folder_that_links_to_nothing_is_a_warning(tmp_path):
    run = _run(tmp_path, [[0]])
    os.symlink(tmp_path / "unmounted", os.path.join(run, "gpu"))  # storage that is not mounted
    reader = RunReader(run)
    assert reader.read("gpu").num_rows == 0 and reader.read("gpu").num_rows == 0
    message = f"{run}/gpu: a link to {tmp_path / 'unmounted'}, which does not exist; table gpu skipped"
    assert reader.warnings == [message]  # once


def test_unknown_table_or_column_is_a_clear_error(tmp_path):
    reader = RunReader(_run(tmp_path, [[0]]))
    with pytest.raises(RunDirError, match="unknown table 'stepz'"):
        reader.read("stepz")
    with pytest.raises(RunDirError, match="has no column 'nope'"):
        reader.read("steps", ["step", "nope"])


def test_info_reports_tables_rows_and_steps(tmp_path, capsys):
    run = _run(tmp_path, [[0, 1], [2, 2]])
    assert main(["info", run, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    steps = summary["tables"]["steps"]
    assert (steps["segments"], steps["rows"], steps["steps"], steps["first_step"], steps["last_step"]) == (
        2,
        4,
        3,
        0,
        2,
    )
    assert set(summary["tables"]) == {"steps"}
    assert main(["info", run]) == 0
    out = capsys.readouterr().out
    assert "steps" in out and "0..2" in out


def test_info_shows_what_meta_json_says_and_what_it_lacks(tmp_path, capsys):
    run = _run(tmp_path, [[0, 1]])
    meta = read_meta(run)
    meta.update(
        gpu={"count": 8}, model={"name": "Qwen/Qwen2.5-7B", "active_params": 7.62e9}, batch_size=64, group_size=4
    )
    write_meta(run, meta)
    assert main(["info", run]) == 0
    out = capsys.readouterr().out
    assert "Qwen/Qwen2.5-7B, 7.62B active parameters" in out
    assert "8 (type not stated: diagnose --gpu-type)" in out and "64 prompts x 4 samples a step" in out


def test_info_names_a_topology_given_as_an_object(tmp_path, capsys):
    """docs/run-directory.md reads a topology object's kind: info names it, as diagnose does."""
    run = _run(tmp_path, [[0, 1]])
    meta = read_meta(run)
    meta.update(gpu={"count": 64}, topology={"kind": "separated", "rollout_gpus": 46, "train_gpus": 18})
    write_meta(run, meta)
    assert main(["info", run]) == 0
    assert "separated, split 46:18 (rollout:train GPUs)" in capsys.readouterr().out


def test_info_shows_strings_from_meta_json_as_text(tmp_path, capsys):
    run = _run(tmp_path / "[bold]x[/bold]", [[0, 1]])
    meta = read_meta(run)
    meta.update(framework="verl\x1b]0;pwned\x07", model={"name": "qwen\x1b[2J"}, scenario="[red]s[/red]")
    write_meta(run, meta)
    assert main(["info", run]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out  # a title escape and a screen clear, written out
    assert r"verl\x1b]0;pwned\x07" in out and r"qwen\x1b[2J" in out and "[red]s[/red]" in out
    assert "[bold]x[/bold]" in out  # a path is not markup


def test_info_json_is_valid_json_and_lists_ignored_values(tmp_path, capsys):
    run = _run(tmp_path, [[0, 1]])
    with open(os.path.join(run, "meta.json")) as fh:
        meta = json.load(fh)
    meta["model"] = {"active_params": float("nan")}
    with open(os.path.join(run, "meta.json"), "w") as fh:
        json.dump(meta, fh)  # Python writes NaN, which strict JSON readers refuse
    assert main(["info", run, "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert summary["meta"]["model"]["active_params"] is None
    assert summary["ignored"] == ["model.active_params is nan, not a positive number"]


def test_every_table_has_a_non_nullable_first_column():
    for name, schema in TABLES.items():
        assert not schema.field(0).nullable, name


def test_listing_is_reused_until_the_folder_changes(tmp_path):
    run = _run(tmp_path, [[0], [1]])
    folder = os.path.join(run, "steps")
    old = os.stat(folder).st_mtime_ns - 10**10
    os.utime(folder, ns=(old, old))  # settled: written 10 s ago
    reader = RunReader(run)
    first = reader.segments("steps")
    assert reader._listings["steps"] == (old, first)
    assert reader.segments("steps") is first  # nothing changed: the cached listing, no walk
    write_segment(run, "steps", _steps([2]), writer_id="w", seq=7)  # the rename changes the mtime
    assert sorted(reader.read("steps").column("step").to_pylist()) == [0, 1, 2]
    compact_run(run)  # deletes change it too
    assert RunReader(run).row_count("steps") == reader.row_count("steps") == 3
    assert len(reader.segments("steps")) == 1


def _damage_data(run: str, n: int) -> list[str]:
    """Overwrite the data of the first ``n`` steps segments (5,000 rows or more: the data lies
    well before the footer, which still reads); their names."""
    names = sorted(p for p in os.listdir(os.path.join(run, "steps")) if p.endswith(".parquet"))[:n]
    for name in names:
        path = os.path.join(run, "steps", name)
        with open(path, "rb") as fh:
            data = bytearray(fh.read())
        data[4 : len(data) // 3] = b"A" * (len(data) // 3 - 4)
        with open(path, "wb") as fh:
            fh.write(data)
    return names


def test_a_segment_whose_data_is_corrupt_is_skipped_with_one_warning(tmp_path, caplog):
    run = _run(tmp_path, [list(range(5000)), [5000, 5001]])
    (first,) = _damage_data(run, 1)
    reader = RunReader(run)
    assert reader.row_count("steps") == 5002  # the footer says so
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        for _ in range(2):
            assert sorted(reader.read("steps").column("step").to_pylist()) == [5000, 5001]
    assert caplog.text.count("unreadable data") == 1 and first in caplog.text


def test_compaction_leaves_a_table_with_a_segment_that_does_not_read_as_it_is(tmp_path, caplog):
    from damage import damage_column

    run = _run(tmp_path, [[0], [1], [2], [3]])
    folder = tmp_path / "run" / "steps"
    before = sorted(folder.glob("*.parquet"))
    damaged = before[1]
    damage_column(damaged, "value")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        (steps, *_) = compact_run(run)
    # all or nothing: a merge of some inputs could overlap a concurrent merge of others
    assert (steps.segments_before, steps.segments_after) == (4, 4) and sorted(folder.glob("*.parquet")) == before
    assert f"{damaged}: unreadable data" in caplog.text and "table steps left as it is" in caplog.text
    assert not list(folder.glob(".*.tmp"))
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 2, 3]  # its values do not read


def test_a_copy_is_deleted_only_when_what_holds_its_rows_reads(tmp_path):
    from damage import damage_column

    run = _run(tmp_path, [[0], [1], [2]])
    folder = tmp_path / "run" / "steps"
    originals = {p.name: p.read_bytes() for p in folder.glob("*.parquet")}
    compact_run(run)
    (merged,) = folder.glob("*.parquet")
    for name, data in originals.items():  # a crash between the rename and the deletes
        (folder / name).write_bytes(data)
    damage_column(merged, "value")  # and the merged copy does not read
    compact_run(run)
    assert {p.name for p in folder.glob("*.parquet")} == {merged.name, *originals}  # nothing deleted
    merged.unlink()  # moved out: the originals are the run again
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2]


def test_two_compactions_of_the_same_segments_count_each_row_once(tmp_path):
    # what two `rlscope compact` at once leave: two merged segments of the same three inputs
    run = _run(tmp_path, [[0], [1], [2]])
    twin = str(tmp_path / "twin")
    shutil.copytree(run, twin)
    compact_run(run)
    compact_run(twin)
    (merged,) = os.listdir(os.path.join(twin, "steps"))
    shutil.copy(os.path.join(twin, "steps", merged), os.path.join(run, "steps", merged.replace("compact", "compacu")))
    assert len(os.listdir(os.path.join(run, "steps"))) == 2
    assert RunReader(run).row_count("steps") == 3
    assert sorted(RunReader(run).read("steps").column("step").to_pylist()) == [0, 1, 2]
    stale = os.path.join(run, "steps", ".part-dead.parquet.1234abcd.tmp")  # a write that died long ago
    with open(stale, "wb") as fh:
        fh.write(b"half a segment")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    compact_run(run)  # deletes the copy and the dead temporary
    assert len(os.listdir(os.path.join(run, "steps"))) == 1
    assert RunReader(run).row_count("steps") == 3


@pytest.mark.parametrize("segments", [[[0, 1]], [[0, 1], [2, 3]]])
def test_an_error_that_is_not_the_data_s_is_raised_not_skipped(tmp_path, caplog, segments):
    run = _run(tmp_path, segments)
    with pytest.raises(pa.ArrowNotImplementedError):  # a filter of the wrong type: the caller's mistake
        RunReader(run).read("steps", ["step"], filter=pc.field("key") == 3)
    with pytest.raises(pa.ArrowInvalid), caplog.at_level(logging.WARNING, logger="rlscope"):
        RunReader(run).read("steps", ["step"], filter=pc.field("nope") == 1)  # no such column
    assert "unreadable" not in caplog.text  # no segment blamed for it


def test_a_read_that_fails_once_is_read_again_not_skipped(tmp_path, monkeypatch):
    from rlscope.trace.reader import Cursor

    run = _run(tmp_path, [[0, 1]])
    reader, cursor = RunReader(run), Cursor()
    reader.read_new("steps", cursor)
    write_segment(run, "steps", _steps([2]), writer_id="w", seq=5)
    original, calls = RunReader.dataset, []

    class Blip:  # the first read of the new segment meets a network blip
        def __init__(self, dataset):
            self.dataset = dataset

        def to_table(self, **kwargs):
            calls.append(1)
            if len(calls) == 1:
                raise OSError("Connection reset by peer")
            return self.dataset.to_table(**kwargs)

    monkeypatch.setattr(RunReader, "dataset", lambda self, *a, **k: Blip(original(self, *a, **k)))
    assert reader.read_new("steps", cursor).column("step").to_pylist() == [2]
    assert reader.warnings == [] and len(calls) == 2


def test_new_rows_after_a_segment_whose_data_is_corrupt_still_arrive(tmp_path):
    from rlscope.trace.reader import Cursor

    run = _run(tmp_path, [list(range(5000))])
    _damage_data(run, 1)
    reader, cursor = RunReader(run), Cursor()
    assert reader.read_new("steps", cursor).num_rows == 0  # skipped (and read again next time)
    write_segment(run, "steps", _steps([5000]), writer_id="w", seq=9)
    assert reader.read_new("steps", cursor).column("step").to_pylist() == [5000]


def test_segments_that_never_read_are_given_up_after_a_few_reads(tmp_path, monkeypatch):
    import rlscope.trace.reader as reader_module
    from rlscope.trace.reader import Cursor

    monkeypatch.setattr(reader_module, "_GIVE_UP_S", 0.0)
    run = _run(tmp_path, [list(range(5000)), list(range(5000, 10000)), [10000]])
    _damage_data(run, 2)  # two of three damaged for good
    reader, cursor = RunReader(run), Cursor()
    assert reader.read_new("steps", cursor).column("step").to_pylist() == [10000]
    for _ in range(2):  # read again, in case the store was at fault; never raised
        assert reader.read_new("steps", cursor).num_rows == 0
    assert len(cursor.seen_in("steps")) == 3  # the third failed read gave them up


def test_compact_refuses_a_directory_that_is_not_a_run(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a run")
    assert main(["compact", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err
        == f"rlscope: {tmp_path}: no meta.json and no table segments: not an rlscope run directory\n"
    )
    assert os.listdir(tmp_path) == ["notes.txt"]


def test_compact_of_a_run_with_no_segments_yet_says_so(tmp_path, capsys):
    # a run directory whose job has not written a row: not silence, which reads as "done"
    shutil.copy(
        os.path.join(os.path.dirname(__file__), "..", "sample_traces", "healthy-colocated", "meta.json"), tmp_path
    )
    assert main(["compact", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path}: no table segments yet: nothing to compact\n"


def _mixed_run(tmp_path) -> str:
    """Three steps segments: as written, with narrower types, and without the nullable ``attempt``."""
    run = _run(tmp_path, [[0, 1]])
    folder = os.path.join(run, "steps")
    narrow = pa.table({"step": pa.array([5], pa.int32()), "key": ["k"], "value": pa.array([1.5], pa.float32())})
    pq.write_table(narrow, os.path.join(folder, "part-99999999999999999998-000001-n.parquet"))
    with_attempt = pa.table({"step": [6], "attempt": pa.array([1], pa.int32()), "key": ["k"], "value": [2.0]})
    pq.write_table(with_attempt, os.path.join(folder, "part-99999999999999999999-000002-a.parquet"))
    return run


def _counting_reads(monkeypatch) -> list[tuple[str, list[str]]]:
    """("prefetch" or "read", columns) of each read of the data from here on."""
    reads: list[tuple[str, list[str]]] = []
    files, scan = RunReader._read_files, RunReader._scan
    monkeypatch.setattr(RunReader, "_read_files", lambda self, *a: reads.append(("prefetch", a[2])) or files(self, *a))
    monkeypatch.setattr(RunReader, "_scan", lambda self, *a, **k: reads.append(("read", a[2])) or scan(self, *a, **k))
    return reads


def test_a_prefetched_read_is_the_read_it_stands_for_and_is_taken_once(tmp_path, monkeypatch):
    run = _mixed_run(tmp_path)
    columns, encoded = ["step", "attempt", "key", "value"], ["key"]
    expected = RunReader(run).read("steps", columns, dictionary=encoded)
    assert expected.schema.field("key").type == pa.dictionary(pa.int32(), pa.string())
    reads = _counting_reads(monkeypatch)
    reader = RunReader(run)
    reader.prefetch("steps", columns, dictionary=encoded)
    assert reader.read("steps", ["step", "attempt"]).equals(expected.select(["step", "attempt"]))
    assert reader.read("steps", ["key", "value"], dictionary=encoded).equals(expected.select(["key", "value"]))
    assert reads == [("prefetch", columns)]  # both came from the one read begun by prefetch
    assert reader.read("steps", ["step"]).equals(expected.select(["step"]))  # taken already: read again
    assert reads == [("prefetch", columns), ("read", ["step"])]


def test_a_prefetch_is_not_taken_by_a_read_it_does_not_stand_for(tmp_path, monkeypatch):
    run = _mixed_run(tmp_path)
    reads = _counting_reads(monkeypatch)
    reader = RunReader(run)
    reader.prefetch("steps", ["step", "key"], dictionary=["key"])
    plain = reader.read("steps", ["key"])  # asked for as text, not dictionary-encoded: read again
    assert plain.schema.field("key").type == pa.string()
    assert reader.read("steps", ["step"], segments=reader.segments("steps")[:1]).num_rows == 2  # other segments
    assert reader.read("steps", ["step"], filter=pc.field("step") > 1).column("step").to_pylist() == [5, 6]
    assert reader.read("steps", ["step", "value"]).num_rows == 4  # value was not prefetched
    assert sorted(c for kind, c in reads if kind == "read") == [["key"], ["step"], ["step"], ["step", "value"]]


def test_a_prefetch_that_meets_a_segment_that_does_not_read_leaves_the_warning_to_each_read(tmp_path, caplog):
    from damage import damage_column

    run = _run(tmp_path, [[0, 1], [2]])
    first = RunReader(run).segments("steps")[0].path
    damage_column(Path(first), "value")
    reader = RunReader(run)
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        reader.prefetch("steps", ["step", "value"])
        assert reader.read("steps", ["step"]).column("step").to_pylist() == [0, 1, 2]  # its steps still read
        assert reader.read("steps", ["value"]).column("value").to_pylist() == [2.0]
    assert reader.warnings == [f"{first}: unreadable data in value ({reader.warnings[0].split('(', 1)[1]}"]


def test_a_prefetch_over_a_newer_listing_replaces_the_one_before(tmp_path, monkeypatch):
    # a live run writes a segment after a prefetch began: the next prefetch over the new listing
    # lets the first go, and a reader lining its columns up takes the newest prefetch's segments
    run = _run(tmp_path, [[0, 1]])
    reader = RunReader(run)
    reader.prefetch("steps", ["step"])
    first = reader.prefetched_segments("steps")
    assert [s.path for s in first] == [s.path for s in reader.segments("steps")]
    write_segment(run, "steps", _steps([2]), writer_id="w", seq=7)
    newer = RunReader(run).segments("steps")
    reader.prefetch("steps", ["step"], segments=newer)
    assert [s.path for s in reader.prefetched_segments("steps")] == [s.path for s in newer]
    assert reader.read("steps", ["step"], segments=newer).column("step").to_pylist() == [0, 1, 2]
    assert reader.prefetched_segments("steps") is None  # all taken: nothing held
    assert reader.prefetched_segments("trajectories") is None


def test_a_column_asked_for_twice_reads_as_a_read_does_after_a_prefetch(tmp_path):
    run = _run(tmp_path, [[0, 1]])
    reader = RunReader(run)
    reader.prefetch("steps", ["step", "value"])
    assert reader.read("steps", ["step", "step"]).column_names == ["step", "step"]
