"""The live dashboard's notices about timers logged as inf or NaN, and shares of time logged outside
[0, 1], name what ``rlscope diagnose`` names for the whole run, after the steps left the window too
(dashboards/live.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("dash")

from rlscope import Recorder
from rlscope.cli import main
from rlscope.dashboards import live as live_module
from rlscope.dashboards.live import LiveRun
from rlscope.report.document import read_warnings

META = {"gpu": {"count": 8, "type": "H100"}, "model": {"active_params": 7e9}}
GEN_UNTIMED = "timing_s/gen was logged as inf or NaN in {}: read as untimed there"
STEP_UNKNOWN = (
    "timing_s/step was logged as inf or NaN in {}: time unknown, left out of the step analysis rather than "
    "timed by the sum of the stage timers"
)


def _record(gen: float = 10.0, step: float = 30.0) -> dict[str, float]:
    return {"timing_s/gen": gen, "timing_s/update_actor": 10.0, "timing_s/step": step}


def _logged(rec: Recorder, live: LiveRun, step: int, record: dict[str, float], attempt: int = 0) -> None:
    """Log one record and let the live view read it, as its refresh after the flush would."""
    rec.log_step(step, record, attempt=attempt)
    rec.flush()
    live.refresh(force=True)


def _is_timer(warning: str) -> bool:
    return warning.startswith("timing_s/")


def _is_share(warning: str) -> bool:
    return ", a share, " in warning


def _diagnosed(path: Path, tmp_path: Path, about: Callable[[str], bool] = _is_timer) -> list[str]:
    """The timer (or other) warnings of ``rlscope diagnose --format json`` on the run directory."""
    out = tmp_path / "diagnose.json"
    assert main(["diagnose", str(path), "--format", "json", "--output", str(out)]) == 0
    return [w for w in json.loads(out.read_text())["run"]["warnings"] if about(w)]


def _noticed(run: LiveRun, about: Callable[[str], bool] = _is_timer) -> list[str]:
    return [w for w in run.warnings if about(w)]


def test_a_timer_s_step_that_left_the_window_is_still_named(tmp_path):
    # window of 3: step 2's inf generation timer leaves it at step 5, and the notice still names it, as
    # diagnose does for the whole run; a dashboard opened on the finished run says the same
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 9):
            _logged(rec, live, step, _record(gen=math.inf if step == 2 else 10.0))
    live.refresh(force=True)
    opened = LiveRun(0, str(path), "run", window=3)
    opened.refresh(force=True)
    expected = [GEN_UNTIMED.format("step 2")]
    assert _diagnosed(path, tmp_path) == expected
    assert _noticed(live) == expected and _noticed(opened) == expected


@pytest.mark.parametrize("bulk_rows", [None, 10], ids=["one-load", "chunked-load"])
def test_the_notice_counts_every_step_as_diagnose_past_the_five_it_names(tmp_path, monkeypatch, bulk_rows):
    # seven NaN step timers (1, 3, 4, 6, 7, 9, 11) in 12 steps: diagnose names the first five and counts
    # two more; 9 has left the window of 3 (10-12) by then, 11 is in it
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 13):
            _logged(rec, live, step, _record(step=math.nan if step in (1, 3, 4, 6, 7, 9, 11) else 30.0))
    if bulk_rows is not None:
        monkeypatch.setattr(live_module, "_BULK_ROWS", bulk_rows)  # 3 rows per step: chunks of 3 steps
    opened = LiveRun(0, str(path), "run", window=3)
    opened.refresh(force=True)
    expected = [STEP_UNKNOWN.format("steps 1, 3, 4, 6, 7 and 2 more")]
    assert _diagnosed(path, tmp_path) == expected
    assert _noticed(live) == expected and _noticed(opened) == expected


def test_a_resumed_job_that_redoes_a_named_step_finite_clears_it_as_diagnose(tmp_path):
    # steps 2, 5 and 7 logged inf generation timers; a resumed job redoes steps 2 and 3 (attempt 1), both
    # long past the window of 4 (7-10), and step 7, in it, with finite timers: the latest attempt decides,
    # so only step 5 is named, as diagnose names it
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=4)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 11):
            _logged(rec, live, step, _record(gen=math.inf if step in (2, 5, 7) else 10.0))
        assert _noticed(live) == [GEN_UNTIMED.format("steps 2, 5, 7")]
        for step in (2, 3, 7):
            _logged(rec, live, step, _record(), attempt=1)
    expected = [GEN_UNTIMED.format("step 5")]
    assert _diagnosed(path, tmp_path) == expected
    assert _noticed(live) == expected


def test_a_step_first_read_after_the_window_passed_it_is_counted(tmp_path):
    # steps 1-6 logged inf generation timers, then 7 and 9-12; step 8's record, also inf, reaches the
    # run directory after the window of 3 (10-12) passed it: diagnose counts it, and so does the notice
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in (1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 8):
            _logged(rec, live, step, _record(gen=math.inf if step <= 6 or step == 8 else 10.0))
    expected = [GEN_UNTIMED.format("steps 1, 2, 3, 4, 5 and 2 more")]
    assert _diagnosed(path, tmp_path) == expected
    assert _noticed(live) == expected


def test_late_rows_of_a_step_that_left_the_window_count_it_once(tmp_path):
    # steps 1-7 logged inf generation timers; late rows of steps 2 (named) and 7 (counted, not named) reach
    # the run directory after the window of 3 (10-12) passed them: each step is read again whole, and
    # still counted once
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 13):
            _logged(rec, live, step, _record(gen=math.inf if step <= 7 else 10.0))
        for step in (2, 7):
            _logged(rec, live, step, {"actor/entropy": 0.5})
    expected = [GEN_UNTIMED.format("steps 1, 2, 3, 4, 5 and 2 more")]
    assert _diagnosed(path, tmp_path) == expected
    assert _noticed(live) == expected


def test_a_redo_past_the_named_steps_after_they_left_the_window_keeps_its_first_verdict(tmp_path):
    # the bounded summary keeps, per timer, a count and the five steps the notice names, not every step:
    # step 7, the sixth inf one, redone finite after it left the window of 3, stays counted (diagnose no
    # longer counts it); step 2, one of the five named, redone so, leaves both; so do 1, 3, 4 and 5
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 13):
            _logged(rec, live, step, _record(gen=math.inf if step <= 7 else 10.0))
        for step in (7, 2):
            _logged(rec, live, step, _record(), attempt=1)
        assert _diagnosed(path, tmp_path) == [GEN_UNTIMED.format("steps 1, 3, 4, 5, 6")]
        # the notice names the four it still knows, and counts the two it cannot name
        assert _noticed(live) == [GEN_UNTIMED.format("steps 1, 3, 4, 5 and 2 more")]
        for step in (1, 3, 4, 5):
            _logged(rec, live, step, _record(), attempt=1)
    assert _diagnosed(path, tmp_path) == [GEN_UNTIMED.format("step 6")]
    assert _noticed(live) == [GEN_UNTIMED.format("2 steps")]  # 6 and 7, neither named


ROLLOUTER_IDLE = "fully_async/rollouter/idle_ratio"
TRAINER_IDLE = "fully_async/trainer/idle_ratio"
OCCUPANCY = "dynamic_resource/rollout_resource_utilization"
SHARE_OUT = "{}, a share, was logged outside [0, 1] in {}: read as not logged there"


def _async_record(rollouter_idle: float = 0.3, trainer_idle: float = 0.1) -> dict[str, float]:
    return {**_record(), "rollouter/idle_ratio": rollouter_idle, TRAINER_IDLE: trainer_idle}


@pytest.mark.parametrize("bulk_rows", [None, 10], ids=["one-load", "chunked-load"])
def test_a_share_outside_zero_to_one_is_named_after_its_steps_left_the_window(tmp_path, monkeypatch, bulk_rows):
    # no share of a step's time is 110%, -20% or NaN: the rollouter's idle ratio (verl's older key) logged
    # 1.1 at steps 2 and 5, the trainer's NaN at step 3, the occupancy share -0.2 at step 9. With a window
    # of 3 (7-9) only step 9 is in it at the end; diagnose names each share with its count and first step
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 10):
            record = _async_record(rollouter_idle=1.1 if step in (2, 5) else 0.3)
            if step == 3:
                record[TRAINER_IDLE] = math.nan
            if step == 9:
                record[OCCUPANCY] = -0.2
            _logged(rec, live, step, record)
    if bulk_rows is not None:
        monkeypatch.setattr(live_module, "_BULK_ROWS", bulk_rows)  # 5 rows per step: chunks of 2 steps
    opened = LiveRun(0, str(path), "run", window=3)
    opened.refresh(force=True)
    expected = [
        SHARE_OUT.format(OCCUPANCY, "1 step (step 9: -0.2)"),
        SHARE_OUT.format(ROLLOUTER_IDLE, "2 steps (first step 2: 1.1)"),
        SHARE_OUT.format(TRAINER_IDLE, "1 step (step 3: nan)"),
    ]
    assert _diagnosed(path, tmp_path, _is_share) == expected
    assert _noticed(live, _is_share) == expected and _noticed(opened, _is_share) == expected


def test_a_resumed_job_that_redoes_a_share_s_first_step_in_range_names_the_next_as_diagnose(tmp_path):
    # the rollouter's idle ratio logged 1.1 at steps 2 and 4 and 1.5 at step 8; a resumed job redoes step 2
    # (attempt 1, 0.4), long past the window of 3 (8-10), and step 4 (1.2): the latest attempt decides, so
    # step 4 is the first of two, with its redo's value, as diagnose names it
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 11):
            _logged(rec, live, step, _async_record(rollouter_idle={2: 1.1, 4: 1.1, 8: 1.5}.get(step, 0.3)))
        assert _noticed(live, _is_share) == [SHARE_OUT.format(ROLLOUTER_IDLE, "3 steps (first step 2: 1.1)")]
        for step, idle in ((2, 0.4), (4, 1.2)):
            _logged(rec, live, step, _async_record(rollouter_idle=idle), attempt=1)
    expected = [SHARE_OUT.format(ROLLOUTER_IDLE, "2 steps (first step 4: 1.2)")]
    assert _diagnosed(path, tmp_path, _is_share) == expected
    assert _noticed(live, _is_share) == expected


def test_a_share_notice_counts_the_steps_it_cannot_name():
    # the dashboard's bounded summary may know how many steps logged a share outside [0, 1] but not
    # which first (a resumed job redid every step it named): the notice says how many
    counts = {ROLLOUTER_IDLE: 3, TRAINER_IDLE: 7}
    shares = {ROLLOUTER_IDLE: (), TRAINER_IDLE: ((4, 1.25),)}
    assert read_warnings({}, {}, [], counts, out_of_range=shares) == [
        SHARE_OUT.format(ROLLOUTER_IDLE, "3 steps"),
        SHARE_OUT.format(TRAINER_IDLE, "7 steps (first step 4: 1.25)"),
    ]
