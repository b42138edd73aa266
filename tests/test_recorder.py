"""The Recorder: every kind of value kept, every failure counted, the caller never blocked or raised at."""

from __future__ import annotations

import dataclasses
import decimal
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rlscope import Recorder, RunReader
from rlscope.trace.recorder import _close_all, logprob_histogram_row
from rlscope.trace.schema import LOGPROB_BIN_EDGES, LOGPROB_QUANTILES
from rlscope.trace.store import read_meta


def _values(run: str) -> dict[tuple[int, str], tuple[float | None, str | None]]:
    t = RunReader(run).read("steps").to_pylist()
    return {(r["step"], r["key"]): (r["value"], r["text"]) for r in t}


def test_metric_values_of_every_kind_keep_their_step(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run, meta={"model": {"active_params": 8e9}}) as rec:
        rec.log_step(
            np.int64(3),
            {
                "int": 7,
                "float": 0.25,
                "np32": np.float32(1.5),
                "np64": np.float64(2.5),
                "npint": np.int32(4),
                "zero_d": np.array(5.0),
                "one_element": np.array([6.0]),
                "bool": True,
                "nan": float("nan"),
                "inf": float("inf"),
                "ninf": -math.inf,
                "none": None,
                "text": "hello",
                "decimal": decimal.Decimal("0.5"),
                "huge": 10**400,
                "obj": object(),
            },
        )
    v = _values(run)
    assert v[(3, "int")] == (7.0, None)
    assert v[(3, "float")] == (0.25, None)
    assert v[(3, "np32")] == (1.5, None)
    assert v[(3, "np64")] == (2.5, None)
    assert v[(3, "npint")] == (4.0, None)
    assert v[(3, "zero_d")] == (5.0, None)
    assert v[(3, "one_element")] == (6.0, None)
    assert v[(3, "bool")] == (1.0, None)
    assert math.isnan(v[(3, "nan")][0])
    assert v[(3, "inf")] == (math.inf, None)
    assert v[(3, "ninf")] == (-math.inf, None)
    assert v[(3, "none")] == (None, None)
    assert v[(3, "text")] == (None, "hello")
    assert v[(3, "decimal")] == (0.5, None)
    assert v[(3, "huge")] == (math.inf, None)
    assert v[(3, "obj")][0] is None and v[(3, "obj")][1].startswith("<object object")
    assert RunReader(run).meta["model"] == {"active_params": 8e9}


def test_attempts_keep_a_restarted_step(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_step(5, {"a": 1.0})
        rec.log_step(5, {"a": 2.0}, attempt=1)
    rows = RunReader(run).read("steps", ["step", "attempt", "value"]).to_pylist()
    assert sorted((r["attempt"], r["value"]) for r in rows) == [(0, 1.0), (1, 2.0)]


def test_resuming_a_run_merges_meta(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 64}}):
        pass
    with Recorder(run, meta={"topology": "async"}):
        pass
    meta = RunReader(run).meta
    assert meta["gpu"] == {"type": "H100", "count": 64} and meta["topology"] == "async"
    # nested objects merge key by key: a resumed job stating its GPU count keeps the type written before
    with Recorder(run, meta={"gpu": {"count": 32}, "model": {"active_params": 8e9}}):
        pass
    meta = RunReader(run).meta
    assert meta["gpu"] == {"type": "H100", "count": 32} and meta["model"] == {"active_params": 8e9}


