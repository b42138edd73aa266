"""The Prometheus exporter: values from a run directory, incremental reads, bounded labels, serving.

Each test builds a run with the Recorder (or the simulator), registers the collector in a
fresh ``CollectorRegistry`` and reads values with ``get_sample_value``, as client_python's
own collector tests do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from fully_async_log import fully_async_records, update_metrics
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from rlscope import Recorder
from rlscope.advice.thresholds import (
    REWARD_COLLAPSE_MIN_SAMPLES,
    REWARD_ERROR_WARN,
    REWARD_ZERO_COLLAPSE,
    REWARD_ZERO_RISE_MIN,
)
from rlscope.analyzers import analyze_run, anatomy
from rlscope.cli import main as cli_main
from rlscope.collectors.verl._hook import Hook
from rlscope.collectors.verl_metrics import SUBSTAGES
from rlscope.exporter import METRICS, OTHER, RLScopeCollector, ServeError, sanitize_label, serve
from rlscope.exporter._labels import LabelCap
from rlscope.exporter._state import _SourceRewards
from rlscope.trace.schema import LOGPROB_BIN_EDGES
from rlscope.trace.simulator import simulate
from rlscope.trace.store import write_segment

ROOT = Path(__file__).resolve().parents[1]


def _registry(run_dirs, **kw) -> tuple[CollectorRegistry, RLScopeCollector]:
    registry = CollectorRegistry()
    return registry, RLScopeCollector(run_dirs, registry=registry, min_refresh_s=0, **kw)


@contextlib.contextmanager
def _recording(tmp_path: Path, meta: dict | None = None) -> Iterator[tuple[Recorder, CollectorRegistry]]:
    """A Recorder writing ``tmp_path / "run"`` (with ``meta``) and a registry serving that run, the Recorder closed after."""
    rec = Recorder(tmp_path / "run", meta, flush_interval=60)
    registry, _ = _registry(tmp_path / "run")
    try:
        yield rec, registry
    finally:
        rec.close()


def _value(registry: CollectorRegistry, name: str, run: str = "run", **labels: str) -> float | None:
    return registry.get_sample_value(name, {"run": run, **labels})


def _write_steps(path: Path, rows: list[tuple[int, int, float, str, float]], seq: int) -> None:
    """One steps segment of (step, attempt, time, key, value) rows, logged at the times given."""
    step, attempt, when, key, value = (list(c) for c in zip(*rows, strict=True))
    when = pa.array(when, pa.float64())
    table = pa.table({"step": step, "attempt": pa.array(attempt, pa.int32()), "time": when, "key": key, "value": value})
    write_segment(path, "steps", table, writer_id="test", seq=seq)


def _write_jobs(path: Path, times: list[float], seq: int) -> None:
    """One jobs segment: a job started at each time given."""
    write_segment(path, "jobs", pa.table({"time": pa.array(times, pa.float64())}), writer_id="jobs", seq=seq)


def _trajectories(step: int) -> list[dict]:
    """10 "math" samples (half zero up to step 3, all zero after) and 10 "code" samples (3 errors)."""
    rows = []
    for i in range(10):
        rows.append(
            {
                "traj_id": f"m{step}-{i}",
                "data_source": "math",
                "reward": float(i % 2) if step <= 3 else 0.0,
                "reward_status": "ok",
                "finish_time": float(i + 1),
                "prompt_tokens": 100,
                "response_tokens": 1000,
                "policy_version_start": step - i,
                "trainer_version": step,
            }
        )
        error = i < 3
        rows.append(
            {
                "traj_id": f"c{step}-{i}",
                "data_source": "code",
                "reward": 0.0 if error else 0.5,  # a trainer may fill a failed call with 0: still not a zero
                "reward_status": "error" if error else "ok",
                "reward_error": ("TIMEOUT" if i < 2 else None) if error else None,
                "finish_time": float(i + 1),
                "prompt_tokens": 100,
                "response_tokens": 1000,
                "policy_version_start": step - i,
                "trainer_version": step,
            }
        )
    return rows


def _metrics(step: int) -> dict[str, float]:
    return {
        "timing_s/gen": 10.0 + step,
        "timing_s/update_actor": 5.0,
        "timing_s/step": 20.0,
        "fully_async/trainer/idle_ratio": 0.3,
        "rollouter/idle_ratio": 0.01,  # verl < 0.7.1 spelling
        "actor/entropy": 1.5,
        "critic/score/max": 1.0 if step < 8 else 0.0,  # the last step: every sample scored 0
        "critic/score/min": 0.0,
    }


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Eight steps with timers, idle ratios, trajectories of two sources and a log-prob histogram."""
    path = tmp_path / "run"
    meta = {"precision": "bf16", "model_type": "dense", "split": "6:2", "topology": "async"}
    with Recorder(path, meta, flush_interval=60) as rec:
        for step in range(1, 9):
            rec.log_trajectories(step, _trajectories(step))
            rec.log_step(step, _metrics(step))
            rec.flush()
        rec.log_logprob_delta(8, np.random.default_rng(0).normal(0.0, 1e-3, 20_000))
    return path


def test_progress_timers_and_idle_ratios(run):
    registry, _ = _registry(run)
    assert _value(registry, "rlscope_run_up") == 1.0
    assert _value(registry, "rlscope_last_step") == 8.0
    assert abs(_value(registry, "rlscope_last_step_timestamp_seconds") - time.time()) < 120
    assert _value(registry, "rlscope_step_median_seconds") == 20.0
    assert _value(registry, "rlscope_step_seconds", phase="gen") == 18.0
    assert _value(registry, "rlscope_step_seconds", phase="update_actor") == 5.0
    assert _value(registry, "rlscope_step_seconds", phase="step") == 20.0
    assert _value(registry, "rlscope_idle_ratio", role="trainer") == 0.3
    assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.01
    # verl's reward range of the latest step: max = min, no sample scored differently
    assert (
        _value(registry, "rlscope_reward_score", stat="max")
        == _value(registry, "rlscope_reward_score", stat="min")
        == 0
    )
    assert _value(registry, "rlscope_configured_gpus", role="rollout") == 6.0
    assert _value(registry, "rlscope_configured_gpus", role="train") == 2.0
    assert _value(registry, "rlscope_exporter_refresh_errors_total") == 0.0


