"""Trajectory submit and finish times logged as a clock's (``time.time()``) rather than as seconds
since the step's rollout began: the readers leave those steps' times out, and every report says so
once (docs/run-directory.md)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from rlscope import Recorder, RunReader
from rlscope.analyzers import longtail
from rlscope.cli import main

META = {"gpu": {"type": "H100", "count": 8}, "model": {"active_params": 7e9}}
STEPS = range(8)
# 20 trajectories finishing 1..19 s and one at 100 s after the rollout began: t90 is the 18th, 18 s,
# so the slowest 10% take (100 - 18) / 100 = 82% of the rollout
MEASURED = [*range(1, 20), 100.0]
# verl's response lengths, mean 100 and max 1000 tokens: lengths exponential around the mean give
# L90 = 100 ln 10, so the estimated share is 1 - 100 ln 10 / 1000
ESTIMATE = 1 - 100 * math.log(10) / 1000


def _run(path: Path, clock_steps: range | list[int], *, column: str = "finish_time", lengths: bool = False) -> float:
    """8 steps of gen 100 s and update 30 s, 20 trajectories each; in ``clock_steps`` the trajectories'
    ``column`` is ``time.time() + i`` (the i-th trajectory's), as a user logging the clock writes it.
    Returns that clock reading."""
    now = time.time()
    with Recorder(path, meta=META) as rec:
        for step in STEPS:
            metrics = {"timing_s/gen": 100.0, "timing_s/update_actor": 30.0, "timing_s/step": 130.0}
            if lengths:
                metrics |= {"response_length/mean": 100.0, "response_length/max": 1000.0}
            rec.log_step(step, metrics)
            rows = [
                {"traj_id": f"{step}-{i}", "response_tokens": 100, "finish_time": t} for i, t in enumerate(MEASURED)
            ]
            if step in clock_steps:
                for i, row in enumerate(rows):
                    row[column] = now + i
            rec.log_trajectories(step, rows)
    return now


def _warning(column: str, where: str) -> str:
    return (
        f"trajectories' {column} was logged as a clock's time (time.time()) in {where}: those steps' finish "
        "times are read as not measured; log seconds since the step's rollout began"
    )


def _diagnosed(capsys, path: Path) -> dict:
    assert main(["diagnose", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_clock_finish_times_fall_back_to_the_estimate_from_response_lengths(tmp_path, capsys):
    now = _run(tmp_path / "run", STEPS, lengths=True)
    result = longtail.analyze(tmp_path / "run")
    assert result.estimated
    assert result.per_step["tail_share"].tolist() == pytest.approx([ESTIMATE] * 8)
    assert result.clock_times == {"finish_time": tuple((s, now) for s in STEPS)}
    doc = _diagnosed(capsys, tmp_path / "run")
    assert doc["headline"]["tail_share"] == pytest.approx(ESTIMATE) and doc["headline"]["tail_estimated"]
    assert doc["headline"]["t_tail_s"] == pytest.approx(100 * ESTIMATE)
    assert doc["long_tail"]["clock_time_steps"] == list(STEPS)
    assert [w for w in doc["run"]["warnings"] if "clock" in w] == [
        _warning("finish_time", f"8 steps (first step 0: {now:.0f} s)")
    ]


def test_clock_finish_times_without_response_lengths_leave_the_tail_unknown(tmp_path, capsys):
    now = _run(tmp_path / "run", STEPS)
    doc = _diagnosed(capsys, tmp_path / "run")
    head = doc["headline"]
    assert head["tail_share"] is None and head["t_tail_s"] is None and not head["tail_estimated"]
    assert doc["long_tail"]["per_step"] == []
    assert [w for w in doc["run"]["warnings"] if "clock" in w] == [
        _warning("finish_time", f"8 steps (first step 0: {now:.0f} s)")
    ]
    # every format lists it once under its warnings
    for fmt, heading in (("text", "Read with warnings"), ("markdown", "## Read with warnings")):
        assert main(["diagnose", str(tmp_path / "run"), "--format", fmt]) == 0
        out = " ".join(capsys.readouterr().out.split())  # the terminal wraps long lines
        assert heading in out and out.count("was logged as a clock's time") == 1  # markdown escapes finish_time
        assert "n/a (trajectory times logged as a clock" in out  # the headline's tail, not "needs finish times"
    out = tmp_path / "report.html"
    assert main(["diagnose", str(tmp_path / "run"), "--format", "html", "--output", str(out)]) == 0
    html = out.read_text()
    assert "Read with warnings" in html and html.count("finish_time was logged as a clock&#x27;s time") == 1


def test_only_the_steps_of_clock_times_leave_the_measured_tail(tmp_path, capsys):
    # steps 0-3 measured (82% each), 4-7 of clock times: the recent steps 6 and 7 have no tail known, so
    # the MFU waterfall leaves their generation unsplit, and the warning names step 4 first
    now = _run(tmp_path / "run", range(4, 8))
    result = longtail.analyze(tmp_path / "run")
    assert not result.estimated
    assert result.per_step.index.tolist() == [0, 1, 2, 3]
    assert result.per_step["tail_share"].tolist() == pytest.approx([0.82] * 4)
    doc = _diagnosed(capsys, tmp_path / "run")
    assert doc["mfu"]["tail_unknown_steps"] == [6, 7]
    assert [w for w in doc["run"]["warnings"] if "clock" in w] == [
        _warning("finish_time", f"4 steps (first step 4: {now:.0f} s)")
    ]


def test_clock_submit_times_leave_the_step_s_finish_times_out_too(tmp_path, capsys):
    # finish times since the rollout began, but submit times of the clock in step 7: the writer took
    # some other origin for that step, whose finish times are then not to be trusted either
    now = _run(tmp_path / "run", [7], column="submit_time")
    assert longtail.analyze(tmp_path / "run").per_step.index.tolist() == list(range(7))
    doc = _diagnosed(capsys, tmp_path / "run")
    assert [w for w in doc["run"]["warnings"] if "clock" in w] == [
        _warning("submit_time", f"1 step (step 7: {now:.0f} s)")
    ]


def test_a_segment_s_footer_says_which_trajectory_times_may_be_a_clock_s(tmp_path):
    # diagnose reads no time column to learn that none is a clock's: the footer's statistics tell
    _run(tmp_path / "clock", STEPS)
    _run(tmp_path / "fine", [])
    assert {s.clock_times for s in RunReader(tmp_path / "clock").segments("trajectories")} == {
        frozenset({"finish_time"})
    }
    assert {s.clock_times for s in RunReader(tmp_path / "fine").segments("trajectories")} == {frozenset()}


def test_times_since_the_rollout_began_give_no_warning(tmp_path, capsys):
    _run(tmp_path / "run", [])
    doc = _diagnosed(capsys, tmp_path / "run")
    assert not [w for w in doc["run"]["warnings"] if "clock" in w]
    assert doc["headline"]["tail_share"] == pytest.approx(0.82) and doc["long_tail"]["clock_time_steps"] == []


def test_compare_does_not_judge_the_tail_of_clock_times(tmp_path, capsys):
    # A's slowest 10% take 82% of its rollouts (long-tail-dominates); B logged the clock's times: read
    # as times since the rollout began they would give a tail of 2 s in 1.8e9 s, a clean bill
    _run(tmp_path / "a", [])
    _run(tmp_path / "b", STEPS)
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"]) == 0
    explanations = json.loads(capsys.readouterr().out)["explanations"]
    assert (
        "only A, as B could not evaluate: long-tail-dominates (no tail: trajectory times logged as a clock's in 8 steps)"
        in explanations
    )
    assert not [e for e in explanations if e.startswith("only A: ") and "long-tail-dominates" in e]


def test_the_dashboard_notices_say_what_diagnose_says(tmp_path, capsys):
    pytest.importorskip("dash")
    from rlscope.dashboards.live import LiveRun

    now = _run(tmp_path / "run", range(2, 8))
    expected = [_warning("finish_time", f"6 steps (first step 2: {now:.0f} s)")]
    assert [w for w in _diagnosed(capsys, tmp_path / "run")["run"]["warnings"] if "clock" in w] == expected
    for window in (3, 100):  # steps 2-4 left a window of 3 steps
        live = LiveRun(0, str(tmp_path / "run"), "run", window=window)
        live.refresh(force=True)
        assert [w for w in live.warnings if "clock" in w] == expected


@pytest.mark.parametrize("clock_steps", [[], [0, 1, 2, 3]])
def test_finish_times_of_aborted_trajectories_alone_are_no_measured_tail(tmp_path, clock_steps):
    # steps 0-3 have clock times (or measured ones), steps 4-7 only aborted trajectories' finish times:
    # the long tail leaves aborted trajectories out, so nothing is measured; the estimate from response
    # lengths takes over, for every step, rather than a "measured" tail with no step in it
    path = tmp_path / "run"
    now = time.time()
    with Recorder(path, meta=META) as rec:
        for step in STEPS:
            rec.log_step(
                step,
                {
                    "timing_s/gen": 100.0,
                    "timing_s/step": 130.0,
                    "response_length/mean": 100.0,
                    "response_length/max": 1000.0,
                },
            )
            aborted = step >= 4 or not clock_steps
            rows = [{"traj_id": f"{step}-{i}", "finish_time": t, "aborted": aborted} for i, t in enumerate(MEASURED)]
            if step in clock_steps:
                for i, row in enumerate(rows):
                    row["finish_time"] = now + i
            rec.log_trajectories(step, rows)
    result = longtail.analyze(path)
    assert result.estimated
    assert result.per_step["tail_share"].tolist() == pytest.approx([ESTIMATE] * 8)