def test_a_meta_json_that_does_not_parse_is_kept_beside_not_overwritten(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    typo = '{"schema_version": 1, "gpu": {"type": "H100", "count": 8},}'  # a trailing comma
    (run / "meta.json").write_text(typo)
    with Recorder(str(run), meta={"topology": "async"}) as rec:
        rec.log_step(1, {"timing_s/gen": 1.0})
    kept = list(run.glob("meta.json.unreadable-*"))
    assert len(kept) == 1 and kept[0].read_text() == typo
    assert RunReader(run).meta["topology"] == "async"
    assert "not valid JSON" in caplog.text and f"kept as {kept[0]}" in caplog.text


def test_a_meta_json_of_a_newer_schema_is_left_as_it_is(tmp_path, caplog):
    run = tmp_path / "run"
    run.mkdir()
    newer = '{"schema_version": 99, "model": {"name": "x"}}'
    (run / "meta.json").write_text(newer)
    rec = Recorder(str(run), meta={"topology": "async"})
    rec.log_step(1, {"timing_s/gen": 1.0})
    rec.close(timeout=1.0)
    assert (run / "meta.json").read_text() == newer and not list(run.glob("meta.json.unreadable-*"))
    assert "newer than this rlscope reads" in caplog.text and not (run / "steps").exists()  # not written into it


def test_a_meta_json_whose_schema_version_is_no_whole_number_is_kept_beside(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text('{"schema_version": "1", "model": {"name": "x"}}')
    with Recorder(str(run), meta={"topology": "async"}) as rec:
        rec.log_step(1, {"timing_s/gen": 1.0})
    assert [p.read_text() for p in run.glob("meta.json.unreadable-*")] == [
        '{"schema_version": "1", "model": {"name": "x"}}'
    ]
    assert RunReader(run).meta["topology"] == "async" and rec.status()["rows_written"] == 1


@pytest.mark.parametrize(("version", "kept"), [(1.0, True), (99.0, False)])
def test_a_schema_version_written_as_a_whole_float_is_that_version(tmp_path, version, kept):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text(json.dumps({"schema_version": version, "gpu": {"count": 8}}))
    rec = Recorder(str(run), meta={"topology": "async"})
    rec.close(timeout=1.0)
    meta = json.loads((run / "meta.json").read_text())
    assert not list(run.glob("meta.json.unreadable-*"))  # never moved aside
    assert meta["gpu"] == {"count": 8} and (meta.get("topology") == "async") == kept  # 99: newer, left alone


def test_a_hand_written_meta_json_is_extended(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "meta.json").write_text('{"gpu": {"type": "H100", "count": 8}}')  # no schema_version
    with Recorder(str(run), meta={"topology": "async"}):
        pass
    meta = RunReader(run).meta
    assert meta["gpu"] == {"type": "H100", "count": 8} and meta["topology"] == "async"
    assert not list(run.glob("meta.json.unreadable-*"))


def test_trajectories_in_every_accepted_shape(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_trajectories(0, [{"traj_id": "a", "response_tokens": 10, "unknown_key": 1}])
        rec.log_trajectories(1, {"traj_id": ["b", "c"], "response_tokens": [20, 30]})
        rec.log_trajectories(2, pd.DataFrame({"traj_id": ["d"], "response_tokens": [40]}))
        rec.log_trajectories(3, pa.table({"traj_id": ["e"], "response_tokens": pa.array([50], pa.int32())}))
    rows = RunReader(run).read("trajectories", ["step", "traj_id", "response_tokens"]).to_pylist()
    assert sorted((r["step"], r["traj_id"], r["response_tokens"]) for r in rows) == [
        (0, "a", 10),
        (1, "b", 20),
        (1, "c", 30),
        (2, "d", 40),
        (3, "e", 50),
    ]


def test_spans_record_start_and_end(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run, host="node-1") as rec:
        with rec.span(0, "gen", role="rollout"):
            pass
        rec.log_span(0, "update_actor", 10.0, 12.5)
    rows = {r["phase"]: r for r in RunReader(run).read("spans").to_pylist()}
    assert rows["gen"]["role"] == "rollout" and rows["gen"]["host"] == "node-1"
    assert rows["gen"]["end"] >= rows["gen"]["start"] > 0
    assert (rows["update_actor"]["start"], rows["update_actor"]["end"], rows["update_actor"]["role"]) == (
        10.0,
        12.5,
        "trainer",
    )


def test_a_job_start_is_its_own_table_and_no_step(tmp_path):
    from rlscope.analyzers import analyze_run, anatomy
    from rlscope.cli.info import run_summary

    run = str(tmp_path / "run")
    with Recorder(run, host="node-1") as rec:
        rec.log_step(1, {"timing_s/gen": 40.0, "timing_s/step": 60.0})
    before = analyze_run(run)
    with Recorder(run, host="node-2") as rec:  # a resume: its job's start, and no step yet
        rec.log_job_start(1.7e9)
        rec.log_job_start()
    rows = RunReader(run).read("jobs").to_pylist()
    assert rows[0]["time"] == 1.7e9 and rows[1]["time"] == pytest.approx(time.time(), abs=60)
    assert {(r["host"], r["pid"]) for r in rows} == {("node-2", os.getpid())}
    summary = run_summary(RunReader(run))["tables"]
    assert summary["steps"]["steps"] == 1 and "steps" not in summary["jobs"]  # no step in rlscope info
    assert list(anatomy.analyze(run).seconds.index) == [1]
    after = analyze_run(run)  # diagnose's findings do not change
    assert [f.id for f in after.findings] == [f.id for f in before.findings]


@pytest.mark.parametrize(
    "when",
    [time.time() * 1000, time.time() + 3600, math.nan, math.inf, "soon", True, None],
    ids=["milliseconds", "an-hour-ahead", "nan", "inf", "text", "bool", "none"],
)
def test_a_job_start_no_clock_gives_now_is_recorded_as_now_with_a_warning(tmp_path, caplog, when):
    # milliseconds for seconds, a clock an hour ahead, no number: a start in the future would hold the
    # stall and GPU-idle alerts off until then; the job started by the call, so it is recorded then
    run = tmp_path / "run"
    with caplog.at_level("WARNING", logger="rlscope"), Recorder(run) as rec:
        called = time.time()
        rec.log_job_start(when)
    (row,) = RunReader(run).read("jobs").to_pylist()
    assert called <= row["time"] <= time.time()
    assert rec.status()["bad_rows"] == 0
    assert ("job_start" in caplog.text) == (when is not None)


def test_a_job_start_in_the_past_or_within_a_minute_ahead_is_kept(tmp_path):
    # a start measured earlier (any past time: it can only page sooner) or on a host a little ahead
    run, ahead = tmp_path / "run", time.time() + 30
    with Recorder(run) as rec:
        rec.log_job_start(1.7e9)
        rec.log_job_start(0)
        rec.log_job_start(np.float64(ahead))
    assert rec.status()["last_error"] is None
    times = [r["time"] for r in RunReader(run).read("jobs").to_pylist()]
    assert times == [1.7e9, 0.0, ahead]


def test_logprob_histogram_counts_quantiles_and_clipping():
    # 1,000 tokens at +1e-3, 10 at -0.5 and 2 at +1.0 (IS weight e^1 = 2.7 > 2: clipped)
    deltas = np.concatenate([np.full(1000, 1e-3), np.full(10, -0.5), np.full(2, 1.0), [np.nan]])
    row = logprob_histogram_row(7, deltas)
    assert row["n_tokens"] == 1012  # NaN dropped
    assert sum(row["abs_counts"]) == 1012
    edges = LOGPROB_BIN_EDGES

    def bin_of(x: float) -> int:
        return int(np.searchsorted(edges, x, side="right") - 1)

    assert row["abs_counts"][bin_of(1e-3 * 1.0001)] == 1000
    assert row["abs_counts"][bin_of(0.5)] == 10
    assert row["abs_counts"][bin_of(1.0)] == 2
    assert row["is_clipped"] == 2
    assert row["abs_max"] == 1.0
    assert row["quantiles"][LOGPROB_QUANTILES.index(0.5)] == pytest.approx(1e-3)
    assert row["quantiles"][LOGPROB_QUANTILES.index(0.001)] == pytest.approx(-0.5)
    assert row["abs_mean"] == pytest.approx((1000 * 1e-3 + 10 * 0.5 + 2 * 1.0) / 1012)


def test_logprob_delta_is_histogrammed_by_the_writer(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_logprob_delta(2, np.full(100, 0.01, dtype=np.float32))
        rec.log_logprob_delta(3, [])
    rows = {r["step"]: r for r in RunReader(run).read("logprob").to_pylist()}
    assert rows[2]["n_tokens"] == 100 and rows[2]["abs_mean"] == pytest.approx(0.01, rel=1e-6)
    assert rows[3]["n_tokens"] == 0 and rows[3]["quantiles"] is None


def test_full_queue_drops_the_oldest_rows_and_counts_them(tmp_path):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=3600, flush_rows=10**9, max_queue_rows=100)
    for step in range(50):
        rec.log_step(step, {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})  # 4 rows each
    assert rec.status()["dropped_rows"] == 4 * 25
    assert rec.status()["queued_rows"] == 100
    rec.close()
    steps = sorted(set(RunReader(run).read("steps", ["step"]).column("step").to_pylist()))
    assert steps == list(range(25, 50))  # the newest rows survive


@dataclasses.dataclass
class _StalledDisk:
    writing: threading.Event  # the writer thread is inside a segment write
    release: threading.Event  # set it and the writes go through


@pytest.fixture
def stalled_disk(monkeypatch):
    """Every segment write hangs until the test releases it (a disk that stalls)."""
    import rlscope.trace.recorder as recorder

    disk = _StalledDisk(threading.Event(), threading.Event())
    write = recorder.write_segment

    def slow_write(*args, **kwargs):
        disk.writing.set()
        disk.release.wait(30)
        return write(*args, **kwargs)

    monkeypatch.setattr(recorder, "write_segment", slow_write)
    yield disk
    disk.release.set()


def test_queue_is_bounded_by_the_bytes_that_rows_hold_while_the_disk_stalls(tmp_path, stalled_disk):
    run = str(tmp_path / "run")
    text = 100_000  # each row carries a response's text under a key the schema does not have
    rec = Recorder(run, flush_interval=0.01, max_queue_bytes=5_000_000)
    for step in range(20):
        rec.log_trajectories(step, [{"traj_id": f"{step}-{i}", "response": "x" * text} for i in range(10)])
        if step == 0:
            assert stalled_disk.writing.wait(10)  # the writer took the first call and hangs writing it
    status = rec.status()
    # the queue holds at most 5 MB of those calls (1 MB of text each), the rest was dropped
    assert 0 < status["queued_rows"] <= 50 and status["queued_bytes"] <= 5_000_000
    assert status["queued_bytes"] >= status["queued_rows"] * text  # the estimate counts the text
    in_flight = 200 - status["queued_rows"] - status["dropped_rows"]
    assert status["dropped_rows"] > 0 and 0 < in_flight <= 50
    stalled_disk.release.set()
    rec.close()
    steps = RunReader(run).read("trajectories", ["step"]).column("step").to_pylist()
    assert len(steps) == 200 - status["dropped_rows"]
    assert set(range(20 - status["queued_rows"] // 10, 20)) <= set(steps)  # the newest survive


def test_an_array_metric_is_weighed_by_its_size(tmp_path, stalled_disk):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=0.01, max_queue_bytes=20_000_000)
    rec.log_step(0, {"a": 1.0})
    assert stalled_disk.writing.wait(10)  # in the writer's hands, which hang
    for step in range(1, 6):
        rec.log_step(step, {"histogram": np.zeros(1_000_000), "b": 2.0})  # 8 MB each
    status = rec.status()
    assert status["queued_rows"] == 4 and status["dropped_rows"] == 6  # two calls fit in 20 MB
    assert status["queued_bytes"] >= 16_000_000
    stalled_disk.release.set()
    rec.close()
    assert sorted({s for s, _ in _values(run)}) == [0, 4, 5]


def test_long_text_is_cut_as_it_is_queued(tmp_path):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=3600, flush_rows=10**9)
    rec.log_step(1, {"note": "y" * 1_000_000, "loss": 0.5})
    assert rec.status()["queued_bytes"] < 10_000  # not the megabyte the caller passed
    rec.close()
    assert _values(run)[(1, "note")] == (None, "y" * 1024)


def test_columns_the_schema_lacks_are_let_go_at_once(tmp_path):
    import gc
    import weakref

    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=3600, flush_rows=10**9)
    embeddings = np.zeros((4, 1_000_000))
    held = weakref.ref(embeddings)
    rec.log_trajectories(0, {"traj_id": ["a", "b", "c", "d"], "response_tokens": [1, 2, 3, 4], "emb": embeddings})
    rec.log_trajectories(1, pa.table({"traj_id": ["e"], "extra": [np.zeros(1000)]}))
    del embeddings
    gc.collect()
    assert held() is None  # the queue kept only the schema's columns
    assert rec.status()["queued_rows"] == 5 and rec.status()["queued_bytes"] < 100_000
    rec.close()
    table = RunReader(run).read("trajectories", ["step", "traj_id", "response_tokens"])
    assert table.column("traj_id").to_pylist() == ["a", "b", "c", "d", "e"]
    assert table.column("response_tokens").to_pylist() == [1, 2, 3, 4, None]


def test_many_threads_log_concurrently_without_losing_rows(tmp_path):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=0.01)

    def work(offset: int) -> None:
        for i in range(200):
            rec.log_step(offset + i, {"x": float(i)})

    threads = [threading.Thread(target=work, args=(t * 1000,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rec.close()
    assert rec.status()["rows_written"] == 800
    assert RunReader(run).row_count("steps") == 800


def test_unwritable_run_directory_is_counted_not_raised(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the run directory should be")
    rec = Recorder(str(blocker / "run"), flush_interval=0.01)
    for step in range(3):
        rec.log_step(step, {"a": 1.0})
        rec.log_trajectories(step, [{"traj_id": "x"}])
    assert rec.flush() is False  # nothing written: the rows wait for the directory
    assert rec.status()["queued_rows"] == 6
    rec.close()  # the last flush gives up on them
    status = rec.status()
    assert status["write_errors"] >= 2 and status["rows_written"] == 0
    assert status["dropped_rows"] == 6 and status["queued_rows"] == 0
    warnings = [r for r in caplog.records if r.name == "rlscope"]
    assert len({r.getMessage().split(":")[1] for r in warnings}) == len(warnings)  # once per kind


def test_vanishing_run_directory_mid_run_is_counted(tmp_path):
    import shutil

    run = tmp_path / "run"
    rec = Recorder(str(run), flush_interval=3600)
    rec.log_step(0, {"a": 1.0})
    assert rec.flush()
    shutil.rmtree(run)
    run.write_text("now a file")
    rec.log_step(1, {"a": 1.0})
    assert rec.flush() is False  # the row was dropped, not written
    rec.close()
    assert rec.status()["write_errors"] == 1 and rec.status()["rows_written"] == 1
    assert rec.status()["dropped_rows"] == 1


def test_a_run_directory_deleted_mid_run_gets_its_meta_json_back(tmp_path, caplog):
    import shutil

    run = tmp_path / "run"
    rec = Recorder(str(run), {"gpu": {"count": 8}}, flush_interval=3600)
    rec.log_step(0, {"a": 1.0})
    assert rec.flush()
    shutil.rmtree(run)
    rec.log_step(1, {"a": 2.0})
    with caplog.at_level("WARNING", logger="rlscope"):
        assert rec.flush()
    rec.close()
    assert "meta.json went away; written again" in caplog.text
    assert read_meta(run)["gpu"] == {"count": 8}  # still a run directory, with what it was told
    assert _values(str(run)) == {(1, "a"): (2.0, None)}


def _remote(monkeypatch, delay: float, target: Path | None) -> str:
    """``s3://bucket/run`` answered after ``delay`` seconds by ``target`` (a local folder), or never."""
    import rlscope.trace.recorder as recorder_module

    local = recorder_module.locate

    def slow_locate(run_dir):
        time.sleep(delay)
        if target is None:
            raise OSError("no route to the object store")
        return local(str(target))

    monkeypatch.setattr(recorder_module, "locate", slow_locate)
    return "s3://bucket/run"


def test_a_remote_run_directory_never_blocks_the_caller(tmp_path, monkeypatch):
    started = time.monotonic()
    rec = Recorder(_remote(monkeypatch, 2.0, None), flush_interval=3600)
    rec.update_meta({"gpu": {"count": 8}})
    rec.log_step(0, {"a": 1.0})
    assert time.monotonic() - started < 1.0
    assert rec.flush(timeout=5) is False  # neither the row nor meta.json could be written
    rec.close(timeout=0.1)


def test_meta_after_close_is_refused_aloud(tmp_path, caplog):
    rec = Recorder(str(tmp_path / "run"), {"a": 1})
    rec.close()
    with caplog.at_level("WARNING", logger="rlscope"):
        rec.update_meta({"b": 2})
    assert "the recorder is closed; meta not merged" in caplog.text
    assert "b" not in read_meta(tmp_path / "run")


def test_columns_outside_the_schema_do_not_count_as_rows(tmp_path):
    with Recorder(str(tmp_path / "run")) as rec:
        rec.log_trajectories(1, {"reward": [1.0, 2.0], "unknown_col": [1, 2, 3]})
    status = rec.status()
    assert status["rows_queued"] == status["rows_written"] == 2


def test_meta_given_to_a_remote_run_reaches_its_meta_json(tmp_path, monkeypatch):
    from rlscope.collectors.verl._hook import Hook

    hook = Hook(_remote(monkeypatch, 0.05, tmp_path / "run"))
    hook.update_meta({"gpu": {"count": 64}, "batch_size": 256})
    hook.recorder().close()
    meta = read_meta(tmp_path / "run")
    assert meta["gpu"] == {"count": 64} and meta["batch_size"] == 256 and meta["framework"] == "verl"


def test_a_run_directory_that_will_not_open_is_not_retried_on_every_row(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    rec = Recorder(
        str(blocker / "run"), flush_rows=10, flush_interval=3600
    )  # a flush every 10 rows, were it not waiting
    for step in range(200_000):
        rec.log_step(step, {"a": 1.0})
    time.sleep(0.3)
    # the attempt the first rows woke, and at most two their wakes queued before it failed; a writer
    # woken every 10 rows while the directory stays shut tried dozens of times here
    assert rec.status()["write_errors"] <= 3
    rec.close(timeout=1)


def test_a_run_directory_that_could_not_be_opened_is_tried_again(tmp_path):
    run = tmp_path / "run"
    run.write_text("in the way")  # not a directory yet: meta.json cannot be written
    rec = Recorder(str(run))
    rec.log_step(0, {"a": 1.0})
    assert rec.flush() is False and rec.status()["write_errors"] == 1  # not written: still queued
    assert rec.status()["queued_rows"] == 1 and rec.status()["dropped_rows"] == 0
    run.unlink()  # the blip is over
    rec.log_step(1, {"a": 2.0})
    rec.close()
    assert rec.status()["rows_written"] == 2 and (run / "meta.json").is_file()
    assert _values(str(run)) == {(0, "a"): (1.0, None), (1, "a"): (2.0, None)}


def test_bad_arguments_become_counters(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_step(0, None)  # type: ignore[arg-type]
        rec.log_step("not-a-step", {"a": 1.0})  # type: ignore[arg-type]
        rec.log_trajectories(0, 42)  # type: ignore[arg-type]
        rec.log_gpu(None)  # type: ignore[arg-type]
        rec.log_logprob_delta(0, object())
        rec.log_step(1, {"ok": 1.0})
    status = rec.status()
    assert status["bad_rows"] >= 5
    assert _values(run) == {(1, "ok"): (1.0, None)}


def test_one_bad_value_drops_its_row_not_the_flush(tmp_path):
    class Unreadable:  # a tensor on a meta device, say
        def __float__(self) -> float:
            raise RuntimeError("no data")

    run = str(tmp_path / "run")
    with Recorder(run, flush_interval=60) as rec:
        for s in range(10):
            rec.log_span(s, "gen", s, s + 1.0)
            rec.log_trajectories(s, [{"traj_id": f"t{s}"}])
            rec.log_step(s, {"loss": 1.0})
        rec.log_span(10, "gen", "not-a-time", 5.0)  # type: ignore[arg-type]
        rec.log_span(None, "gen", 1.0, 5.0)  # type: ignore[arg-type]
        rec.log_trajectories(10, [{"traj_id": "kept"}, {"traj_id": "bad", "response_tokens": "ten"}])
        rec.log_gpu([{"time": 1.0, "gpu": 0}, {"time": 2.0, "mem_used_bytes": 2**70}])
        rec.log_step(10, {"x": Unreadable()})
    reader = RunReader(run)
    assert {t: reader.row_count(t) for t in reader.tables()} == {"steps": 11, "spans": 10, "trajectories": 11, "gpu": 1}
    status = rec.status()
    assert status["bad_rows"] == 4 and status["write_errors"] == 0
    # every row queued is either written or counted as bad, once
    assert status["rows_written"] + status["bad_rows"] == status["rows_queued"]
    assert reader.read("steps").to_pandas().set_index("key").loc["x", "text"].startswith("<")  # kept as text


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_neither_hangs_nor_writes(tmp_path):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=0.001, flush_rows=10)
    stop = threading.Event()

    def busy() -> None:  # the writer thread is inside Arrow at the fork more often than not
        while not stop.is_set():
            rec.log_step(1, {f"k{i}": 1.0 for i in range(20)})

    threads = [threading.Thread(target=busy) for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    pid = os.fork()
    if pid == 0:  # the child logs, flushes and closes every recorder as its atexit would
        rec.log_step(1000, {"child": 1.0})
        ok = rec.status()["dropped_rows"] == 1 and rec.flush() is False
        _close_all()
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    stop.set()
    for t in threads:
        t.join()
    rec.close()
    assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0
    assert 1000 not in RunReader(run).read("steps", ["step"]).column("step").to_pylist()


def test_logging_after_close_is_dropped_counted_and_said_once(tmp_path, caplog):
    rec = Recorder(str(tmp_path / "run"))
    rec.close()
    with caplog.at_level("WARNING", logger="rlscope"):
        rec.log_step(0, {"a": 1.0, "b": 2.0})
        rec.log_step(1, {"a": 1.0})
    assert rec.status()["dropped_rows"] == 3
    assert rec.flush() is False
    assert caplog.text.count("after close()") == 1


def test_status_file_is_written_for_info(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_step(0, {"a": 1.0})
    from rlscope.trace.recorder import iter_status

    statuses = list(iter_status(run))
    assert len(statuses) == 1 and statuses[0]["rows_written"] == 1


def test_values_changed_after_logging_keep_what_was_logged(tmp_path):
    import torch

    run = str(tmp_path / "run")
    acc_np, acc_t, row = np.zeros(()), torch.zeros(()), {"traj_id": "t0", "reward": 0.0}
    columns = {"traj_id": ["c0"], "response_tokens": np.array([0])}
    with Recorder(run, flush_interval=3600, flush_rows=10**9) as rec:
        for step in range(5):
            acc_np += 1
            acc_t += 1
            rec.log_step(step, {"n_np": acc_np, "n_t": acc_t})
            row["traj_id"], row["reward"] = f"t{step}", float(step)
            rec.log_trajectories(step, [row])
            columns["traj_id"][0], columns["response_tokens"][0] = f"c{step}", step
            rec.log_trajectories(step, columns)
    values = _values(run)
    assert [values[(s, "n_np")][0] for s in range(5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert [values[(s, "n_t")][0] for s in range(5)] == [1.0, 2.0, 3.0, 4.0, 5.0]
    traj = RunReader(run).read("trajectories", ["step", "traj_id", "reward", "response_tokens"]).to_pylist()
    assert [(r["traj_id"], r["reward"]) for r in traj if r["traj_id"].startswith("t")] == [
        (f"t{s}", float(s)) for s in range(5)
    ]
    assert [(r["traj_id"], r["response_tokens"]) for r in traj if r["traj_id"].startswith("c")] == [
        (f"c{s}", s) for s in range(5)
    ]


def test_logprob_deltas_from_a_trainer_tensor_are_kept(tmp_path):
    import torch

    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_logprob_delta(1, torch.full((100,), 0.01, dtype=torch.bfloat16))
        rec.log_logprob_delta(2, torch.full((50,), 0.02, requires_grad=True) * 1.0)  # part of a graph
    assert rec.status()["bad_rows"] == 0
    rows = {r["step"]: r for r in RunReader(run).read("logprob").to_pylist()}
    assert rows[1]["n_tokens"] == 100 and rows[1]["abs_mean"] == pytest.approx(0.01, rel=1e-2)  # bf16's precision
    assert rows[2]["n_tokens"] == 50 and rows[2]["abs_mean"] == pytest.approx(0.02, rel=1e-6)


def test_one_value_that_fits_no_column_loses_its_row_alone_in_every_form(tmp_path):
    import torch

    run = str(tmp_path / "run")
    tokens = list(range(1000))
    with Recorder(run) as rec:
        rec.log_trajectories(0, {"traj_id": [f"a{i}" for i in range(1000)], "response_tokens": [*tokens[:-1], "n/a"]})
        frame = pd.DataFrame({"traj_id": ["b0", "b1", "b2"], "response_tokens": [1, 2, "n/a"]})  # mixed types
        rec.log_trajectories(1, frame)
        rec.log_trajectories(1, pd.DataFrame({"traj_id": ["b3", "b4"], "response_tokens": [3.0, 7.5]}))  # 7.5 tokens
        rec.log_trajectories(2, [{"traj_id": "c0", "reward": torch.tensor(0.5)}, {"traj_id": 7, "aborted": 1}])
        rec.log_trajectories(3, {"traj_id": "d0", "reward": 1.0})  # one row as a dict of values
        rec.log_step(4, {"loss": 0.5, "note": "bad\udc80text", "key\udc80": 1.0})
    assert rec.status()["bad_rows"] == 3  # "n/a" twice and 7.5
    rows = RunReader(run).read("trajectories", ["step", "traj_id", "response_tokens", "reward", "aborted"])
    by_step = {s: [r for r in rows.to_pylist() if r["step"] == s] for s in range(4)}
    assert len(by_step[0]) == 999 and [r["response_tokens"] for r in by_step[0]] == tokens[:-1]
    assert [(r["traj_id"], r["response_tokens"]) for r in by_step[1]] == [("b0", 1), ("b1", 2), ("b3", 3)]
    assert [(r["traj_id"], r["reward"], r["aborted"]) for r in by_step[2]] == [("c0", 0.5, None), ("7", None, True)]
    assert [(r["traj_id"], r["reward"]) for r in by_step[3]] == [("d0", 1.0)]
    values = _values(run)
    assert values[(4, "loss")] == (0.5, None) and values[(4, "note")] == (None, "bad?text")
    assert values[(4, "key?")] == (1.0, None)


def test_a_failed_write_leaves_no_partial_file_behind(tmp_path, monkeypatch):
    import errno

    run = tmp_path / "run"
    rec = Recorder(str(run), flush_interval=3600, flush_rows=10**9)
    assert rec.flush()  # the run directory is made before the disk fills
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    for step in range(3):
        rec.log_step(step, {"a": 1.0})
        rec.flush()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert rec.status()["write_errors"] == 3 and rec.status()["dropped_rows"] == 3
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]  # every partial file removed
    rec.log_step(3, {"a": 1.0})  # space is back: writing resumes
    rec.close()
    assert [s for s, _ in _values(str(run))] == [3]


def test_close_keeps_to_its_timeout_and_says_what_it_leaves(tmp_path, stalled_disk, caplog):
    rec = Recorder(str(tmp_path / "run"), flush_interval=0.01)
    rec.log_step(0, {"a": 1.0, "b": 2.0})
    assert stalled_disk.writing.wait(10)
    rec.log_step(1, {"a": 1.0})
    assert rec.status()["rows_in_flight"] == 2 and rec.status()["queued_rows"] == 1
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="rlscope"):
        rec.close(timeout=0.5)
    assert time.monotonic() - started < 1.5  # the timeout is for the whole close, not each half
    assert "with 3 rows not written" in caplog.text


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("flush_interval", 0),
        ("flush_interval", float("nan")),
        ("flush_interval", "5"),
        ("flush_rows", -1),
        ("max_queue_rows", 1.5),
        ("max_queue_bytes", 0),
    ],
)
def test_a_setting_the_writer_cannot_run_with_is_refused_at_once(tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"^Recorder {setting} must be a positive"):
        Recorder(str(tmp_path / "run"), **{setting: value})
    assert not (tmp_path / "run").exists()  # refused before anything was made


def test_an_infinite_logprob_gap_counts_as_the_largest_and_nan_as_nothing():
    row = logprob_histogram_row(0, [0.0, 1e-3, float("nan"), float("inf"), -0.5])
    assert row["n_tokens"] == 4  # the NaN alone is left out
    assert row["abs_counts"][-1] == 1 and sum(row["abs_counts"]) == 4  # inf in the |delta| >= 100 bin
    assert row["is_clipped"] == 1  # exp(inf) is over the cap of 2
    assert row["abs_max"] == 0.5 and row["abs_mean"] == pytest.approx((0 + 1e-3 + 0.5) / 3)  # finite ones
    assert all(math.isfinite(q) for q in row["quantiles"]) and row["quantiles"][-1] > 100


def test_a_hung_filesystem_never_blocks_making_the_recorder_or_merging_meta(tmp_path, monkeypatch):
    import rlscope.trace.recorder as recorder

    hung, write = threading.Event(), recorder.write_meta

    def hanging_write_meta(*args, **kwargs):
        hung.wait(30)
        return write(*args, **kwargs)

    monkeypatch.setattr(recorder, "write_meta", hanging_write_meta)
    started = time.monotonic()
    rec = Recorder(str(tmp_path / "run"), meta={"framework": "x"})
    rec.update_meta({"batch_size": 64})
    rec.log_step(0, {"a": 1.0})
    assert time.monotonic() - started < 1.0  # the training loop went on; meta.json waits on the writer
    assert rec.flush(timeout=0.2) is False  # not on disk yet, and flush says so
    hung.set()
    rec.close()
    assert read_meta(str(tmp_path / "run"))["batch_size"] == 64 and _values(str(tmp_path / "run"))[(0, "a")] == (
        1.0,
        None,
    )


def test_a_step_that_is_not_a_whole_number_is_a_bad_row_not_another_step(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_step(5.9, {"a": 1.0})
        rec.log_step(np.float64(6.0), {"a": 2.0})
        rec.log_trajectories(5.5, [{"traj_id": "x"}])
        rec.log_trajectories("7", [{"traj_id": "y"}])
    assert rec.status()["bad_rows"] == 2
    assert sorted(s for s, _ in _values(run)) == [6]
    assert RunReader(run).read("trajectories", ["step", "traj_id"]).to_pylist() == [{"step": 7, "traj_id": "y"}]


def test_two_recorders_of_one_run_keep_each_others_meta(tmp_path):
    for i in range(20):
        run = str(tmp_path / f"run{i}")
        a = Recorder(run, meta={"gpu": {"type": "H100"}})
        b = Recorder(run, meta={"framework": "verl", "gpu": {"count": 8}})
        a.close()
        b.close()
        meta = read_meta(run)
        assert meta["gpu"] == {"type": "H100", "count": 8} and meta["framework"] == "verl", i


def test_byte_estimates_follow_what_calls_hold(tmp_path):
    run = str(tmp_path / "run")
    rec = Recorder(run, flush_interval=3600, flush_rows=10**9, max_queue_bytes=512 << 20)
    table = pa.table({"traj_id": [f"t{i}" for i in range(200_000)], "response_tokens": list(range(200_000))})
    for i in range(200):  # slices share the parent's buffers: each weighs its share, not the whole
        rec.log_trajectories(0, table.slice(i * 1000, 1000))
    status = rec.status()
    assert status["dropped_rows"] == 0 and status["queued_bytes"] <= 2 * table.nbytes
    rec.log_step(1, {"histogram": list(range(1_000_000))})  # a list holds its items: 8 MB of pointers alone
    assert rec.status()["queued_bytes"] - status["queued_bytes"] > 8_000_000
    rec.close()
    assert RunReader(run).row_count("trajectories") == 200_000


def test_rows_given_in_other_shapes_are_copied_and_kept(tmp_path):
    from collections import OrderedDict, defaultdict

    run = str(tmp_path / "run")
    row = defaultdict(float, {"traj_id": "a", "reward": 1.0})
    ordered = OrderedDict(traj_id="b", reward=2.0)
    series = pd.Series([1.0, 2.0])
    frame = pd.DataFrame({"traj_id": ["d0", "d1"], "notes": [object(), {"x": 1}]})  # a column Arrow refuses
    with Recorder(run) as rec:
        rec.log_trajectories(0, [row, ordered])
        rec.log_trajectories(1, {"traj_id": ["c0", "c1"], "reward": series})
        rec.log_trajectories(2, {"traj_id": "e", "reward": 3.0, "response_ids": [1, 2, 3]})  # one row
        rec.log_trajectories(3, frame)
        rec.log_trajectories(4, [{"traj_id": "f\udc80", "reward_error": "E\udc80"}])
        rec.log_span(5, "gen\udc80", 0.0, 1.0)
        row["reward"], ordered["reward"], series[:] = -5.0, -5.0, 99.0
    assert rec.status()["bad_rows"] == 0
    traj = RunReader(run).read("trajectories", ["step", "traj_id", "reward", "reward_error"]).to_pylist()
    assert [(r["step"], r["traj_id"], r["reward"]) for r in traj] == [
        (0, "a", 1.0),
        (0, "b", 2.0),
        (1, "c0", 1.0),
        (1, "c1", 2.0),
        (2, "e", 3.0),
        (3, "d0", None),
        (3, "d1", None),
        (4, "f?", None),
    ]
    assert traj[-1]["reward_error"] == "E?"
    assert RunReader(run).read("spans", ["phase"]).column("phase").to_pylist() == ["gen?"]


def test_whole_number_settings_read_in_any_numeric_form(tmp_path):
    rec = Recorder(str(tmp_path / "run"), max_queue_bytes=2e9, max_queue_rows=np.int64(10**6), flush_rows=1e5)
    assert (rec.max_queue_bytes, rec.max_queue_rows, rec.flush_rows) == (2_000_000_000, 1_000_000, 100_000)
    rec.close()


def test_quantiles_with_infinite_deltas_are_observed_values():
    deltas = [*np.linspace(-0.01, 0.01, 997), float("inf"), float("inf"), -float("inf")]
    row = logprob_histogram_row(0, deltas)
    observed = {*np.linspace(-0.01, 0.01, 997).tolist(), 1e300, -1e300}
    assert all(q in observed for q in row["quantiles"])  # none made up between a delta and the sentinel
    assert row["quantiles"][-1] == 1e300 and row["quantiles"][0] == -1e300


def test_a_table_value_that_does_not_cast_loses_its_row_alone(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_trajectories(0, pa.table({"traj_id": ["a", "b", "c"], "group": ["1", "x", "2"]}))  # Arrow casts "1"
        rec.log_trajectories(1, pa.table({"traj_id": ["d", "e"], "aborted": ["true", "false"], "group": ["3", "y"]}))
        rec.log_trajectories(2, pa.table({"token_ids": [[1, 2]]}))  # no column the schema has: no row
        rec.log_trajectories(3, {"token_ids": [1, 2, 3]})  # nor here
    assert rec.status()["bad_rows"] == 2
    rows = RunReader(run).read("trajectories", ["step", "traj_id", "group", "aborted"]).to_pylist()
    assert [(r["step"], r["traj_id"], r["group"], r["aborted"]) for r in rows] == [
        (0, "a", 1, None),
        (0, "c", 2, None),
        (1, "d", 3, True),
    ]


def test_a_fraction_where_a_whole_number_goes_is_refused_whatever_is_queued_beside_it(tmp_path):
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_trajectories(0, [{"traj_id": "a", "group": 7.5}, {"traj_id": "b", "group": 7.0}])
        rec.log_gpu([{"time": 1.0, "gpu": 0, "mem_used_bytes": 1.5e9 + 0.5}])  # alone in its flush
    with Recorder(run) as rec:
        rec.log_gpu([{"time": 2.0, "gpu": 0, "mem_used_bytes": 1.5e9 + 0.5}, {"time": 3.0, "gpu": 1, "util_pct": 5}])
    rows = RunReader(run).read("trajectories", ["traj_id", "group"]).to_pylist()
    assert rows == [{"traj_id": "b", "group": 7}]  # 7.5 tokens is not filed as 7
    gpu = RunReader(run).read("gpu", ["time", "gpu"]).to_pylist()
    assert gpu == [{"time": 3.0, "gpu": 1}]  # the same verdict alone or beside a good row


def test_one_run_directory_one_meta_lock_however_it_is_spelled(tmp_path):
    from rlscope.trace.recorder import _meta_file_lock
    from rlscope.trace.store import locate

    (tmp_path / "a run").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a run")
    lock = _meta_file_lock(locate(str(tmp_path / "a run")))
    spellings = [f"file://{tmp_path}/a%20run", str(tmp_path / "link"), f"{tmp_path}/./a run"]
    assert all(_meta_file_lock(locate(s)) is lock for s in spellings)


def _hold_meta_lock(run: Path) -> subprocess.Popen:
    """Lock the run's meta.json from another process, as one merging into it would; closing the
    child's stdin releases it."""
    from rlscope.trace.recorder import META_LOCK_FILE

    run.mkdir(exist_ok=True)
    code = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
        "fcntl.lockf(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(run / META_LOCK_FILE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def _release(child: subprocess.Popen) -> None:
    assert child.stdin is not None
    child.stdin.close()
    child.wait(10)


def test_meta_json_merges_wait_for_another_process_merging_into_it(tmp_path):
    run = tmp_path / "run"
    child = _hold_meta_lock(run)
    rec = Recorder(str(run), meta={"mine": 1})
    time.sleep(0.5)
    assert not (run / "meta.json").exists()  # waits while the other process reads, merges, writes
    (run / "meta.json").write_text('{"schema_version": 1, "theirs": 2}')
    _release(child)
    rec.close()
    meta = read_meta(str(run))
    assert (meta["mine"], meta["theirs"]) == (1, 2) and rec.status()["last_error"] is None


def test_a_meta_lock_held_too_long_is_waited_for_a_bounded_time(tmp_path, monkeypatch):
    monkeypatch.setattr("rlscope.trace.recorder.META_LOCK_WAIT", 0.2)
    run = tmp_path / "run"
    child = _hold_meta_lock(run)
    try:
        with Recorder(str(run), meta={"mine": 1}) as rec:
            assert rec.flush(5)
        assert read_meta(str(run))["mine"] == 1
        assert rec.status()["last_error"].startswith("meta-lock: TimeoutError")
    finally:
        _release(child)


def test_a_filesystem_without_locks_never_stops_meta_or_rows(tmp_path, monkeypatch):
    import fcntl

    def no_locks(*_args):
        raise OSError(38, "Function not implemented")  # ENOSYS: a mount without lock support

    monkeypatch.setattr(fcntl, "lockf", no_locks)
    run = tmp_path / "run"
    with Recorder(str(run), meta={"mine": 1}) as rec:
        rec.log_step(1, {"timing_s/gen": 1.0})
    assert read_meta(str(run))["mine"] == 1 and rec.status()["rows_written"] == 1
    assert "cannot lock .meta.lock (Function not implemented); merged unlocked" in rec.status()["last_error"]


def test_a_child_forked_while_the_meta_lock_is_held_does_not_hold_it(tmp_path):
    import multiprocessing

    from rlscope.trace.recorder import _meta_process_lock
    from rlscope.trace.store import locate

    run = tmp_path / "run"
    loc = locate(str(run))
    ctx = multiprocessing.get_context("fork")
    with _meta_process_lock(loc) as unlocked:
        assert unlocked is None
        child = ctx.Process(target=time.sleep, args=(3,))  # forked while the lock is held
        child.start()
    try:
        started = time.monotonic()
        with _meta_process_lock(loc) as unlocked:  # the child sleeps on: the lock is free
            assert unlocked is None and time.monotonic() - started < 1.0
    finally:
        child.terminate()
        child.join()


@pytest.mark.parametrize(("setting", "value"), [("flush_rows", 10**400), ("flush_interval", 1e300)])
def test_settings_beyond_what_the_writer_can_wait_or_count_are_refused(tmp_path, setting, value):
    with pytest.raises(ValueError, match=f"^Recorder {setting} must be a positive"):
        Recorder(str(tmp_path / "run"), **{setting: value})


def test_every_form_casts_alike_and_refuses_any_fraction_where_a_whole_number_goes(tmp_path):
    import torch

    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        for value in (np.float32(7.5), np.float16(7.5), decimal.Decimal("7.5"), torch.tensor(7.5)):
            rec.log_trajectories(0, [{"traj_id": "fraction", "group": value}])  # each alone in its call
        rec.log_trajectories(1, [{"traj_id": "whole", "group": np.float32(7.0)}])
        rec.log_trajectories(2, {"traj_id": ["a", "b"], "group": ["5", "x"]})  # as a table would be cast
        rec.log_trajectories(3, pd.DataFrame({"traj_id": ["c", "d", "e", "f"], "group": ["1", 2, "x", None]}))
        rec.log_trajectories(4, pa.table({"traj_id": ["g", "h"], "group": [[1], [2]]}))  # no cast at all
    assert rec.status()["bad_rows"] == 4 + 1 + 1 + 2
    rows = RunReader(run).read("trajectories", ["step", "traj_id", "group"]).to_pylist()
    assert [(r["step"], r["traj_id"], r["group"]) for r in rows] == [
        (1, "whole", 7),
        (2, "a", 5),
        (3, "c", 1),
        (3, "d", 2),
        (3, "f", None),
    ]


def test_whole_numbers_stay_exact_and_gaps_stay_missing_in_every_form(tmp_path):
    big = 12345678901234567  # past 2**53: a float would round it
    run = str(tmp_path / "run")
    with Recorder(run) as rec:
        rec.log_trajectories(0, [{"traj_id": "a", "group": str(big)}, {"traj_id": "b", "group": decimal.Decimal(big)}])
        rec.log_trajectories(1, [{"traj_id": "c", "group": True, "reward": "0.5", "aborted": "1"}])
        rec.log_trajectories(2, {"traj_id": ["d", "e"], "group": [1.0, float("nan")]})  # a float column with a gap
        engine = pd.Series(["\ud800", "e1", None], dtype=object)  # pandas' own strings refuse a lone surrogate
        frame = pd.DataFrame({"traj_id": ["f", "g", "h"], "group": ["1", pd.NA, "x"], "engine": engine})
        rec.log_trajectories(3, frame)
        rec.log_trajectories(4, pd.DataFrame([["i", 5, 6]], columns=["traj_id", "group", "group"]))  # a name twice
    assert rec.status()["bad_rows"] == 1  # "x" alone
    rows = RunReader(run).read("trajectories", ["step", "traj_id", "group", "reward", "aborted", "engine"]).to_pylist()
    got = {r["traj_id"]: r for r in rows}
    assert got["a"]["group"] == big and got["b"]["group"] == big
    assert (got["c"]["group"], got["c"]["reward"], got["c"]["aborted"]) == (1, 0.5, True)
    assert (got["d"]["group"], got["e"]["group"]) == (1, None)
    assert (got["f"]["group"], got["f"]["engine"], got["g"]["group"], got["g"]["engine"]) == (1, "?", None, "e1")
    assert "h" not in got and got["i"]["group"] == 5


def test_a_change_too_small_to_show_has_no_sign():
    from rlscope.report._format import secs, signed_secs

    assert (signed_secs(-0.001), signed_secs(0.001), signed_secs(-41.26), signed_secs(float("nan"))) == (
        "0 s",
        "0 s",
        "-41.3 s",
        "n/a",
    )
    assert secs(1.23e-05) == "0 s" and secs(1449.4) == "1,449 s"


def test_a_mixed_dataframe_column_leaves_the_others_to_arrows_cast(tmp_path):
    run = str(tmp_path / "run")
    frame = pd.DataFrame(
        {
            "traj_id": ["a", "b", "c"],
            "reward_error": ["ok", 404, None],  # mixed: as text
            "aborted": [1.0, 0.0, float("nan")],  # a flag with a gap, cast by Arrow
            "partial": [0, 2, 1],
            "group": pd.Series([1.0, "2", "+5"], dtype=object),  # "+5" Arrow refuses, row dicts alike
        }
    )
    with Recorder(run) as rec:
        rec.log_trajectories(0, frame)
        rec.log_trajectories(1, [{"traj_id": "d", "group": "+5"}])
    assert rec.status()["bad_rows"] == 2
    rows = RunReader(run).read("trajectories", ["traj_id", "reward_error", "aborted", "partial", "group"]).to_pylist()
    assert [tuple(r.values()) for r in rows] == [("a", "ok", True, False, 1), ("b", "404", False, True, 2)]


def test_a_numpy_flag_into_an_integer_column_and_a_table_naming_a_column_twice_are_kept(tmp_path):
    run = str(tmp_path / "run")
    twice = pa.Table.from_arrays([pa.array(["b"]), pa.array([3]), pa.array([4])], names=["traj_id", "group", "group"])
    with Recorder(run) as rec:
        rec.log_trajectories(0, [{"traj_id": "a", "group": np.bool_(True)}])  # as Arrow casts a bool column
        rec.log_trajectories(1, twice)  # the first "group", as for a DataFrame
    assert rec.status()["bad_rows"] == 0
    assert RunReader(run).read("trajectories", ["traj_id", "group"]).to_pylist() == [
        {"traj_id": "a", "group": 1},
        {"traj_id": "b", "group": 3},
    ]


@pytest.mark.parametrize("column", ["finish_time", "submit_time"])
def test_trajectory_times_of_a_clock_are_kept_with_one_warning(tmp_path, caplog, column):
    # time.time() where seconds since the step's rollout began go: the long tail would read a rollout of
    # 57 years (t90 1.8e9 s), so the writer says so, once, and keeps the rows as given
    run = tmp_path / "run"
    now = time.time()
    with caplog.at_level("WARNING", logger="rlscope"), Recorder(run) as rec:
        for step in range(2):
            rec.log_trajectories(step, [{"traj_id": str(i), column: now + i} for i in range(20)])
    warned = [r.getMessage() for r in caplog.records if column in r.getMessage()]
    assert len(warned) == 1 and "seconds since the step's rollout began" in warned[0]
    assert RunReader(run).read("trajectories").num_rows == 40 and rec.status()["bad_rows"] == 0


def test_trajectory_times_since_the_rollout_began_are_not_warned_about(tmp_path, caplog):
    # an agentic rollout of a day is long, not a clock's reading
    with caplog.at_level("WARNING", logger="rlscope"), Recorder(tmp_path / "run") as rec:
        rec.log_trajectories(0, {"traj_id": ["a", "b"], "submit_time": [0.0, 5.0], "finish_time": [30.0, 86400.0]})
    assert not caplog.records