def test_an_idle_ratio_outside_zero_to_one_is_neither_served_nor_used(tmp_path, caplog):
    # async 8:8 on 16 GPUs, 100 s steps, forward + training 50 s on the 8 training GPUs. The rollouter's
    # idle ratio is 0.5, 0.2 at step 8 and 1.1 (no share of a version's time) at step 9, the latest: the
    # one served is step 8's. The trainer's 1 + 1e-7 at step 9 is 1 rounded to float32: served as 1.
    # The split: the recent steps 8 and 9 both busy 0.8 x 100 = 80 s (step 9 takes step 8's), T_thr 40 s
    # on all 16 GPUs, T_t 25 s: max(40 x 16/r, 25 x 16/(16 - r)) is 66.7 s at 10:6 against 80 s at 8:8
    # (1.1 read would make step 9 busy -10 s, T_thr 17.5 s and the split 7:9)
    meta = {"gpu": {"type": "H100", "count": 16}, "topology": "fully_async", "split": "8:8"}
    step = {"timing_s/gen": 5.0, "timing_s/old_log_prob": 10.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}
    idle = {s: 0.5 for s in range(1, 10)} | {8: 0.2, 9: 1.1}
    with Recorder(tmp_path / "run", meta=meta) as rec:
        for s in range(1, 10):
            trainer = 1 + 1e-7 if s == 9 else 0.05
            rec.log_step(s, {**step, "rollouter/idle_ratio": idle[s], "fully_async/trainer/idle_ratio": trainer})
    registry, _ = _registry(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.2
    assert _value(registry, "rlscope_idle_ratio", role="trainer") == 1.0
    assert _value(registry, "rlscope_recommended_gpus", role="rollout") == 10.0
    assert _value(registry, "rlscope_recommended_gpus", role="train") == 6.0
    (said,) = [r.getMessage() for r in caplog.records if "idle_ratio" in r.getMessage()]
    assert "fully_async/rollouter/idle_ratio" in said and "1.1 at step 9" in said and "outside [0, 1]" in said


def test_an_idle_ratio_logged_as_nan_or_inf_is_warned_about_once_as_out_of_range(tmp_path, caplog):
    # NaN and inf are no share of time either: the rollouter's idle ratio is 0.3 at step 1, NaN at steps
    # 2 and 4 and 0.4 at step 3; the trainer's 0.1 at step 1 and inf at step 4. Each is read as not logged
    # (step 3's 0.4 and step 1's 0.1 are served) and named once, with its first such value and step
    with Recorder(tmp_path / "run", meta={"topology": "fully_async"}) as rec:
        for s, (rollouter, trainer) in enumerate([(0.3, 0.1), (math.nan, 0.1), (0.4, 0.1), (math.nan, math.inf)], 1):
            rec.log_step(s, {"timing_s/step": 100.0, "rollouter/idle_ratio": rollouter, "trainer/idle_ratio": trainer})
    registry, _ = _registry(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.4
        assert _value(registry, "rlscope_idle_ratio", role="trainer") == 0.1
    said = sorted(r.getMessage() for r in caplog.records if "idle_ratio" in r.getMessage())
    assert len(said) == 2
    assert "fully_async/rollouter/idle_ratio logged nan at step 2 (attempt 0), outside [0, 1]" in said[0]
    assert "fully_async/trainer/idle_ratio logged inf at step 4 (attempt 0), outside [0, 1]" in said[1]


def _share_warnings(caplog, key: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if key in r.getMessage()]


def test_an_occupancy_share_outside_zero_to_one_is_not_used_and_is_warned_about_once(tmp_path, caplog):
    # async 8:8 on 16 GPUs, 100 s steps, forward + training 50 s on the 8 training GPUs, the rollout pool's
    # busy time from verl's occupancy share alone: 0.5, 0.8 at step 8, -0.2 at step 5 and 1.3 at step 9 (no
    # share of a version's time). The split: the recent steps 8 and 9 both busy 0.8 x 100 = 80 s (step 9
    # takes step 8's), T_thr 40 s on all 16 GPUs, T_t 25 s: max(40 x 16/r, 25 x 16/(16 - r)) is 66.7 s at
    # 10:6 against 80 s at 8:8 (1.3 read would make step 9 busy 130 s, T_thr 52.5 s and the split 11:5).
    # The share is named once, by its first value outside [0, 1], as the idle ratios are
    meta = {"gpu": {"type": "H100", "count": 16}, "topology": "fully_async", "split": "8:8"}
    step = {"timing_s/gen": 5.0, "timing_s/old_log_prob": 10.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}
    share = {s: 0.5 for s in range(1, 10)} | {5: -0.2, 8: 0.8, 9: 1.3}
    key = "dynamic_resource/rollout_resource_utilization"
    with Recorder(tmp_path / "run", meta=meta) as rec:
        for s in range(1, 10):
            rec.log_step(s, {**step, key: share[s]})
    registry, _ = _registry(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_recommended_gpus", role="rollout") == 10.0
        assert _value(registry, "rlscope_recommended_gpus", role="train") == 6.0
    (said,) = _share_warnings(caplog, key)
    assert f"{key} logged -0.2 at step 5 (attempt 0), outside [0, 1]" in said
    assert analyze_run(str(tmp_path / "run")).topology.out_of_range == {key: ((5, -0.2), (9, 1.3))}


def test_an_out_of_range_share_that_a_later_attempt_redid_is_not_warned_about(tmp_path, caplog):
    # attempt 0 logs the rollouter's idle ratio 0.5 up to step 8 (0.2 there) and 1.1 at step 9, then crashes;
    # resumed from step 8's checkpoint, attempt 1 of step 9 logs 0.4, and step 10 (attempt 0, new) 0.3, then
    # step 11 1.2. Diagnose counts step 11 alone: a step's latest attempt decides. An exporter that read
    # attempt 0 before the resume warned about step 9, naming the attempt: the redo in range withdraws that
    # warning, and step 11's is warned about anew. One that reads the run at once warns about step 11 alone
    key = "fully_async/rollouter/idle_ratio"
    path = tmp_path / "run"
    registry, _ = _registry(path)
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        with Recorder(path, meta={"topology": "fully_async"}) as rec:
            for s in range(1, 10):
                rec.log_step(s, {"timing_s/step": 100.0, key: {8: 0.2, 9: 1.1}.get(s, 0.5)})
        assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.2
        (said,) = _share_warnings(caplog, key)
        assert f"{key} logged 1.1 at step 9 (attempt 0), outside [0, 1]" in said
        with Recorder(path) as rec:
            rec.log_step(9, {"timing_s/step": 100.0, key: 0.4}, attempt=1)
            rec.log_step(10, {"timing_s/step": 100.0, key: 0.3})
        assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.3
        said = _share_warnings(caplog, key)
        assert len(said) == 2
        assert f"{key} at step 9 was logged in [0, 1] by attempt 1" in said[1]
        assert "attempt 0's 1.1" in said[1]
        with Recorder(path) as rec:
            rec.log_step(11, {"timing_s/step": 100.0, key: 1.2})
        assert _value(registry, "rlscope_idle_ratio", role="rollouter") == 0.3
        said = _share_warnings(caplog, key)
        assert len(said) == 3
        assert f"{key} logged 1.2 at step 11 (attempt 0), outside [0, 1]" in said[2]
        caplog.clear()
        fresh, _ = _registry(path)
        assert _value(fresh, "rlscope_idle_ratio", role="rollouter") == 0.3
    (said,) = _share_warnings(caplog, key)
    assert f"{key} logged 1.2 at step 11 (attempt 0), outside [0, 1]" in said
    assert analyze_run(str(path)).topology.out_of_range == {key: ((11, 1.2),)}


def test_a_crashed_attempts_share_read_after_its_redo_is_not_warned_about(tmp_path, caplog):
    # the crashed process's last flush (step 9, attempt 0: the trainer's idle ratio 1.1, logged at t=900)
    # lands after the resumed one's (step 9, attempt 1: 0.4 at t=1000): the redo stands, served and read
    # by diagnose, and the crashed attempt's value is no warning, read before or after it
    key = "fully_async/trainer/idle_ratio"
    path = tmp_path / "run"
    Recorder(path, meta={"topology": "fully_async"}).close()
    _write_steps(path, [(8, 0, 800.0, "timing_s/step", 100.0), (8, 0, 800.0, key, 0.2)], seq=0)
    _write_steps(path, [(9, 1, 1000.0, "timing_s/step", 100.0), (9, 1, 1000.0, key, 0.4)], seq=1)
    registry, _ = _registry(path)
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_idle_ratio", role="trainer") == 0.4
        write_segment(  # another writer's segment, read at the next scrape
            path,
            "steps",
            pa.table(
                {
                    "step": [9, 9],
                    "attempt": pa.array([0, 0], pa.int32()),
                    "time": [900.0, 900.0],
                    "key": ["timing_s/step", key],
                    "value": [100.0, 1.1],
                }
            ),
            writer_id="crashed",
            seq=0,
        )
        assert _value(registry, "rlscope_idle_ratio", role="trainer") == 0.4
        fresh, _ = _registry(path)
        assert _value(fresh, "rlscope_idle_ratio", role="trainer") == 0.4
    assert _share_warnings(caplog, key) == []
    assert analyze_run(str(path)).topology.out_of_range == {}


def test_a_share_its_attempt_also_logged_in_range_is_not_warned_about(tmp_path, caplog):
    # step 3 logged the occupancy share twice under one attempt, 1.4 and then 0.6: diagnose reads 0.6 and
    # counts no value outside [0, 1], nor does the exporter (read at once, or 1.4 first and 0.6 at the
    # next scrape: its warning is then withdrawn)
    key = "dynamic_resource/rollout_resource_utilization"
    path = tmp_path / "run"
    Recorder(path, meta={"topology": "fully_async"}).close()
    _write_steps(path, [(3, 0, 300.0, "timing_s/step", 100.0), (3, 0, 300.0, key, 1.4)], seq=0)
    _write_steps(path, [(3, 0, 301.0, key, 0.6)], seq=1)
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(_registry(path)[0], "rlscope_run_up") == 1.0
    assert _share_warnings(caplog, key) == []
    assert analyze_run(str(path)).topology.out_of_range == {}
    shutil.rmtree(path / "steps")
    _write_steps(path, [(3, 0, 300.0, "timing_s/step", 100.0), (3, 0, 300.0, key, 1.4)], seq=0)
    registry, _ = _registry(path)
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_run_up") == 1.0
        _write_steps(path, [(3, 0, 301.0, key, 0.6)], seq=1)
        assert _value(registry, "rlscope_run_up") == 1.0
    first, withdrawn = _share_warnings(caplog, key)
    assert f"{key} logged 1.4 at step 3 (attempt 0), outside [0, 1]" in first
    # the same attempt read both: its value in range reads, not "attempt 0, not attempt 0's"
    assert f"{key} at step 3 was also logged in [0, 1] by attempt 0, which reads it, not its 1.4" in withdrawn


def test_flat_steps_count_the_latest_steps_in_a_row_whose_samples_scored_the_same(tmp_path):
    path = tmp_path / "run"

    def score(step: int, low: float, attempt: int = 0) -> None:
        with Recorder(path) as rec:
            rec.log_step(
                step, {"timing_s/step": 1500.0, "critic/score/max": 1.0, "critic/score/min": low}, attempt=attempt
            )

    registry, _ = _registry(path)
    for step in range(1, 12):
        score(step, 0.0)
    assert _value(registry, "rlscope_reward_flat_steps") == 0.0
    score(12, 1.0)  # one step whose every sample scored 1
    assert _value(registry, "rlscope_reward_flat_steps") == 1.0
    score(13, 1.0)
    assert _value(registry, "rlscope_reward_flat_steps") == 2.0
    score(13, 0.0, attempt=1)  # resumed from step 12's checkpoint, step 13 again, with a spread
    assert _value(registry, "rlscope_reward_flat_steps") == 0.0
    score(14, 1.0)
    assert _value(registry, "rlscope_reward_flat_steps") == 1.0


@pytest.mark.parametrize("step_timer", [True, False])
def test_a_resume_that_goes_back_past_the_kept_steps_is_what_they_hold(tmp_path, step_timer):
    # attempt 0 logs steps 1-200 a minute apart (150 s generation, 50 s training on 16:16, rewards
    # spread) and crashes; attempt 1 resumes from step 100's checkpoint and redoes steps 101-140,
    # 90 s apart (110 s generation, 90 s training, a 250 s step by verl's timer), every sample scoring 1
    path, t0 = tmp_path / "run", time.time() - 30_000
    meta = {"topology": "separated", "split": {"rollout": 16, "train": 16}, "gpu": {"type": "H100", "count": 32}}
    with Recorder(path, meta):
        pass

    def record(step: int, attempt: int, when: float) -> list[tuple[int, int, float, str, float]]:
        gen, train, low = (150.0, 50.0, 0.0) if attempt == 0 else (110.0, 90.0, 1.0)
        metrics = {"timing_s/gen": gen, "timing_s/update_actor": train}
        metrics |= {"critic/score/max": 1.0, "critic/score/min": low}
        if step_timer:
            metrics["timing_s/step"] = 200.0 if attempt == 0 else 250.0
        return [(step, attempt, when, key, value) for key, value in metrics.items()]

    _write_steps(path, [row for s in range(1, 201) for row in record(s, 0, t0 + 60.0 * s)], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 200.0
    for s in range(101, 141):
        _write_steps(path, record(s, 1, t0 + 15_000 + 90.0 * s), s)
        assert _value(registry, "rlscope_last_step") == s
    assert _value(registry, "rlscope_reward_flat_steps") == 40.0  # steps 101-140: the redo alone
    # the steps kept are the redone ones: attempt 0's above 100 are forgotten, and those below were
    # not kept past the first scrape (it kept the last 64 steps, 137-200)
    if step_timer:
        assert _value(registry, "rlscope_step_median_seconds") == 250.0
    else:  # 39 intervals of 90 s
        assert _value(registry, "rlscope_step_median_seconds") == 90.0
        # the analyzers' last steps are the redone ones: 110 s + 90 s on 16:16 is balanced (as in
        # test_a_split_is_recommended_only_for_a_gain_diagnose_would_report); 150 s + 50 s was not
        served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
        assert served == (16.0, 16.0)


def test_a_validation_logged_alone_is_no_step(tmp_path):
    # verl's val_before_train logs step 0's validation metrics on their own before the first step
    path, t0 = tmp_path / "run", time.time() - 1600
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_steps(path, [(0, 0, t0, "val-core/gsm8k/reward/mean@1", 0.31), (0, 0, t0, "val-aux/num_turns/mean", 1.0)], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") is None
    assert _value(registry, "rlscope_last_step_timestamp_seconds") is None
    assert _value(registry, "rlscope_step_median_seconds") is None
    assert _value(registry, "rlscope_validation_timestamp_seconds") == t0
    # the first step, 25 minutes long, is logged 1500 s after the validation
    _write_steps(path, [(1, 0, t0 + 1500, "timing_s/gen", 1200.0), (1, 0, t0 + 1500, "timing_s/step", 1500.0)], 2)
    assert _value(registry, "rlscope_last_step") == 1.0
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 1500
    assert _value(registry, "rlscope_step_median_seconds") == 1500.0
    assert _value(registry, "rlscope_validation_timestamp_seconds") is None


@pytest.mark.parametrize(
    ("record", "a_step"),
    [
        ({"val-core/gsm8k/reward/mean@1": 0.5}, False),
        ({"val-core/gsm8k/reward/mean@1": 0.5, "timing_s/testing": 50.0}, False),  # verl times its validation
        ({"timing_s/testing": 50.0}, False),
        ({"timing_s/save_checkpoint": 20.0}, False),  # a checkpoint saved on its own
        ({"timing/testing": 50.0, "timing_s/step": 0.0}, False),  # a step timer of 0 timed nothing
        ({"timing_s/testing": 50.0, "timing_s/step": 55.0}, True),  # a step that validated
        ({"timing_s/save_checkpoint": 20.0, "timing_s/gen": 100.0}, True),
        # a validation profiled as verl profiles a step (marked_timer start_profile / stop_profile)
        (
            {
                "val-core/gsm8k/reward/mean@1": 0.5,
                "timing_s/start_profile": 0.01,
                "timing_s/testing": 50.0,
                "timing_s/stop_profile": 0.02,
            },
            False,
        ),
        ({"rollouter/validate_time": 42.0}, False),  # verl's fully async val_before_train logs it alone
    ],
)
def test_a_record_is_a_step_as_the_step_anatomy_counts_it(tmp_path, record, a_step):
    # steps 1-7 a minute apart, then step 8's record alone
    path, t0 = tmp_path / "run", time.time() - 1000
    with Recorder(path, {"topology": "colocated"}):
        pass
    timers = {"timing_s/gen": 40.0, "timing_s/update_actor": 15.0, "timing_s/step": 60.0}
    rows = [(s, 0, t0 + 60.0 * s, k, v) for s in range(1, 8) for k, v in timers.items()]
    rows += [(8, 0, t0 + 480.0, k, v) for k, v in record.items()]
    _write_steps(path, rows, 1)
    registry, _ = _registry(path)
    last = 8 if a_step else 7
    assert _value(registry, "rlscope_last_step") == last
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 60.0 * last
    assert _value(registry, "rlscope_validation_timestamp_seconds") == (None if a_step else t0 + 480.0)
    assert max(anatomy.analyze(path).seconds.index) == last  # the step anatomy of diagnose agrees
    phases = {s.labels["phase"] for f in registry.collect() for s in f.samples if s.name == "rlscope_step_seconds"}
    # the last step's own timers: step 7's, not a validation's or checkpoint's logged alone
    assert phases == ({k.removeprefix("timing_s/") for k in record} if a_step else {"gen", "update_actor", "step"})


def test_a_run_without_a_jobs_table_starts_when_meta_json_was_written_until_its_first_step(tmp_path):
    # written by an older rlscope: a job started two hours ago (its GPU sampler has run since) and has
    # logged no step
    path = tmp_path / "run"
    with Recorder(path, {"topology": "colocated"}):
        pass
    started = time.time() - 7200
    os.utime(path / "meta.json", (started, started))
    gpu = {"time": [started + 60.0 * i for i in range(120)], "host": ["h"] * 120, "util_pct": [0.0] * 120}
    write_segment(path, "gpu", pa.table({**gpu, "gpu": pa.array([0] * 120, pa.int32())}), writer_id="g", seq=1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") is None
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == pytest.approx(started)
    # it is resumed: the new job writes meta.json as it starts
    with Recorder(path, {"split": {"rollout": 4, "train": 4}}):
        pass
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == pytest.approx(time.time(), abs=60)
    # after a step meta.json's time is no job's start (any process's Recorder rewrites it)
    _write_steps(path, [(1, 0, time.time(), "timing_s/step", 60.0)], 1)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None


@pytest.mark.parametrize("bad", [math.nan, time.time() * 1000], ids=["nan", "milliseconds"])
def test_a_jobs_table_with_no_time_leaves_a_first_step_timed_from_meta_json(tmp_path, bad):
    # a job start written with no time (NaN), or in the future (milliseconds), by a writer other than
    # the Recorder (which records its call's time instead) says nothing of when the job started: a run
    # that hangs in its first step is still timed from when meta.json was written (two hours ago), not never
    path, written = tmp_path / "run", time.time() - 7200
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_jobs(path, [bad], 0)
    os.utime(path / "meta.json", (written, written))
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == pytest.approx(written)
    # a job start with a time takes over from it
    _write_jobs(path, [written + 60], 1)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == written + 60


def test_a_first_step_is_timed_from_its_job_s_start_not_meta_json(tmp_path):
    # the driver logs its job's start two hours ago; a worker's Recorder rewrites meta.json later
    path, started = tmp_path / "run", time.time() - 7200
    with Recorder(path, {"topology": "colocated"}) as rec:
        rec.log_job_start(started)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == started
    with Recorder(path, {"split": {"rollout": 4, "train": 4}}):
        pass
    assert _value(registry, "rlscope_configured_gpus", role="train") == 4.0  # meta.json was read again
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == started
    # its first step ends the job's warm-up: the step times the run from then on
    _write_steps(path, [(1, 0, started + 1500, "timing_s/step", 1500.0)], 1)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == started + 1500


def test_a_resumed_job_is_timed_from_its_first_start_since_the_last_step(tmp_path):
    # steps 1-10 a minute apart; a crash after step 10 (at t0 + 600); verl resumes from the step-7
    # checkpoint without validating at t0 + 900, and the driver crashes in its warm-up and restarts at
    # t0 + 2100 and t0 + 3300
    path, t0 = tmp_path / "run", time.time() - 7200
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_jobs(path, [t0 - 300], 1)
    _write_steps(path, [(s, 0, t0 + 60.0 * s, "timing_s/step", 60.0) for s in range(1, 11)], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None  # the first job logged steps
    for seq, start in enumerate((900, 2100, 3300), 2):
        _write_jobs(path, [t0 + start], seq)
        assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 900
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 600
    assert _value(registry, "rlscope_step_median_seconds") == 60.0
    fresh, _ = _registry(path)  # an exporter started now reads all at once: the same start
    assert _value(fresh, "rlscope_job_start_timestamp_seconds") == t0 + 900
    # the resumed job's first step (step 8 again) ends its warm-up; a later job start is a new attempt
    _write_steps(path, [(8, 1, t0 + 3400, "timing_s/step", 60.0)], 2)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None
    assert _value(registry, "rlscope_last_step") == 8.0
    _write_jobs(path, [t0 + 4000, t0 + 3300], 5)  # and an older one read late
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 4000


def test_a_job_start_in_the_future_holds_off_no_alert(tmp_path):
    # steps 1-10 a minute apart, the last 10 minutes ago; a writer logs its job's start in milliseconds,
    # another on a host an hour ahead: served, either would stop the stall clock (now - start < 0) and
    # the GPU-idle alert until a step came after it (milliseconds: never)
    path, now = tmp_path / "run", time.time()
    with Recorder(path, {"topology": "colocated"}):
        pass
    t0 = now - 1200
    _write_steps(path, [(s, 0, t0 + 60.0 * s, "timing_s/step", 60.0) for s in range(1, 11)], 1)
    _write_jobs(path, [now * 1000, now + 3600], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 600
    # a start up to a minute ahead (clock skew) is served; the future ones still count for nothing
    _write_jobs(path, [now + 30], 2)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == now + 30


def _stepped_until(path: Path, last: float) -> CollectorRegistry:
    """A colocated run of ten 60 s steps a minute apart, the last logged at ``last``; its exporter's registry."""
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_steps(path, [(s, 0, last - 600 + 60.0 * s, "timing_s/step", 60.0) for s in range(1, 11)], 1)
    return _registry(path)[0]


def test_a_relaunch_long_after_a_stalled_job_gets_its_own_clock_a_crash_loop_keeps_its_first(tmp_path):
    # steps of 60 s (limit of a job with no step: max(1 h, 4 x 60 s) = 1 h; a relaunch gap of 1 h and
    # twice the alert's 5 minutes = 70 min); after the last step a job starts at t0 and never steps
    path, t0 = tmp_path / "run", time.time() - 8 * 3600
    registry = _stepped_until(path, t0 - 60)
    served = []
    # a crash loop restarting every 20 minutes, then every 65 (slow restarts, still under 70 min): one clock
    for seq, start in enumerate((0, 1200, 2400, 3600, 7500, 11400), 1):
        _write_jobs(path, [t0 + start], seq)
        served.append(_value(registry, "rlscope_job_start_timestamp_seconds"))
    assert served == [t0] * 6
    # the job is left stalled (paged); relaunched 71 minutes after the last start: its own clock
    _write_jobs(path, [t0 + 11400 + 4260], 7)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 15660
    # which its own restarts keep (its warm-up crashed twice), as a fresh exporter serves it too
    _write_jobs(path, [t0 + 15660 + 600, t0 + 15660 + 1200], 8)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 15660
    assert _value(_registry(path)[0], "rlscope_job_start_timestamp_seconds") == t0 + 15660


def test_a_relaunch_after_a_crash_loop_of_hundreds_of_restarts_gets_its_own_clock(tmp_path):
    # after the last step a driver restarts every 10 s for an hour (360 starts, more than are kept),
    # stalls; 2 hours after its last restart it is relaunched
    path, t0 = tmp_path / "run", time.time() - 8 * 3600
    registry = _stepped_until(path, t0 - 60)
    _write_jobs(path, [t0 + 10.0 * i for i in range(360)], 1)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0
    relaunch = t0 + 3590 + 7200
    _write_jobs(path, [relaunch], 2)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == relaunch
    assert _value(_registry(path)[0], "rlscope_job_start_timestamp_seconds") == relaunch


def test_a_run_of_long_steps_relaunches_on_its_own_limit(tmp_path):
    # steps of 40 minutes: a job with no step is stalled after 4 x 40 min = 160 min, so a start 2 h
    # after the one before is a restart of the same stalled attempt, 171 minutes a relaunch
    path, t0 = tmp_path / "run", time.time() - 8 * 3600
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_steps(path, [(s, 0, t0 - 2400 * (4 - s), "timing_s/step", 2400.0) for s in range(1, 4)], 1)
    registry, _ = _registry(path)
    _write_jobs(path, [t0 + 60, t0 + 60 + 7200], 1)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 60
    _write_jobs(path, [t0 + 60 + 7200 + 171 * 60], 2)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 60 + 7200 + 171 * 60


def test_a_job_start_before_its_validation_leaves_the_clock_to_it_until_the_job_restarts(tmp_path):
    # a resume with val_before_train: the job starts, then validates the checkpoint step on its own
    path, t0 = tmp_path / "run", time.time() - 7200
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_steps(path, [(s, 0, t0 + 60.0 * s, "timing_s/step", 60.0) for s in (1, 2, 3)], 1)
    _write_jobs(path, [t0 + 900], 1)
    _write_steps(path, [(3, 0, t0 + 1000, "val-core/math/acc/mean@1", 0.5)], 2)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_validation_timestamp_seconds") == t0 + 1000
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None
    # it crashes after the validation and restarts: a job that failed once without training, timed
    # from the first restart (t0 + 900), whatever the second does; its validation, and a third
    # restart's, do not move the clock (verl validates on every start: a crash loop would never page)
    _write_jobs(path, [t0 + 1500], 2)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 900
    _write_steps(path, [(3, 0, t0 + 1600, "val-core/math/acc/mean@1", 0.5)], 3)
    _write_jobs(path, [t0 + 2100], 3)
    _write_steps(path, [(3, 0, t0 + 2200, "val-core/math/acc/mean@1", 0.5)], 4)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == t0 + 900
    assert _value(_registry(path)[0], "rlscope_job_start_timestamp_seconds") == t0 + 900  # as a fresh exporter
    # the resumed job trains step 4: no job start is served
    _write_steps(path, [(4, 0, t0 + 2300, "timing_s/step", 60.0)], 5)
    assert _value(registry, "rlscope_job_start_timestamp_seconds") is None


def test_a_resumed_run_s_validation_neither_moves_its_last_step_nor_makes_an_interval(tmp_path):
    # steps a minute apart without verl's step timer; the resume validates step 3 on its own at
    # t0 + 1000 s, then trains step 4 at t0 + 1060 s
    path, t0 = tmp_path / "run", time.time() - 2000
    with Recorder(path, {"topology": "colocated"}):
        pass
    _write_steps(path, [(s, 0, t0 + 60.0 * (s - 1), "timing_s/gen", 40.0) for s in (1, 2, 3)], 1)
    _write_steps(path, [(3, 0, t0 + 1000, "val-core/math/acc/mean@1", 0.5)], 2)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 3.0
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 120
    assert _value(registry, "rlscope_step_seconds", phase="gen") == 40.0  # step 3's timers stay served
    assert _value(registry, "rlscope_validation_timestamp_seconds") == t0 + 1000
    _write_steps(path, [(4, 0, t0 + 1060, "timing_s/gen", 40.0)], 3)
    # intervals between step logs: 60, 60 and 940 (the crash)
    assert _value(registry, "rlscope_step_median_seconds") == 60.0
    assert _value(registry, "rlscope_validation_timestamp_seconds") is None


@pytest.mark.parametrize("last", ["negative", "zero step"])
def test_a_stage_timer_that_timed_nothing_is_not_served(tmp_path, last):
    # as in diagnose: negative seconds are a clock's fault, a zero step timer timed nothing
    path = tmp_path / "run"
    with Recorder(path, {"gpu": {"count": 8}}) as rec:
        for step in (1, 2, 3):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 20.0})
        if last == "negative":
            rec.log_step(4, {"timing_s/gen": -3.0, "timing_s/update_actor": 5.0, "timing_s/step": -5.0})
        else:
            rec.log_step(4, {"timing_s/gen": 12.0, "timing_s/update_actor": 5.0, "timing_s/step": 0.0})
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 4.0
    assert _value(registry, "rlscope_step_seconds", phase="gen") == (None if last == "negative" else 12.0)
    assert _value(registry, "rlscope_step_seconds", phase="step") is None
    assert _value(registry, "rlscope_step_seconds", phase="update_actor") == 5.0
    assert _value(registry, "rlscope_step_median_seconds") == 20.0  # over 20, 20, 20: not -5 or 0


def test_only_top_level_stage_timers_are_phases(tmp_path):
    # verl's agent loop logs per-sample statistics under timing_s/agent_loop/ (one a token count),
    # and the rollout worker times sub-stages inside gen: neither is a stage of the step
    metrics = {
        "timing_s/gen": 250.0,
        "timing_s/update_actor": 40.0,
        "timing_s/timing_s/param_sync": 8.0,  # verl's fully async trainer doubles the prefix
        "timing_s/step": 300.0,
        "timing_s/generate_sequences": 240.0,
        "timing/reshard": 3.0,  # an old spelling of a sub-stage
        "timing_s/agent_loop/generate_sequences/max": 240.7,
        "timing_s/agent_loop/tool_calls/mean": 55.0,
        "timing_s/agent_loop/slowest/response_length": 16384.0,
    }
    with Recorder(tmp_path / "run") as rec:
        rec.log_step(1, metrics)
    registry, _ = _registry(tmp_path / "run")
    phases = {
        s.labels["phase"]: s.value for f in registry.collect() for s in f.samples if s.name == "rlscope_step_seconds"
    }
    assert phases == {"gen": 250.0, "update_actor": 40.0, "param_sync": 8.0, "step": 300.0}
    assert sum(v for k, v in phases.items() if k != "step") <= phases["step"]  # the stacked panel fits the step


def _alerting(registry: CollectorRegistry, source: str) -> bool:
    """RLScopeRewardSourceZeroCollapse's condition on the served gauges (the for: aside)."""
    zero = _value(registry, "rlscope_reward_zero_ratio", source=source)
    baseline = _value(registry, "rlscope_reward_zero_ratio_baseline", source=source)
    errors = _value(registry, "rlscope_reward_error_ratio", source=source)
    if zero is None or baseline is None or errors is None:
        return False
    return zero >= REWARD_ZERO_COLLAPSE and zero - baseline >= REWARD_ZERO_RISE_MIN and errors < REWARD_ERROR_WARN


def test_a_lasting_collapse_does_not_become_its_own_baseline(tmp_path):
    # math scores half zeros in steps 1-5, then only zeros in steps 6-20: the collapsed steps that
    # left the 5-step window would make the baseline (25 + 100) / 150 = 0.83 at step 20 and end the alert
    alerting = []
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 21):
            rows = [{"data_source": "math", "reward": 0.0 if step > 5 else float(i % 2)} for i in range(10)]
            rec.log_trajectories(step, [{**r, "reward_status": "ok"} for r in rows])
            rec.flush()
            alerting.append(_alerting(registry, "math"))
    assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 1.0
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="math") == 0.5
    # from step 10 the window is steps 6-10, all zeros, against steps 1-5: half zeros
    assert alerting == [False] * 9 + [True] * 11


@pytest.mark.parametrize(
    "solved",
    [
        {1, 9, 14, 21, 27},  # the first step solved: one step of half zeros is no baseline
        {1, 2, 14, 21, 27},
        {3, 9, 14, 21, 27},
        {12, 13, 14, 15, 16},  # a good stretch in the middle
        {26, 27, 28, 29, 30},  # at the end: the source got easier
    ],
)
def test_a_source_hard_all_along_never_alerts_wherever_its_solved_steps_fall(tmp_path, solved):
    # one group of 8 a step; the policy solves half of it in 5 of 30 steps and nothing otherwise
    alerting = []
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 31):
            rows = [{"data_source": "hard", "reward": float(step in solved and i < 4)} for i in range(8)]
            rec.log_trajectories(step, [{**r, "reward_status": "ok"} for r in rows])
            rec.flush()
            alerting.append(_alerting(registry, "hard"))
            # a baseline of fewer steps than the window is not served: too few steps to say what is normal
            baseline = _value(registry, "rlscope_reward_zero_ratio_baseline", source="hard")
            assert (baseline is None) == (step < 10), step
    assert not any(alerting)
    # no step held out: the baseline is steps 1-25, the window 26-30
    assert _value(registry, "rlscope_reward_zero_ratio", source="hard") == pytest.approx(
        1 - 4 * len(solved & set(range(26, 31))) / 40
    )
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="hard") == pytest.approx(
        1 - 4 * len(solved & set(range(1, 26))) / 200
    )
    assert not [f for f in analyze_run(tmp_path / "run").findings if f.id == "reward-source-zero-collapse"]


def test_a_late_record_of_the_step_before_is_no_resume(tmp_path):
    # a second process logs its metric for the step it saw (s - 1) after the trainer logged step
    # s: no resume went back, so step s's rewards stay, and a collapse from step 16 alerts
    alerting = []
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 31):
            rows = [{"data_source": "math", "reward": 0.0 if step >= 16 else float(i % 2)} for i in range(10)]
            rec.log_trajectories(step, [{**r, "reward_status": "ok"} for r in rows])
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 20.0})
            rec.flush()
            _value(registry, "rlscope_last_step")  # a refresh between the two records
            rec.log_step(step - 1, {"fully_async/rollouter/idle_ratio": 0.1})
            rec.flush()
            alerting.append(_alerting(registry, "math"))
    assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 1.0
    # from step 19 on: the window 15-19 holds 45 zeros of 50 scored (90%) against steps 1-14, half zeros
    assert [s for s, a in enumerate(alerting, 1) if a] == list(range(19, 31))


def test_a_fully_async_run_s_late_training_records_are_no_resume(tmp_path):
    # verl's fully async trainer, through the hook: each sync logs the rollouter's window of
    # update k (with update k's log-prob deltas) under step k, then update k-1's training record,
    # which the hook files under step k-1 (fully_async_log). No resume: the last step stays k,
    # the histogram of step k stays served, and the timers served are the newest update's
    path = tmp_path / "run"
    hook = Hook(str(path))
    registry, _ = _registry(path)
    last, stamps, p50, step_s, expected = [], [], [], [], []
    trained: list[int] = []
    for step, data in fully_async_records(6):
        if "fully_async/rollouter/idle_ratio" in data:  # the sync after update ``step``
            hook.add_logprob(np.full(1000, 0.0013), 0.01)
        hook.on_log(step, data)
        hook.flush()
        if "training/global_step" in data:
            trained.append(int(data["training/global_step"]))
        # the newest update's step timer (updates are numbered from 1, as verl's global steps)
        expected.append(update_metrics(trained[-1], 0)["timing_s/step"] if trained else None)
        last.append(_value(registry, "rlscope_last_step"))
        stamps.append(_value(registry, "rlscope_last_step_timestamp_seconds"))
        p50.append(_value(registry, "rlscope_logprob_abs_delta", quantile="0.5"))
        step_s.append(_value(registry, "rlscope_step_seconds", phase="step"))
    logged = [step for step, _ in fully_async_records(6)]
    assert last == [float(max(logged[: i + 1])) for i in range(len(logged))]
    assert stamps == sorted(stamps)
    assert [_bin(v) for v in p50] == [_bin(0.0013)] * len(logged)
    assert step_s == expected and None not in expected[-3:]
    assert _value(registry, "rlscope_step_median_seconds") == float(
        np.median([update_metrics(u, 0)["timing_s/step"] for u in trained])
    )


def test_a_collapse_stays_out_of_the_baseline_after_it_recovers(tmp_path):
    # half zeros in steps 1-10 and 21-30, only zeros in 11-20 and again from 31: the second
    # collapse is measured against the healthy steps, not against a baseline holding the first
    alerting = []
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 41):
            collapsed = 11 <= step <= 20 or step > 30
            rows = [{"data_source": "math", "reward": 0.0 if collapsed else float(i % 2)} for i in range(10)]
            rec.log_trajectories(step, [{**r, "reward_status": "ok"} for r in rows])
            rec.flush()
            alerting.append(_alerting(registry, "math"))
    assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 1.0
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="math") == 0.5
    # a window of 4 or 5 zero steps (90% or 100% zeros) against 50%: windows ending at steps 14-21 and 34-40
    assert [s for s, a in enumerate(alerting, 1) if a] == [*range(14, 22), *range(34, 41)]


def test_a_resume_that_goes_back_forgets_the_crashed_attempt_s_trajectories(tmp_path):
    # math: half zeros (policy lag 1) in steps 1-15; the crashed attempt scores only zeros (lag 4) in
    # 16-22 and alerts; the job resumes from the checkpoint of step 15 and redoes 16, 17, ... healthy

    def step(s: int, collapsed: bool, attempt: int = 0) -> None:
        rows = [
            {
                "data_source": "math",
                "reward": 0.0 if collapsed else float(i % 2),
                "reward_status": "ok",
                "policy_version_start": s - (4 if collapsed else 1),
                "trainer_version": s,
            }
            for i in range(10)
        ]
        rec.log_trajectories(s, rows)
        rec.log_step(s, {"timing_s/step": 20.0}, attempt=attempt)
        rec.flush()

    redo = {}
    with _recording(tmp_path) as (rec, registry):
        for s in range(1, 23):
            step(s, collapsed=s > 15)
        assert _alerting(registry, "math")
        time.sleep(0.01)
        for s in range(16, 26):
            step(s, collapsed=False, attempt=1)
            redo[s] = (
                _alerting(registry, "math"),
                _value(registry, "rlscope_reward_zero_ratio", source="math"),
                _value(registry, "rlscope_staleness", quantile="0.5"),
            )
    # the crashed attempt's steps 17-22 are forgotten at once: no alert through the redo; the window is
    # the redone steps' (step 16 alone has the crashed attempt's samples too, no gauge without a newer step)
    assert not any(a for a, _, _ in redo.values())
    assert redo[17][1] == 0.5
    assert redo[20][1] == 0.5
    # staleness of the last 2 steps: 16 (10 samples of lag 4, 10 of lag 1) and 17 (10 of lag 1)
    assert redo[17][2] == 1.0
    # the baseline: steps 1-15 and the redone 17-20, all half zeros (16 held out with the collapse)
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="math") == 0.5


def _resumed_rows(step: int, attempt: int) -> list[dict]:
    """10 "math" samples of ``step``: the crashed attempt 0 scores only zeros with a policy lag of 4
    from step 4 on, the resumed attempt 1 half zeros with a lag of 1 (as steps 1-3 did)."""
    crashed = attempt == 0 and step >= 4
    return [
        {
            "traj_id": f"{step}-{attempt}-{i}",
            "data_source": "math",
            "reward": 0.0 if crashed else float(i % 2),
            "reward_status": "ok",
            "finish_time": float(i + 1),
            "policy_version_start": step - (4 if crashed else 1),
            "trainer_version": step,
        }
        for i in range(10)
    ]


def _expected(written: list[tuple[int, int, list[dict]]]) -> tuple[float, float, list[float]]:
    """From the rows written: the reward mean and zero share of the last 5 steps, each step's rows
    of its highest attempt only, and the policy lags of the last 2 such steps."""
    last = {}
    for step, attempt, _ in written:
        last[step] = max(attempt, last.get(step, attempt))
    kept = [(s, r) for s, a, rows in written if a == last[s] for r in rows]
    window = [r["reward"] for s, r in kept if s in sorted(last)[-5:]]
    lags = [r["trainer_version"] - r["policy_version_start"] for s, r in kept if s in sorted(last)[-2:]]
    return float(np.mean(window)), window.count(0.0) / len(window), lags


def test_a_resumed_attempt_s_trajectories_replace_the_crashed_one_s_step_by_step(tmp_path):
    # attempt 0 logs steps 1-5 and crashes; attempt 1 resumes from step 3's checkpoint and writes the
    # trajectories of steps 4 and 5 before the step record of 4 is read, then records 4 and 5, then
    # step 6. Each served window holds each step's highest attempt: the redone rows read before the
    # resumed step records are kept, and no step mixes both attempts
    written: list[tuple[int, int, list[dict]]] = []

    def trajectories(step: int, attempt: int) -> None:
        rows = _resumed_rows(step, attempt)
        rec.log_trajectories(step, rows, attempt=attempt)
        written.append((step, attempt, rows))

    def check(when: str) -> None:
        rec.flush()
        mean, zeros, lags = _expected(written)
        assert _value(registry, "rlscope_reward_mean", source="math") == pytest.approx(mean), when
        assert _value(registry, "rlscope_reward_zero_ratio", source="math") == pytest.approx(zeros), when
        for label, q in (("0.5", 0.5), ("1", 1.0)):
            want = float(np.quantile(lags, q, method="inverted_cdf"))
            assert _value(registry, "rlscope_staleness", quantile=label) == want, when
        # counters: every trajectory read, the crashed attempt's too
        n = sum(len(rows) for _, _, rows in written)
        assert _value(registry, "rlscope_reward_trajectories_total", source="math") == n, when
        assert _value(registry, "rlscope_staleness_count") == n, when

    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 6):
            trajectories(step, 0)
            rec.log_step(step, {"timing_s/step": 20.0})
            check(f"attempt 0, step {step}")
        time.sleep(0.01)
        trajectories(4, 1)
        trajectories(5, 1)
        check("redone rows before the resumed step records")
        rec.log_step(4, {"timing_s/step": 20.0}, attempt=1)
        check("the resumed step 4 recorded")
        rec.log_step(5, {"timing_s/step": 20.0}, attempt=1)
        trajectories(6, 1)
        check("step 6's rows")
        rec.log_step(6, {"timing_s/step": 20.0}, attempt=1)
        check("step 6 recorded")
        trajectories(5, 0)  # a late flush of the crashed attempt: left out of the windows
        check("a late row of the crashed attempt")
        trajectories(6, 1)  # more rows of step 6's attempt: added
        check("more rows of the same attempt")
    # the redone steps 4-6 are half zeros, as steps 2 and 3: no collapse from the crashed attempt
    assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 0.5


@pytest.mark.parametrize("together", [True, False])
def test_a_new_step_after_the_redone_ones_is_kept_under_attempt_0(tmp_path, together):
    # as the verl hook numbers them: attempt 0 logs steps 1-5 and crashes; the resumed process redoes
    # 4 and 5 (on disk: attempt 1) and then generates step 6 (never on disk: attempt 0 again), read
    # in the refresh that reads the redone steps or in a later one. Step 6 is the resumed run's own:
    # held beside the redone steps, not forgotten as a step the crashed attempt left above them
    written: list[tuple[int, int, list[dict]]] = []

    def trajectories(step: int, attempt: int, rows: list[dict]) -> None:
        rec.log_trajectories(step, rows, attempt=attempt)
        written.append((step, attempt, rows))

    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 6):
            trajectories(step, 0, _resumed_rows(step, 0))
        rec.flush()
        assert _value(registry, "rlscope_reward_zero_ratio", source="math") is not None
        trajectories(4, 1, _resumed_rows(4, 1))
        trajectories(5, 1, _resumed_rows(5, 1))
        if not together:
            rec.flush()
            assert _value(registry, "rlscope_reward_zero_ratio", source="math") is not None
        trajectories(6, 0, _resumed_rows(6, 1))  # the resumed run's rows (half zeros, lag 1), under attempt 0
        rec.flush()
        # steps 2-6 of their highest attempts; the crashed 4 and 5 (all zeros, lag 4) left out
        mean, zeros, lags = _expected(written)
        assert _value(registry, "rlscope_reward_mean", source="math") == pytest.approx(mean)
        assert _value(registry, "rlscope_reward_zero_ratio", source="math") == pytest.approx(zeros) == 0.5
        assert _value(registry, "rlscope_staleness", quantile="1") == max(lags) == 1


def _lag_rows(step: int, attempt: int, tag: str, reward: float, lag: int) -> list[dict]:
    """10 "math" samples of ``step`` under ``attempt``, all with ``reward`` and a policy lag of ``lag``."""
    return [
        {
            "traj_id": f"{step}-{attempt}-{tag}-{i}",
            "data_source": "math",
            "reward": reward,
            "reward_status": "ok",
            "finish_time": float(i + 1),
            "policy_version_start": step - lag,
            "trainer_version": step,
        }
        for i in range(10)
    ]


def test_a_resume_that_goes_back_further_than_the_held_steps_keeps_each_redone_step_s_rows(tmp_path):
    # attempt 0 logs steps 1-70 and crashes; attempt 1 resumes from step 0: more steps above the redone
    # step 1 than the exporter holds attempts of. Step 1's redone rows come in two refreshes (lags 1,
    # then 3, rewards 1 then 0): both are step 1's, the second must not replace the first
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 71):
            rec.log_trajectories(step, _lag_rows(step, 0, "a", 0.0, 5), attempt=0)
        rec.flush()
        assert _value(registry, "rlscope_staleness", quantile="1") == 5
        rec.log_trajectories(1, _lag_rows(1, 1, "a", 1.0, 1), attempt=1)
        rec.flush()
        assert _value(registry, "rlscope_staleness", quantile="1") == 1
        rec.log_trajectories(1, _lag_rows(1, 1, "b", 0.0, 3), attempt=1)
        rec.flush()
        # step 1's 20 rows: lags 1 (10) and 3 (10); rewards 1 (10) and 0 (10)
        assert _value(registry, "rlscope_staleness", quantile="0.5") == 1
        assert _value(registry, "rlscope_staleness", quantile="1") == 3
        assert _value(registry, "rlscope_reward_mean", source="math") == 0.5


def test_a_resume_that_goes_back_further_than_the_held_steps_forgets_a_rare_source_s_crashed_steps(tmp_path):
    # "math" on every step, "rare" on every 20th: attempt 0 logs steps 1-200 and crashes; attempt 1
    # resumes from step 100. The crashed steps 120-200 of "rare" are all above the resume: none of
    # them is left in its window (120 is older than the steps whose attempts the exporter holds)
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 201):
            rows = _lag_rows(step, 0, "a", 1.0, 1)
            if step % 20 == 0:
                rows += [{**r, "traj_id": f"rare-{r['traj_id']}", "data_source": "rare", "reward": 0.0} for r in rows]
            rec.log_trajectories(step, rows, attempt=0)
        rec.flush()
        assert _value(registry, "rlscope_reward_mean", source="rare") == 0.0
        rec.log_trajectories(101, _lag_rows(101, 1, "a", 0.5, 1), attempt=1)
        rec.flush()
        assert _value(registry, "rlscope_reward_mean", source="math") == 0.5
        assert _value(registry, "rlscope_reward_mean", source="rare") is None


def test_a_resume_that_goes_back_further_than_the_gone_source_window_keeps_the_reward_gauges(tmp_path):
    # attempt 0 logs steps 1-30 and crashes; attempt 1 resumes from step 5 (25 steps back, more than
    # the REWARD_GONE_STEPS the exporter looks back for a source): the redone step 6 is the run's
    # newest step with trajectories, so its source's gauges are served, from its rows only
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 31):
            rec.log_trajectories(step, _lag_rows(step, 0, "a", 0.0, 5), attempt=0)
        rec.flush()
        assert _value(registry, "rlscope_reward_mean", source="math") == 0.0
        rec.log_trajectories(6, _lag_rows(6, 1, "a", 1.0, 1), attempt=1)
        rec.flush()
        assert _value(registry, "rlscope_reward_mean", source="math") == 1.0
        assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 0.0
        # a late row of the crashed attempt's step 30 is left out, and brings no step back
        rec.log_trajectories(30, _lag_rows(30, 0, "late", 0.0, 5), attempt=0)
        rec.flush()
        assert _value(registry, "rlscope_reward_mean", source="math") == 1.0


@pytest.mark.parametrize("scored", [10, 0])
def test_a_resume_takes_out_of_a_source_s_baseline_only_what_went_into_it(scored):
    # a source scored on even steps only: 2-10 leave the window (into the baseline), 12-20 are in it;
    # samples of step 11, scored half zeros, are read late (a late writer); the run then resumes from
    # the checkpoint of step 10, so 11-20 are the crashed attempt's. The baseline is steps 2-10 again:
    # 5 steps with scores, 5 x `scored` samples, half of them zeros (with scored=0, all errors: none)
    rewards = _SourceRewards()

    def counts(n: int, ok: int) -> np.ndarray:  # [trajectories, scored, reward sum, zeros, errors]
        return np.array([n, ok, ok / 2, ok / 2, n - ok], dtype=float)

    for step in range(2, 21, 2):
        rewards.add(step, counts(10, scored))
    rewards.add(11, counts(4, 4))
    rewards.forget(set(range(11, 21)))
    assert rewards.base_steps == (5 if scored else 0)
    assert rewards.base_scored == 5 * scored
    assert rewards.base_zeros == 5 * scored / 2
    # the redo: 11 and 12-20 again, 10 steps with scores half zeros; 11 leaves the window and is counted
    for step in range(11, 21):
        rewards.add(step, counts(10, 10))
    assert rewards.base_steps == (5 if scored else 0) + 5
    assert rewards.gauges(0)["rlscope_reward_zero_ratio_baseline"] == 0.5


def test_a_source_of_few_samples_a_step_holds_no_chance_zero_steps_out_of_its_baseline(tmp_path):
    # one sample a step, zero on odd steps and, by chance, in 11-15 too: 5 samples in a window are
    # too few to call a collapse, so steps 11-15 stay in the baseline, as diagnose counts them
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 31):
            zero = step % 2 == 1 or 11 <= step <= 15
            rec.log_trajectories(step, [{"data_source": "one", "reward": 0.0 if zero else 1.0, "reward_status": "ok"}])
            rec.flush()
    assert REWARD_COLLAPSE_MIN_SAMPLES > 5
    # the baseline is steps 1-25: 5 odd zeros in 1-10, 11-15, and 5 odd zeros in 16-25
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="one") == pytest.approx(15 / 25)
    # the window, steps 26-30: 27 and 29
    assert _value(registry, "rlscope_reward_zero_ratio", source="one") == pytest.approx(2 / 5)


def test_late_pieces_of_an_old_step_do_not_count_it_again_in_the_baseline(tmp_path):
    # "late": errors only in steps 1-5, 10 scored samples a step in 6-13; then two late scored pieces
    # of step 1, older than the steps kept apart (5-8). Steps 1-8 left the 5-step window, and of them
    # 1, 6, 7 and 8 have scores: 4 steps, too few for a baseline (counting step 1 twice made 5)
    scored = [{"data_source": "late", "reward": float(i % 2), "reward_status": "ok"} for i in range(10)]
    failed = [{"data_source": "late", "reward": None, "reward_status": "error"} for _ in range(10)]
    seen: set[int] = set()
    with _recording(tmp_path) as (rec, registry):
        for step in [*range(1, 14), 1, 1]:
            rec.log_trajectories(step, failed if step <= 5 and step not in seen else scored)
            seen.add(step)
            rec.flush()
            _value(registry, "rlscope_run_up")
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="late") is None


def test_rewards_by_source_tell_errors_from_zeros(run):
    registry, _ = _registry(run)
    # math: last 5 steps (4-8) all zero; the 3 steps before (half zero) are too few for a baseline
    assert _value(registry, "rlscope_reward_zero_ratio", source="math") == 1.0
    assert _value(registry, "rlscope_reward_zero_ratio_baseline", source="math") is None
    assert _value(registry, "rlscope_reward_mean", source="math") == 0.0
    assert _value(registry, "rlscope_reward_error_ratio", source="math") == 0.0
    # code: errors filled with reward 0 are errors, not zeros
    assert _value(registry, "rlscope_reward_zero_ratio", source="code") == 0.0
    assert _value(registry, "rlscope_reward_mean", source="code") == 0.5
    assert _value(registry, "rlscope_reward_error_ratio", source="code") == pytest.approx(0.3)
    assert _value(registry, "rlscope_reward_errors_total", source="code", code="TIMEOUT") == 16.0
    assert _value(registry, "rlscope_reward_errors_total", source="code", code="unknown") == 8.0
    assert _value(registry, "rlscope_reward_errors_total", source="math", code="TIMEOUT") is None
    assert _value(registry, "rlscope_reward_trajectories_total", source="code") == 80.0


def test_a_source_keeps_its_gauges_while_it_appears_and_loses_them_when_gone(tmp_path):
    # "flaky" (2 errors in 4 samples) appears every 8th step up to step 25; "good" in every step
    def rows(step: int) -> list[dict]:
        out = [{"data_source": "good", "reward": 1.0, "reward_status": "ok"}] * 4
        if step % 8 == 1 and step <= 25:
            out += [{"data_source": "flaky", "reward": 1.0, "reward_status": "ok"}] * 2
            out += [{"data_source": "flaky", "reward_status": "error", "reward_error": "TIMEOUT"}] * 2
        return out

    present = []
    with _recording(tmp_path) as (rec, registry):
        for step in range(1, 50):
            rec.log_trajectories(step, rows(step))
            rec.flush()
            present.append(_value(registry, "rlscope_reward_error_ratio", source="flaky") is not None)
    # seen at steps 1, 9, 17, 25: its series holds between them (an alert's for: keeps counting),
    # until the run's last 20 steps with trajectories (26-45 at step 45) hold none of its samples
    assert present == [True] * 44 + [False] * 5
    assert _value(registry, "rlscope_reward_trajectories_total", source="flaky") == 16.0  # counters stay
    assert _value(registry, "rlscope_reward_errors_total", source="flaky", code="TIMEOUT") == 8.0
    assert _value(registry, "rlscope_reward_error_ratio", source="good") == 0.0


@pytest.mark.parametrize(("mean", "share"), [(8000.0, 1 - 8000 * math.log(10) / 32000), (30000.0, None)])
def test_tail_share_estimated_from_lengths_is_served_only_when_known(tmp_path, mean, share):
    # no trajectories: f = 1 - mean ln 10 / max; mean 30000 of 32000 is bunched near the max, no estimate
    lengths = {"response_length/mean": mean, "response_length/max": 32000.0, "timing_s/gen": 600.0}
    with Recorder(tmp_path / "run", flush_interval=60) as rec:
        for step in range(1, 5):
            rec.log_step(step, {**lengths, "timing_s/update_actor": 100.0, "timing_s/step": 700.0})
    registry, _ = _registry(tmp_path / "run")
    assert _value(registry, "rlscope_tail_share") == (None if share is None else pytest.approx(share))


def test_tail_staleness_and_logprob(run):
    registry, _ = _registry(run)
    # finish times 1..10 s: t90 = 9 s, tail 1 s of 10
    assert _value(registry, "rlscope_tail_share") == pytest.approx(0.1)
    # lags 0..9 in each of the last two steps
    assert _value(registry, "rlscope_staleness", quantile="0.5") == 4.0
    assert _value(registry, "rlscope_staleness", quantile="0.9") == 8.0
    assert _value(registry, "rlscope_staleness", quantile="1") == 9.0
    median = np.median(np.abs(np.random.default_rng(0).normal(0.0, 1e-3, 20_000)))
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.5") == pytest.approx(median, rel=0.1)
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.999") > 3 * median
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", precision="bf16", model_type="dense") == 0.01


def _bin(delta: float) -> tuple[float, float]:
    """The log-prob histogram bin holding |delta|: a quantile of tokens all at ``delta`` lies in it."""
    i = int(np.searchsorted(LOGPROB_BIN_EDGES, delta, side="right")) - 1
    return float(LOGPROB_BIN_EDGES[i]), float(LOGPROB_BIN_EDGES[i + 1])


@pytest.mark.parametrize("scrape", ["each step", "once after the resume"])
def test_a_resumed_attempt_replaces_the_crashed_one_in_the_logprob_quantiles(tmp_path, scrape):
    # attempt 0 broke weight sync at step 3 (|delta| 0.05) and crashed; attempt 1 resumed from the
    # step-1 checkpoint with the fix (|delta| 0.0013 again) and redoes steps 2 and 3
    path = tmp_path / "run"
    registry, _ = _registry(path)
    p50 = []
    with Recorder(path, {"precision": "bf16"}) as rec:
        for step, delta in ((1, 0.0013), (2, 0.0013), (3, 0.05)):
            rec.log_step(step, {"timing_s/step": 60.0})
            rec.log_logprob_delta(step, np.full(1000, delta))
            rec.flush()
            if scrape == "each step":
                p50.append(_value(registry, "rlscope_logprob_abs_delta", quantile="0.5"))
    for step in (2, 3):
        with Recorder(path) as rec:
            rec.log_step(step, {"timing_s/step": 60.0}, attempt=1)
            rec.log_logprob_delta(step, np.full(1000, 0.0013))
        p50.append(_value(registry, "rlscope_logprob_abs_delta", quantile="0.5"))
        assert _value(registry, "rlscope_last_step") == step
    # the crashed step 3 while it was the latest, then the resumed steps alone (not mixed with it)
    expected = ([0.0013, 0.0013, 0.05] if scrape == "each step" else []) + [0.0013, 0.0013]
    assert [_bin(v) for v in p50] == [_bin(d) for d in expected]


def test_a_step_redone_by_a_resumed_attempt_is_not_mixed_with_the_crashed_one(tmp_path):
    # the crash came after step 3's histogram, the checkpoint is step 2's: attempt 1 redoes step 3
    path = tmp_path / "run"
    registry, _ = _registry(path)
    with Recorder(path, {"precision": "bf16"}) as rec:
        rec.log_step(3, {"timing_s/step": 60.0})
        rec.log_logprob_delta(3, np.full(1000, 0.05))
    assert _quantile_bin(registry, "0.5") == _bin(0.05)
    with Recorder(path) as rec:
        rec.log_step(3, {"timing_s/step": 60.0}, attempt=1)
        rec.log_logprob_delta(3, np.full(3000, 0.0013))
    # mixed, 3000 tokens at 0.0013 and 1000 at 0.05 would put the 0.9 quantile in 0.05's bin
    assert _quantile_bin(registry, "0.9") == _bin(0.0013)


def _bf16_run(tmp_path: Path) -> tuple[Path, float]:
    """An empty run directory of a bf16 rollout, and a time 1,000 s ago to log its rows from."""
    path = tmp_path / "run"
    with Recorder(path, {"precision": "bf16"}):
        pass
    return path, time.time() - 1000


def _quantile_bin(registry: CollectorRegistry, quantile: str) -> tuple[float, float]:
    """The histogram bin of the served |delta| quantile."""
    return _bin(_value(registry, "rlscope_logprob_abs_delta", quantile=quantile))


def _write_logprob(path: Path, rows: list[tuple[int, float, float, int]], seq: int) -> None:
    """One logprob segment of (step, time, |delta|, tokens) rows: every token of a row at that |delta|."""
    counts = []
    for _, _, delta, n in rows:
        bins = [0] * (len(LOGPROB_BIN_EDGES) - 1)
        bins[int(np.searchsorted(LOGPROB_BIN_EDGES, delta, side="right")) - 1] = n
        counts.append(bins)
    table = pa.table(
        {
            "step": [r[0] for r in rows],
            "time": pa.array([r[1] for r in rows], pa.float64()),
            "n_tokens": [r[3] for r in rows],
            "abs_counts": counts,
            "abs_mean": [r[2] for r in rows],
            "abs_max": [r[2] for r in rows],
        }
    )
    write_segment(path, "logprob", table, writer_id="lp", seq=seq)


def test_a_second_writer_s_late_rows_neither_reset_nor_split_the_step_s_histogram(tmp_path):
    # two writers log each step's deltas; B flushes late: its step-7 rows (logged at t0 + 69) are
    # read after A's step-8 rows (t0 + 80), then its own step-8 rows (t0 + 79)
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(7, 0, t0 + 70, "timing_s/step", 10.0), (8, 0, t0 + 80, "timing_s/step", 10.0)], 1)
    _write_logprob(path, [(8, t0 + 80, 1e-3, 3000)], 1)
    registry, _ = _registry(path)
    assert _quantile_bin(registry, "0.5") == _bin(1e-3)
    _write_logprob(path, [(7, t0 + 69, 0.05, 1000)], 2)
    assert _quantile_bin(registry, "0.5") == _bin(1e-3)  # still step 8
    _write_logprob(path, [(8, t0 + 79, 1e-2, 1000)], 3)
    # step 8 whole: 3000 tokens at 1e-3 and 1000 at 1e-2
    assert _quantile_bin(registry, "0.5") == _bin(1e-3)
    assert _quantile_bin(registry, "0.9") == _bin(1e-2)
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 5000.0  # every token read


@pytest.mark.parametrize("validated", [True, False])
def test_deltas_logged_before_their_step_after_a_resume_are_not_mixed_with_the_crashed_attempt(tmp_path, validated):
    # attempt 0 logs step 2, then step 3's deltas (broken weight sync, |delta| 0.05) and crashes before
    # logging step 3. Attempt 1 resumes from step 2 (validating it first, or not), logs step 3's deltas
    # (0.0013) before step 3's record, then more of them
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(2, 0, t0 + 20, "timing_s/step", 10.0)], 1)
    _write_logprob(path, [(3, t0 + 28, 0.05, 1000)], 1)
    registry, _ = _registry(path)
    assert _quantile_bin(registry, "0.5") == _bin(0.05)
    if validated:  # verl's val_before_train: step 2 logged again, after step 3's deltas: the run went back
        _write_steps(path, [(2, 0, t0 + 90, "val-core/math/acc/mean@1", 0.5)], 2)
    _write_logprob(path, [(3, t0 + 100, 0.0013, 3000)], 2)
    _write_steps(path, [(3, 1, t0 + 110, "timing_s/step", 10.0)], 3)
    _value(registry, "rlscope_last_step")  # a scrape between them
    _write_logprob(path, [(3, t0 + 115, 0.0013, 1000)], 3)
    assert _value(registry, "rlscope_last_step") == 3.0
    # mixed with the crashed attempt's 1000 tokens at 0.05, the 0.9 quantile would be in 0.05's bin. With
    # the validation, the resumed attempt's rows after it are step 3's; without it, a record of attempt 1
    # says only after the fact that the run went back, and the rows after it are
    assert _quantile_bin(registry, "0.9") == _bin(0.0013)
    assert _quantile_bin(registry, "0.999") == _bin(0.0013)


def test_deltas_logged_before_a_redone_step_s_record_are_counted(tmp_path):
    # the Recorder's order, deltas before the step's record: attempt 0 logs steps 1-4 (|delta| 0.05)
    # and crashes; attempt 1 resumes from step 2 and redoes step 3 (0.0013). Step 3's record of
    # attempt 0, logged before step 4's, is the crashed attempt's: the redone rows are the histogram
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(s, 0, t0 + 10 * s, "timing_s/step", 10.0) for s in range(1, 5)], 1)
    _write_logprob(path, [(s, t0 + 10 * s - 2, 0.05, 1000) for s in range(1, 5)], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 4.0
    _write_logprob(path, [(3, t0 + 100, 0.0013, 1000)], 2)
    _write_steps(path, [(3, 1, t0 + 110, "timing_s/step", 10.0)], 2)
    assert _value(registry, "rlscope_last_step") == 3.0
    assert _quantile_bin(registry, "0.5") == _bin(0.0013)
    assert _quantile_bin(registry, "0.999") == _bin(0.0013)


@pytest.mark.parametrize("no_time", [math.nan, None])
def test_a_record_with_no_time_is_never_the_newest(tmp_path, no_time):
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(1, 0, no_time, "timing_s/step", 10.0), (2, 0, t0 + 20, "timing_s/step", 10.0)], 1)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 2.0
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 20
    _write_steps(path, [(3, 0, no_time, "timing_s/step", 10.0), (4, 0, t0 + 40, "timing_s/step", 10.0)], 2)
    assert _value(registry, "rlscope_last_step") == 4.0
    _write_steps(path, [(5, 0, t0 + 50, "timing_s/step", 10.0)], 3)
    assert _value(registry, "rlscope_last_step") == 5.0
    assert _value(registry, "rlscope_last_step_timestamp_seconds") == t0 + 50


@pytest.mark.parametrize("no_time", [math.nan, None])
def test_log_prob_rows_are_counted_beside_records_with_no_time(tmp_path, no_time):
    # step 2's deltas (0.0013) logged at t0 + 15, its record at t0 + 20, and a record of step 1
    # with no time: it says nothing of when the run went back, so the rows are counted
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(1, 0, t0 + 10, "timing_s/step", 10.0)], 1)
    _write_logprob(path, [(2, t0 + 15, 0.0013, 1000)], 1)
    _write_steps(path, [(2, 0, t0 + 20, "timing_s/step", 10.0), (1, 0, no_time, "actor/entropy", 1.0)], 2)
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_last_step") == 2.0
    assert _quantile_bin(registry, "0.5") == _bin(0.0013)
    # a row with no time of step 3 (0.05) is taken as new: the step's histogram
    _write_logprob(path, [(3, no_time, 0.05, 1000)], 2)
    assert _quantile_bin(registry, "0.5") == _bin(0.05)


def test_a_log_prob_row_with_no_time_is_counted(tmp_path):
    path = tmp_path / "run"
    with Recorder(path, {"precision": "bf16"}):
        pass
    _write_steps(path, [(1, 0, None, "timing_s/step", 10.0), (2, 0, None, "timing_s/step", 10.0)], 1)
    _write_logprob(path, [(2, math.nan, 0.0013, 1000)], 1)
    registry, _ = _registry(path)
    assert _quantile_bin(registry, "0.5") == _bin(0.0013)


def test_a_late_log_prob_row_with_no_time_does_not_take_the_histogram(tmp_path):
    # step 5's 1,000 tokens near 1.3e-3, then a row of step 2 with no time (10 tokens near 0.05):
    # an older step's row, whenever it was logged, leaves step 5's histogram as it is
    path, t0 = _bf16_run(tmp_path)
    _write_steps(path, [(s, 0, t0 + 10.0 * s, "timing_s/step", 10.0) for s in range(1, 6)], 1)
    _write_logprob(path, [(5, t0 + 50.0, 0.0013, 1000)], 1)
    registry, _ = _registry(path)
    assert _quantile_bin(registry, "0.5") == _bin(0.0013)
    _write_logprob(path, [(2, math.nan, 0.05, 10)], 2)
    assert _quantile_bin(registry, "0.5") == _bin(0.0013)


def test_a_step_logged_for_ever_keeps_its_histogram_bounded(tmp_path):
    # a Recorder user who never moves the step: its rows are kept apart only up to a bound
    path, t0 = tmp_path / "run", time.time() - 10_000
    with Recorder(path, {"precision": "bf16"}):
        pass
    registry, collector = _registry(path)
    for seq in range(1, 6):
        _write_logprob(path, [(0, t0 + 1000 * seq + i, 1e-3, 1) for i in range(1000)], seq)
        _value(registry, "rlscope_last_step")
    state = collector.states[0]
    assert len(state._logprob_rows) <= 1024
    assert state._logprob_counts.sum() == 5000  # every token of the step
    assert _quantile_bin(registry, "0.5") == _bin(1e-3)


def test_logprob_limit_follows_precision(tmp_path):
    with Recorder(tmp_path / "fp8", {"precision": "fp8", "model_type": "moe"}) as rec:
        rec.log_logprob_delta(1, [0.01, -0.02])
    registry, _ = _registry(tmp_path / "fp8")
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", "fp8", precision="fp8", model_type="moe") == 0.1


def test_a_resumed_job_that_changes_meta_json_is_read_again(tmp_path):
    path = tmp_path / "run"
    meta = {"topology": "separate_async", "split": {"rollout": 21, "train": 11}, "gpu": {"type": "H100", "count": 32}}
    with Recorder(path, meta) as rec:
        rec.log_step(1, {"timing_s/step": 60.0})
        rec.log_logprob_delta(1, np.random.default_rng(0).normal(0.0, 1.5e-2, 20_000))
    registry, _ = _registry(path)
    assert _value(registry, "rlscope_configured_gpus", role="rollout") == 21.0
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", precision="bf16", model_type="dense") == 0.01
    # resumed with the split the alert asked for and an fp8 rollout: the job merges both into meta.json
    with Recorder(path, {"split": {"rollout": 24, "train": 8}, "precision": "fp8"}) as rec:
        rec.log_step(2, {"timing_s/step": 60.0})
    assert _value(registry, "rlscope_last_step") == 2.0
    assert _value(registry, "rlscope_configured_gpus", role="rollout") == 24.0
    assert _value(registry, "rlscope_configured_gpus", role="train") == 8.0
    # fp8's normal gap is ~1e-2, its limit ten times that
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", precision="fp8", model_type="dense") == 0.1
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", precision="bf16", model_type="dense") is None


def test_gpu_latest_sample_and_stale_gpus_dropped(tmp_path):
    now = time.time()
    with Recorder(tmp_path / "run", host="node-a") as rec:
        rec.log_gpu(
            [
                {"time": now - 10, "gpu": 0, "role": "trainer", "util_pct": 90.0},
                {"time": now, "gpu": 0, "role": "trainer", "util_pct": 0.0},
                {"time": now, "gpu": 1, "role": "rollout", "util_pct": 55.0},
                {"time": now - 1000, "host": "node-b", "gpu": 0, "role": "rollout", "util_pct": 40.0},
            ]
        )
    registry, _ = _registry(tmp_path / "run")
    assert _value(registry, "rlscope_gpu_utilization_ratio", host="node-a", gpu="0", role="trainer") == 0.0
    assert _value(registry, "rlscope_gpu_utilization_ratio", host="node-a", gpu="1", role="rollout") == 0.55
    assert _value(registry, "rlscope_gpu_utilization_ratio", host="node-b", gpu="0", role="rollout") is None


def test_gpus_without_utilisation_leave_the_other_tables_served(tmp_path):
    # NVML reports no utilisation for MIG slices: every GPU row has util_pct None
    with Recorder(tmp_path / "mig", host="node-0") as rec:
        rec.log_step(1, {"timing_s/step": 60.0})
        rec.log_gpu([{"time": time.time(), "gpu": g, "role": "actor_rollout", "util_pct": None} for g in range(8)])
        rec.log_logprob_delta(1, np.random.default_rng(0).normal(0.0, 1e-3, 20_000))
    registry, _ = _registry(tmp_path / "mig")
    assert _value(registry, "rlscope_run_up", "mig") == 1.0
    assert _value(registry, "rlscope_exporter_refresh_errors_total", "mig") == 0.0
    assert _value(registry, "rlscope_last_step", "mig") == 1.0
    # the median of |N(0, 1e-3)| is 0.6745e-3
    assert _value(registry, "rlscope_logprob_abs_delta", "mig", quantile="0.5") == pytest.approx(0.6745e-3, rel=0.1)
    names = {s.name for f in registry.collect() for s in f.samples}
    assert "rlscope_gpu_utilization_ratio" not in names


def test_a_table_that_fails_does_not_keep_the_others_from_being_served(run):
    registry, collector = _registry(run)
    state = collector.states[0]

    def broken(rows):
        if rows.num_rows:
            raise ValueError("an aggregate that does not expect these rows")

    state._ingest_trajectories = broken
    with Recorder(run) as rec:
        rec.log_trajectories(9, _trajectories(9))
        rec.log_step(9, _metrics(9))
        rec.log_logprob_delta(9, np.full(1000, 0.5))
    collector.min_refresh_s = 3600  # the values of one refresh
    assert _value(registry, "rlscope_last_step") == 9.0  # steps and log-probs are still read
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.5") == pytest.approx(0.5, rel=0.2)
    assert _value(registry, "rlscope_run_up") == 0.0  # the run was not read without error
    assert _value(registry, "rlscope_exporter_refresh_errors_total") == 1.0  # one failed refresh


def test_a_gpu_whose_sampler_died_goes_stale_while_training_goes_on(tmp_path):
    path, t0 = tmp_path / "run", time.time() - 3600
    with Recorder(path, {"topology": "colocated"}, host="node-0") as rec:
        # the node's only sampler reads GPU 3 idle between phases at t0, then dies
        rec.log_gpu([{"time": t0, "gpu": g, "role": "trainer", "util_pct": 5.0 if g == 3 else 90.0} for g in (2, 3)])
    _write_steps(path, [(1, 0, t0, "timing_s/step", 60.0)], seq=1)
    registry, _ = _registry(path)
    gpu3 = {"host": "node-0", "gpu": "3", "role": "trainer"}
    assert _value(registry, "rlscope_gpu_utilization_ratio", **gpu3) == 0.05
    # training goes on, a step a minute: at t0 + 240 s the reading is 4 minutes old, still served
    _write_steps(path, [(s, 0, t0 + 60.0 * (s - 1), "timing_s/step", 60.0) for s in range(2, 6)], seq=2)
    assert _value(registry, "rlscope_last_step") == 5.0
    assert _value(registry, "rlscope_gpu_utilization_ratio", **gpu3) == 0.05
    # at t0 + 360 s it is 6 minutes old, past the 5 minutes: no GPU of the node is served any more
    _write_steps(path, [(s, 0, t0 + 60.0 * (s - 1), "timing_s/step", 60.0) for s in (6, 7)], seq=3)
    assert _value(registry, "rlscope_last_step") == 7.0
    assert _value(registry, "rlscope_gpu_utilization_ratio", **gpu3) is None
    assert _value(registry, "rlscope_gpu_utilization_ratio", host="node-0", gpu="2", role="trainer") is None


def test_reads_only_new_segments(run):
    registry, collector = _registry(run)
    assert _value(registry, "rlscope_last_step") == 8.0
    state = collector.states[0]
    read = state.reader.read_new
    rows: list[tuple[str, int]] = []

    def spy(table, cursor, columns=None):
        out = read(table, cursor, columns)
        rows.append((table, out.num_rows))
        return out

    state.reader.read_new = spy
    _value(registry, "rlscope_last_step")
    assert all(n == 0 for _, n in rows), rows  # nothing new: nothing read
    rows.clear()
    with Recorder(run, flush_interval=60) as rec:
        rec.log_trajectories(9, _trajectories(9))
        rec.log_step(9, _metrics(9))
    assert _value(registry, "rlscope_last_step") == 9.0
    assert dict(rows) == {"steps": len(_metrics(9)), "trajectories": 20, "gpu": 0, "logprob": 0, "jobs": 0}
    assert _value(registry, "rlscope_reward_trajectories_total", source="code") == 90.0
    assert _value(registry, "rlscope_step_seconds", phase="gen") == 19.0


def test_restarted_run_reports_the_step_it_is_on(run):
    registry, _ = _registry(run)
    assert _value(registry, "rlscope_last_step") == 8.0
    with Recorder(run) as rec:  # resumed from the step-5 checkpoint: step 6 again, attempt 1
        rec.log_step(6, {"timing_s/gen": 99.0}, attempt=1)
    assert _value(registry, "rlscope_last_step") == 6.0
    assert _value(registry, "rlscope_step_seconds", phase="gen") == 99.0
    assert _value(registry, "rlscope_step_seconds", phase="update_actor") is None


def test_bounded_and_sanitised_labels(tmp_path):
    rows = [{"data_source": f"source-{i:03d}", "reward": 1.0, "reward_status": "ok"} for i in range(60)]
    rows.append({"data_source": "evil\x00\n\x1b[31m" + "x" * 200, "reward": 1.0, "reward_status": "ok"})
    with Recorder(tmp_path / "run") as rec:
        rec.log_trajectories(1, rows)
    registry, _ = _registry(tmp_path / "run")
    totals = {
        s.labels["source"]: s.value
        for family in registry.collect()
        if family.name == "rlscope_reward_trajectories"
        for s in family.samples
    }
    assert len(totals) == 51 and OTHER in totals
    assert sum(totals.values()) == 61
    assert totals[OTHER] == 11
    assert all(len(label) <= 64 and label.isprintable() for label in totals)


def test_sanitize_label():
    assert sanitize_label("a\x00b\tc\u200bd ") == "abcd"
    assert sanitize_label(None) == "unknown" and sanitize_label(" \n ") == "unknown"
    long_a, long_b = sanitize_label("q" * 100 + "a"), sanitize_label("q" * 100 + "b")
    assert len(long_a) == 64 and long_a != long_b
    cap = LabelCap(2)
    assert [cap(v) for v in ("a", "b", "c", "a", "b\x00")] == ["a", "b", OTHER, "a", "b"]


def test_missing_run_directory_is_retried(tmp_path):
    registry, _ = _registry(tmp_path / "later")
    assert _value(registry, "rlscope_run_up", "later") == 0.0
    assert _value(registry, "rlscope_last_step", "later") is None
    with Recorder(tmp_path / "later") as rec:
        rec.log_step(3, {"timing_s/step": 1.0})
    assert _value(registry, "rlscope_run_up", "later") == 1.0
    assert _value(registry, "rlscope_last_step", "later") == 3.0


def test_corrupt_segment_is_skipped(run):
    (run / "steps" / "part-99999999999999999999-000001-bad.parquet").write_bytes(b"not parquet")
    registry, collector = _registry(run)
    assert _value(registry, "rlscope_run_up") == 1.0
    assert _value(registry, "rlscope_last_step") == 8.0
    assert any("unreadable segment" in w for w in collector.states[0].reader.warnings)


def test_runs_get_unique_labels_and_scrapes_share_a_refresh(run, tmp_path):
    other = tmp_path / "b" / "run"
    with Recorder(other) as rec:
        rec.log_step(2, {"timing_s/step": 1.0})
    registry = CollectorRegistry()
    collector = RLScopeCollector([run, other], registry=registry, min_refresh_s=3600)
    assert [s.run for s in collector.states] == ["run", "run-2"]
    assert _value(registry, "rlscope_last_step", "run") == 8.0
    assert _value(registry, "rlscope_last_step", "run-2") == 2.0
    refreshed = _value(registry, "rlscope_exporter_refresh_seconds")
    with Recorder(run) as rec:
        rec.log_step(9, {"timing_s/step": 1.0})
    assert _value(registry, "rlscope_last_step") == 8.0  # within min_refresh_s: no new read
    assert _value(registry, "rlscope_exporter_refresh_seconds") == refreshed


def test_a_run_exported_by_a_relative_path_is_named_after_its_directory(run, monkeypatch):
    # `rlscope export .` from inside the run directory, or a path that ends in ".."
    monkeypatch.chdir(run)
    registry, collector = _registry(".")
    assert collector.states[0].run == "run"
    assert _value(registry, "rlscope_last_step", "run") == 8.0
    assert RLScopeCollector([run / "sub" / ".."]).states[0].run == "run"


def test_every_metric_is_described_without_reading(tmp_path):
    collector = RLScopeCollector(tmp_path / "nothing-yet")
    assert sorted(f.name for f in collector.describe()) == sorted(m.name.removesuffix("_total") for m in METRICS)
    assert collector.states[0].reader is None


def test_a_colocate_async_run_has_no_split_to_recommend(tmp_path):
    meta = {"gpu": {"type": "H100", "count": 8}, "topology": "colocate_async", "split": {"rollout": 8, "train": 8}}
    with Recorder(tmp_path / "ca", meta=meta) as rec:  # its GPUs take turns: no pools to size
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": 100.0, "timing_s/update_actor": 50.0, "timing_s/step": 152.0})
    registry, _ = _registry(tmp_path / "ca")
    assert _value(registry, "rlscope_last_step", "ca") == 3.0
    assert _value(registry, "rlscope_recommended_gpus", "ca", role="rollout") is None


def test_simulated_pooled_run_recommends_a_split(tmp_path):
    simulate("separated-8b", 2, tmp_path / "sep")
    registry, _ = _registry(tmp_path / "sep")
    rollout = _value(registry, "rlscope_recommended_gpus", "sep", role="rollout")
    train = _value(registry, "rlscope_recommended_gpus", "sep", role="train")
    assert rollout + train == 64 and rollout != 46
    assert 0 < _value(registry, "rlscope_mfu_ratio", "sep") < 1
    names = {s.name for f in registry.collect() for s in f.samples}
    # not async (no idle ratios), no reward errors, 2 steps (no reward history before the last 5),
    # no validation logged on its own, no job started since its last step
    absent = {"rlscope_idle_ratio", "rlscope_reward_errors_total", "rlscope_reward_zero_ratio_baseline"}
    absent |= {"rlscope_validation_timestamp_seconds", "rlscope_job_start_timestamp_seconds"}
    assert {m.name for m in METRICS} - names == absent


@pytest.mark.parametrize(
    ("gen_s", "train_s", "recommended"),
    [
        # on 16:16, step(n_r) = 16 gen / n_r + 16 train / (32 - n_r): 200 s now; 17:15 gives 199.5 s,
        # 0.2% shorter, below SPLIT_GAIN_MIN (5%): not worth a move, the split stays
        (110.0, 90.0, (16, 16)),
        # 20:12 gives 120 + 66.7 = 186.7 s, 6.7% shorter than 200 s: move 4 GPUs to rollout
        (150.0, 50.0, (20, 12)),
    ],
)
def test_a_split_is_recommended_only_for_a_gain_diagnose_would_report(tmp_path, gen_s, train_s, recommended):
    meta = {"topology": "separated", "split": {"rollout": 16, "train": 16}, "gpu": {"type": "H100", "count": 32}}
    with Recorder(tmp_path / "sep", meta) as rec:
        for step in range(1, 9):
            rec.log_step(step, {"timing_s/gen": gen_s, "timing_s/update_actor": train_s, "timing_s/step": 200.0})
    registry, _ = _registry(tmp_path / "sep")
    served = tuple(_value(registry, "rlscope_recommended_gpus", "sep", role=r) for r in ("rollout", "train"))
    assert served == recommended


_ASYNC_16_16 = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}


def _async_step(busy: float, step_s: float = 300.0) -> dict[str, float]:
    """An async step on separate pools of 16:16: the rollout pool busy ``busy`` of the step (verl's
    rollouter idle ratio 1 - busy), forward + training 150 s on the training pool (T_train 75 s on all 32)."""
    return {
        "timing_s/gen": 0.0,
        "timing_s/old_log_prob": 50.0,
        "timing_s/update_actor": 100.0,
        "timing_s/step": step_s,
        "fully_async/rollouter/idle_ratio": 1.0 - busy,
        "fully_async/trainer/idle_ratio": 0.0,
    }


def test_an_async_run_s_split_keeps_the_window_s_first_step_once_past_the_run_s_first(tmp_path, monkeypatch):
    # one job, steps 1-7: step 1 fills the pipeline (busy 450 s of a 600 s step), then the rollout pool's
    # busy share grows 0.1 a step (steps 2-7: 0.2-0.7 of 300 s). A window of 5 holds steps 3-7, none a
    # fill, and the split is of their last quarter, steps 6 and 7: busy 195 s on 16 GPUs, T_thr = 97.5 s
    # on all 32, T_train = 75 s. Async at n_r rollout GPUs: max(97.5 * 32 / n_r, 75 * 32 / (32 - n_r)):
    # 17 -> 183.5 s, 18 -> 173.3 s, 19 -> 184.6 s; 18:14 is 11% shorter than 16:16's 195 s: a move.
    # (Leaving step 3 out, the window's first, would model step 7 alone: 19:13. In the window of 8 the
    # last quarter is 2 steps of 7 or 8 alike, so only a shorter window shows it)
    monkeypatch.setattr("rlscope.exporter._state.WINDOW_STEPS", 5)
    with _recording(tmp_path, _ASYNC_16_16) as (rec, registry):
        rec.log_job_start()
        for step in range(1, 8):
            rec.log_step(step, _async_step(0.75, 600.0) if step == 1 else _async_step(step / 10))
            rec.flush()
            assert _value(registry, "rlscope_last_step") == step
        served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
    assert served == (18.0, 14.0)


def test_a_resumed_job_s_first_step_in_the_window_is_left_out_of_the_split_as_diagnose_does(tmp_path, capsys):
    # job 1 trains steps 1-10 and crashes; job 2 resumes from step 9's checkpoint and redoes step 10
    # under attempt 1, its pipeline filling (busy 450 s of a 600 s step: T_thr 225 s on all 32 GPUs),
    # then trains step 11. Every other step but the run's first is steady: busy 225 s of 300 s on 16,
    # T_thr = 112.5 s on all 32, T_train = 75 s; max(112.5 * 32 / n_r, 75 * 32 / (32 - n_r)): 18 -> 200 s,
    # 19 -> 189.5 s, 20 -> 200 s; 19:13 is 16% shorter than 16:16's 225 s. The window (steps 4-11) less
    # step 10 has steps 9 and 11 last: 19:13. (With the fill among them, T_thr 168.75 s: 22:10)
    with _recording(tmp_path, _ASYNC_16_16) as (rec, registry):
        rec.log_job_start()
        for step in range(1, 11):
            rec.log_step(step, _async_step(0.75, 600.0) if step == 1 else _async_step(0.75))
            rec.flush()
            assert _value(registry, "rlscope_last_step") == step
        rec.log_job_start()
        rec.log_step(10, _async_step(0.75, 600.0), attempt=1)
        rec.log_step(11, _async_step(0.75))
        rec.flush()
        served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
    assert served == (19.0, 13.0)
    # diagnose leaves out the same steps (1 and 10) over the whole run, whose last quarter is steady too
    assert cli_main(["diagnose", str(tmp_path / "run"), "--format", "json"]) == 0
    what_if = {row["topology"]: row for row in json.loads(capsys.readouterr().out)["topology"]["what_if"]}
    assert (what_if["async_streaming"]["n_rollout"], what_if["async_streaming"]["n_train"]) == served


def test_an_imported_log_s_resumed_job_first_step_named_in_meta_is_left_out_of_the_split(tmp_path):
    # the run above as a console log imports it: rows without times, no jobs table, and the resumed
    # job's first training record, step 10 under attempt 1, named in meta.json by the importer;
    # without that name the window's last quarter less the run's first step is steps 10 and 11 (22:10)
    path = tmp_path / "run"
    meta = {**_ASYNC_16_16, "importer": {"job_first_steps": [[10, 1]]}}
    with Recorder(path, meta):
        pass

    def rows(step: int, attempt: int, fill: bool = False) -> list[tuple[int, int, float, str, float]]:
        metrics = _async_step(0.75, 600.0) if fill else _async_step(0.75)
        return [(step, attempt, math.nan, key, value) for key, value in metrics.items()]

    _write_steps(path, [r for s in range(1, 11) for r in rows(s, 0, fill=s == 1)], 1)
    _write_steps(path, [*rows(10, 1, fill=True), *rows(11, 0)], 2)
    registry, _ = _registry(path)
    served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
    assert served == (19.0, 13.0)


def test_a_job_start_read_after_its_first_step_takes_that_step_out_of_the_split(tmp_path):
    # the run above, job 2's start reaching the run directory after its first step (another writer's
    # late flush): meanwhile steps 10 and 11 are the last quarter of steps 4-11 less step 4 (22:10, as
    # the comment above works out), and once the start is read, steps 9 and 11 (19:13)
    with _recording(tmp_path, _ASYNC_16_16) as (rec, registry):
        rec.log_job_start()
        for step in range(1, 11):
            rec.log_step(step, _async_step(0.75, 600.0) if step == 1 else _async_step(0.75))
        resumed = time.time()
        rec.log_step(10, _async_step(0.75, 600.0), attempt=1)
        rec.log_step(11, _async_step(0.75))
        rec.flush()
        served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
        assert served == (22.0, 10.0)
        rec.log_job_start(resumed)
        rec.flush()
        served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
    assert served == (19.0, 13.0)


def test_a_long_run_s_fills_are_placed_from_bounded_records_and_job_starts(tmp_path):
    # 300 steps 5 min apart (busy 225 s of 300 s, as above; step 1 a fill), then a crash loop of 300 job
    # starts a minute apart with no step, then a job that resumes from step 300's checkpoint: its first
    # step, 301, fills the pipeline, and the window's last quarter less it is steps 300 and 302: 19:13
    path, t0 = tmp_path / "run", time.time() - 200_000
    with Recorder(path, _ASYNC_16_16):
        pass

    def rows(step: int, when: float, fill: bool = False) -> list[tuple[int, int, float, str, float]]:
        metrics = _async_step(0.75, 600.0) if fill else _async_step(0.75)
        return [(step, 0, when, key, value) for key, value in metrics.items()]

    registry, collector = _registry(path)
    _write_jobs(path, [t0], 1)
    _write_steps(path, [r for s in range(1, 301) for r in rows(s, t0 + 300.0 * s, fill=s == 1)], 1)
    assert _value(registry, "rlscope_last_step") == 300.0
    crash_loop = t0 + 300.0 * 300 + 60.0 * np.arange(1, 301)
    _write_jobs(path, crash_loop.tolist(), 2)
    assert _value(registry, "rlscope_last_step") == 300.0
    resumed = float(crash_loop[-1]) + 60.0
    _write_jobs(path, [resumed], 3)
    _write_steps(path, rows(301, resumed + 600.0, fill=True) + rows(302, resumed + 900.0), 2)
    served = tuple(_value(registry, "rlscope_recommended_gpus", role=r) for r in ("rollout", "train"))
    assert served == (19.0, 13.0)
    state = collector.states[0]
    assert len(state._trainings) <= 256 and len(state._fill_starts) <= 257


@pytest.mark.parametrize("split", [None, {"rollout": 16, "train": 8}])
def test_no_split_is_recommended_without_the_configured_pools(tmp_path, split):
    # separate pools of sizes meta.json does not state (or that do not add up to the 32 GPUs):
    # diagnose cannot weigh a move against the split there is, and reports none
    meta = {"topology": "separated", "gpu": {"type": "H100", "count": 32}}
    if split:
        meta["split"] = split
    with Recorder(tmp_path / "sep", meta) as rec:
        for step in range(1, 9):
            rec.log_step(step, {"timing_s/gen": 150.0, "timing_s/update_actor": 50.0, "timing_s/step": 200.0})
    assert not [f for f in analyze_run(tmp_path / "sep").findings if f.id == "split-imbalanced"]
    registry, _ = _registry(tmp_path / "sep")
    assert _value(registry, "rlscope_last_step", "sep") == 8.0
    assert _value(registry, "rlscope_recommended_gpus", "sep", role="rollout") is None
    assert _value(registry, "rlscope_recommended_gpus", "sep", role="train") is None


def test_a_meta_json_value_too_big_for_a_float_is_ignored(tmp_path):
    simulate("separated-8b", 2, tmp_path / "sep")
    meta_path = tmp_path / "sep" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["gpu"]["count"] = 10**400  # JSON has no bound on integers; float() of this overflows
    meta_path.write_text(json.dumps(meta))
    registry, _ = _registry(tmp_path / "sep")
    assert _value(registry, "rlscope_run_up", "sep") == 1.0
    assert _value(registry, "rlscope_configured_gpus", "sep", role="rollout") == 46  # the split still holds


@pytest.mark.parametrize("created", [1.7e9, 10**400], ids=["float", "huge-int"])
def test_a_created_time_too_big_for_a_float_is_no_start(tmp_path, monkeypatch, created):
    # a filesystem that keeps no modification time (here: meta.json's looked up under a name that
    # does not exist) serves meta.json's created as the start: one too big for a float is none
    from rlscope.exporter import _state

    with Recorder(tmp_path / "run", {"precision": "bf16"}):  # before its first step
        pass
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    (tmp_path / "run" / "meta.json").write_text(json.dumps({**meta, "created": created}))
    monkeypatch.setattr(_state, "META_FILE", "no-such-file.json")
    registry, _ = _registry(tmp_path / "run")
    assert _value(registry, "rlscope_run_up") == 1.0
    assert _value(registry, "rlscope_job_start_timestamp_seconds") == (1.7e9 if created == 1.7e9 else None)


def test_serve_http_and_stop(run):
    with serve(run, port=0, min_refresh_s=0) as server:
        assert server.url.startswith("http://127.0.0.1:")
        with pytest.raises(ServeError, match="cannot listen"):
            serve(run, port=server.port)
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["rlscope_last_step"].samples[0].value == 8.0
    assert "rlscope_reward_errors" in families and families["rlscope_reward_errors"].type == "counter"
    with pytest.raises(ConnectionRefusedError):  # stopped: nothing listens any more
        socket.create_connection(("127.0.0.1", server.port), timeout=5)


@pytest.fixture
def restore_rlscope_logger():
    """The CLI points the "rlscope" logger at this test's stderr and stops propagation: undo it."""
    logger = logging.getLogger("rlscope")
    handlers, propagate, level = list(logger.handlers), logger.propagate, logger.level
    yield
    logger.handlers[:] = handlers
    logger.propagate = propagate
    logger.setLevel(level)


def test_cli_errors_are_one_line(tmp_path, capsys, restore_rlscope_logger):
    (tmp_path / "a-file").write_text("not a run")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("not a run either")
    for path in (tmp_path / "a-file", tmp_path / "foreign"):
        assert cli_main(["export", str(path)]) == 1
        assert capsys.readouterr().err.strip().count("\n") == 0
    assert cli_main(["export", str(tmp_path), "--port", "70000"]) == 2


def test_a_run_deleted_while_exported_goes_down(run):
    registry, _ = _registry(run)
    assert _value(registry, "rlscope_run_up") == 1.0
    shutil.rmtree(run)
    assert _value(registry, "rlscope_run_up") == 0.0
    assert _value(registry, "rlscope_last_step") is None  # no old values: no stall alert for a deleted run
    with Recorder(run) as rec:  # a new run in its place: only its own values
        rec.log_step(1, {"timing_s/step": 5.0})
    assert _value(registry, "rlscope_run_up") == 1.0 and _value(registry, "rlscope_last_step") == 1.0
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.5") is None
    assert _value(registry, "rlscope_exporter_refresh_errors_total") == 2.0  # the two scrapes while it was gone: kept


@contextlib.contextmanager
def _exporting(*args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``rlscope export ARGS --port 0`` in a subprocess: its URL and the process (stopped after)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlscope", "export", *args, "--port", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving http://127.0.0.1:"), line + proc.stderr.read()
        yield line.split()[1], proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_cli_waits_for_a_run_the_job_has_not_written_yet(tmp_path):
    later = tmp_path / "later"
    starting = tmp_path / "starting"  # a writer mid-way: its status folder, meta.json not yet renamed
    (starting / "_status").mkdir(parents=True)
    (starting / ".meta.json.1a2b3c4d.tmp").write_text("{")
    with _exporting(f"file://{later}", str(starting), "--min-refresh", "0") as (url, proc):
        assert 'rlscope_run_up{run="later"} 0.0' in urllib.request.urlopen(url, timeout=10).read().decode()
        with Recorder(later) as rec:
            rec.log_step(1, {"timing_s/step": 10.0})
        assert 'rlscope_run_up{run="later"} 1.0' in urllib.request.urlopen(url, timeout=10).read().decode()
    assert "no run here yet" in proc.stderr.read()


def test_cli_serves_until_terminated(run):
    with _exporting(str(run)) as (url, proc):
        text = urllib.request.urlopen(url, timeout=10).read().decode()
        assert 'rlscope_last_step{run="run"} 8.0' in text
    assert proc.returncode == 0, proc.stderr.read()


def test_cli_stops_cleanly_on_repeated_sigterms(run):
    # `timeout` signals the command and its process group: two SIGTERMs end it with status 0.
    # (The race the handler is written against, a second signal inside the first's handler,
    # cannot be forced from here: this checks the stop, not that race.)
    with _exporting(str(run)) as (url, proc):
        urllib.request.urlopen(url, timeout=10).read()
        for _ in range(2):
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read()


def test_load_short(run):
    """A 3 s version of bench/bench_export_load.py: concurrent scrapers, no errors."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_export_load.py"), "--seconds", "3", "--scrapers", "8", str(run)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "errors 0" in done.stdout
    assert not math.isnan(float(done.stdout.split("p99 ")[1].split()[0]))


def test_a_broken_histogram_row_neither_moves_the_step_nor_resets_the_sum(tmp_path):
    from rlscope.trace.schema import LOGPROB
    from rlscope.trace.store import write_segment

    with Recorder(tmp_path / "run") as rec:
        rec.log_logprob_delta(8, np.random.default_rng(0).normal(0.0, 1e-3, 20_000))
    broken = pa.Table.from_pylist([{"step": 99, "abs_counts": [1, 2, 3]}], schema=LOGPROB)
    write_segment(tmp_path / "run", "logprob", broken, writer_id="other", seq=1)
    registry, _ = _registry(tmp_path / "run")
    median = np.median(np.abs(np.random.default_rng(0).normal(0.0, 1e-3, 20_000)))
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.5") == pytest.approx(median, rel=0.1)


def test_infinite_deltas_stay_out_of_the_mean_s_sum_and_count(tmp_path):
    with Recorder(tmp_path / "run") as rec:
        rec.log_logprob_delta(1, np.full(1000, 1e-3))
        rec.log_logprob_delta(2, np.array([1e-3, 3e-3, np.inf]))  # a token the rollout gave probability 0
    registry, _ = _registry(tmp_path / "run")
    # step 2's row counts 3 tokens and means the 2 finite ones (2e-3): _count 1002, _sum 1 + 2 x 2e-3
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 1002
    assert _value(registry, "rlscope_logprob_abs_delta_sum") == pytest.approx(1000 * 1e-3 + 2 * 2e-3)
    # a finite |delta| of 150 shares the last bin with the infinite ones: that row cannot be split, so
    # it stays out of both, and _sum / _count is still a mean of what was counted
    with Recorder(tmp_path / "run") as rec:
        rec.log_logprob_delta(3, np.array([*[1e-3] * 99, 150.0, np.inf]))
    registry, _ = _registry(tmp_path / "run")
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 1002
    assert _value(registry, "rlscope_logprob_abs_delta_sum") == pytest.approx(1000 * 1e-3 + 2 * 2e-3)
    assert _value(registry, "rlscope_logprob_abs_delta", quantile="0.999") >= 100  # the quantiles still see it


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (apt-get install prometheus)")
def test_the_exposition_passes_promtool_and_quantiles_are_summaries(run):
    from prometheus_client import generate_latest

    registry, _ = _registry(run)
    text = generate_latest(registry)
    done = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    # _sum and _count run over every trajectory read, as Prometheus counts them: 8 steps, each with
    # lags 0..9 for both sources, so 160 lags summing to 16 x 45
    assert _value(registry, "rlscope_staleness_count") == 160 and _value(registry, "rlscope_staleness_sum") == 720
    # 20,000 tokens of N(0, 1e-3): mean |delta| = 1e-3 sqrt(2 / pi)
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 20_000
    assert _value(registry, "rlscope_logprob_abs_delta_sum") == pytest.approx(
        20_000 * 1e-3 * math.sqrt(2 / math.pi), rel=0.02
    )


def test_a_run_replaced_between_two_scrapes_starts_again(tmp_path):
    first = tmp_path / "run"
    with Recorder(first, {"precision": "bf16"}) as rec:
        rec.log_logprob_delta(1, np.full(1000, 1e-3))
    registry, _ = _registry(first)
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 1000
    shutil.rmtree(first)
    with Recorder(first, {"precision": "fp8"}) as rec:  # rm -rf and restart, before the next scrape
        rec.log_logprob_delta(1, np.full(10, 1e-2))
    assert _value(registry, "rlscope_logprob_abs_delta_count") == 10
    assert _value(registry, "rlscope_logprob_abs_delta_threshold", precision="fp8", model_type="dense") is not None


def test_a_step_timer_logged_as_infinity_is_no_step_in_the_served_mfu(tmp_path):
    # as in diagnose: a step whose step timer is inf has no known length, not the 6 s its stages add up to.
    # gen 2N + update_actor 6N on 1000 tokens of a 1e9 model, 1 GPU at 1e13: 8e12 / (10 s * 1e13) = 8%
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e13}}
    with Recorder(tmp_path / "run", meta=meta) as rec:
        for step in range(4):
            timer = math.inf if step == 3 else 10.0
            rec.log_step(
                step,
                {
                    "timing_s/gen": 4.0,
                    "timing_s/update_actor": 2.0,
                    "timing_s/step": timer,
                    "perf/total_num_tokens": 1e3,
                },
            )
    registry, _ = _registry(tmp_path / "run")
    assert _value(registry, "rlscope_mfu_ratio") == pytest.approx(0.08)


def test_step_seconds_help_names_every_nested_timer_it_leaves_out():
    # the help says which timers are left out as nested in a stage: every one the exporter leaves out
    (spec,) = [m for m in METRICS if m.name == "rlscope_step_seconds"]
    assert [s for s in sorted(SUBSTAGES) if s not in spec.help] == []


def test_trajectory_times_logged_as_a_clock_s_are_warned_about_once(tmp_path, caplog):
    # steps 1-2 log finish times in seconds since the rollout began, steps 3-4 time.time()'s: the
    # tail share is judged from steps 1-2 alone, and the exporter says why once, naming step 3
    clock = 1.7e9
    with Recorder(tmp_path / "run") as rec:
        for s in range(1, 5):
            rec.log_step(s, {"timing_s/gen": 100.0, "timing_s/step": 120.0})
            base = clock + 1000 * s if s >= 3 else 0.0
            # 9 of 10 finish by 60 s, the last at 100 s: the slowest 10% take (100 - 60) / 100
            rec.log_trajectories(
                s, [{"finish_time": base + 60.0 * (i + 1) / 9} for i in range(9)] + [{"finish_time": base + 100.0}]
            )
    registry, _ = _registry(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="rlscope"):
        assert _value(registry, "rlscope_tail_share") == pytest.approx(0.4)
        registry.collect()  # a second scrape says nothing new
    said = [r.getMessage() for r in caplog.records if "clock's time" in r.getMessage() and "exporter" in r.getMessage()]
    assert len(said) == 1
    # step 3's first clock reading: 1.7e9 + 3000 + 60/9 s
    assert "finish_time was logged as a clock's time (time.time()) at step 3 (1700003007 s)" in said[0]
