"""Each analyzer on small run directories written with the Recorder, with hand-computed expectations."""

from __future__ import annotations

import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlscope import Recorder, RunReader
from rlscope.advice import CATALOGUE, Severity
from rlscope.analyzers import (
    RunFrames,
    analyze_run,
    anatomy,
    drift,
    load,
    longtail,
    mfu,
    staleness,
    sync_balance,
    topology,
)
from rlscope.report._format import headline_rows
from rlscope.report.document import build_document

H100_64 = {"model": {"active_params": 8e9}, "gpu": {"type": "NVIDIA H100 80GB HBM3", "count": 64}}
# the 8B colocated step of DOMAIN.md: gen 602 (406 + 196 tail), forward 72 (36 + 36), training 136
EIGHT_B_STEP = {
    "timing_s/gen": 602,
    "timing_s/old_log_prob": 36,
    "timing_s/ref": 36,
    "timing_s/update_actor": 136,
    "timing_s/step": 810,
    "perf/total_num_tokens": 8192 * (512 + 8192),
}
# 10 trajectories: the 9th finishes at 406 s (t90), the last at 602 s
EIGHT_B_FINISH = [100, 150, 200, 250, 300, 350, 380, 400, 406, 602]


def make_run(path, meta, steps, trajectories=None):
    with Recorder(path, meta=meta) as rec:
        for step, metrics in steps.items():
            rec.log_step(step, metrics)
        for step, rows in (trajectories or {}).items():
            rec.log_trajectories(step, rows)
    return str(path)


def finish_rows(times, **extra):
    return [{"traj_id": str(i), "finish_time": t, **extra} for i, t in enumerate(times)]


def ids(result):
    return [f.id for f in result.findings]


@pytest.fixture
def eight_b(tmp_path):
    steps = dict.fromkeys(range(4), EIGHT_B_STEP)
    return make_run(
        tmp_path / "8b",
        {**H100_64, "topology": "colocated"},
        steps,
        dict.fromkeys(range(4), finish_rows(EIGHT_B_FINISH)),
    )


# -- anatomy ---------------------------------------------------------------------------


def test_anatomy_phases_other_and_shares(tmp_path):
    metrics = {
        "timing_s/gen": 60,
        "timing_s/generate_sequences": 55,  # nested inside gen: not added
        "timing_s/reward": 5,
        "timing_s/old_log_prob": 10,
        "timing_s/ref": 5,
        "timing_s/adv": 1,
        "timing_s/update_actor": 15,
        "timing_s/update_weights": 2,
        "timing_s/step": 100,
        "actor/pg_loss": 0.1,
    }
    r = anatomy.analyze(make_run(tmp_path / "r", {}, {1: metrics, 2: metrics}))
    row = r.seconds.loc[1]
    # named phases 60 + 5 + 10 + 5 + 1 + 15 + 2 = 98 of 100: other = 2
    assert row["other"] == pytest.approx(2) and row["weight_sync"] == 2 and row["step"] == 100
    assert r.shares.loc[1, "gen"] == pytest.approx(0.6) and r.shares.loc[1].sum() == pytest.approx(1.0)
    assert r.step_timer
    assert ids(r) == ["generation-dominates"]  # 60% >= 60%; other 2% < 10%


def test_stage_timers_that_overlap_are_said_to(tmp_path):
    # rllm's log: gen 100.1 + old 5.3 + ref 5.2 + adv 11.2 + update 20.3 = 142.1 s > step 131.6 s
    timers = {"gen": 100.1, "old_log_prob": 5.3, "ref": 5.2, "adv": 11.2, "update_actor": 20.3, "step": 131.6}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, {0: {f"timing_s/{k}": v for k, v in timers.items()}}))
    # the step is the wall clock's: generation 100.1 / 131.6 = 76%, as the log's own source says
    assert r.seconds.loc[0, "step"] == pytest.approx(131.6) and r.seconds.loc[0, "other"] == 0
    assert r.shares.loc[0, "gen"] == pytest.approx(100.1 / 131.6)
    (f,) = [f for f in r.findings if f.id == "stage-timers-overlap"]
    assert f.evidence["steps"] == 1 and f.evidence["mean_excess_s"] == pytest.approx(10.5)
    # within 1%: rounding, not overlap
    timers["step"] = 141.0
    r = anatomy.analyze(make_run(tmp_path / "r2", {}, {0: {f"timing_s/{k}": v for k, v in timers.items()}}))
    assert "stage-timers-overlap" not in ids(r)


@pytest.mark.parametrize("step_s", [100.0, 140.0])
def test_a_validation_timed_on_a_training_step_is_in_it_only_where_the_step_timer_holds_it(tmp_path, step_s):
    # verl 0.9.1 closes timing_s/step before it times testing (ray_trainer.fit), older verl after:
    # gen 60 + old_log_prob 10 + ref 5 + update_actor 20 + update_weights 2 = 97 s of the step,
    # with testing 40 s on step 4. A 100 s step timer cannot hold the testing (97 + 40 > 100):
    # it ran after the step, which 3 s of untimed time complete; a 140 s one holds it, 3 s untimed
    timers = {"gen": 60.0, "old_log_prob": 10.0, "ref": 5.0, "update_actor": 20.0, "update_weights": 2.0}
    step = {f"timing_s/{k}": v for k, v in timers.items()} | {"timing_s/step": 100.0}
    steps = dict.fromkeys(range(4), step) | {4: step | {"timing_s/testing": 40.0, "timing_s/step": step_s}}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, steps))
    assert "stage-timers-overlap" not in ids(r)
    assert r.seconds.loc[4, "step"] == step_s and r.seconds.loc[4, "other"] == pytest.approx(3.0)
    assert r.seconds.loc[4, "validation"] == (40.0 if step_s == 140.0 else 0.0)
    assert r.shares.loc[4].sum() == pytest.approx(1.0)
    assert ("validation" in r.logged_recent) == (step_s == 140.0)  # timed after the step: no phase of it


def test_a_zero_step_timer_is_as_if_absent(tmp_path):
    timers = {"timing_s/gen": 10.0, "timing_s/update_actor": 5.0}
    steps = {0: {**timers, "timing_s/step": 20.0}, 1: {**timers, "timing_s/step": 0.0}}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.seconds["step"].tolist() == [20.0, 15.0]  # step 1: the stages' sum, not 0 s
    assert r.shares.loc[1, "gen"] == pytest.approx(10.0 / 15.0)


def test_a_validation_logged_on_its_own_is_no_training_step(tmp_path):
    step = {"timing_s/gen": 100, "timing_s/old_log_prob": 10, "timing_s/ref": 10, "timing_s/update_actor": 30}
    step |= {"timing_s/update_weights": 2, "timing_s/step": 155}
    validation = {"timing_s/testing": 50, "val-core/x/acc/mean@1": 0.5}
    steps = {0: validation, **dict.fromkeys(range(1, 8), step), 8: validation, 9: {"timing_s/save_checkpoint": 20}}
    run = make_run(tmp_path / "r", {**H100_64, "topology": "colocated"}, steps)
    r = anatomy.analyze(run)
    assert r.seconds.index.tolist() == list(range(1, 8)) and (r.seconds["step"] == 155).all()
    # the recent step is 155 s, generation 100 / 155 of it: not (155 + 50) / 2 s with 50 / 102
    d = analyze_run(run)
    assert d.topology.step_now_s == pytest.approx(100 + 10 + 10 + 30 + 2)  # T_thr + T_tail + T_t + T_sync
    assert "generation-dominates" in ids(d)
    # a record with its own step timer is a step whatever it timed; a zero step timer timed nothing
    steps[8] = {**validation, "timing_s/step": 50}
    assert anatomy.analyze(make_run(tmp_path / "r2", {}, steps)).seconds.index.tolist() == list(range(1, 9))
    steps[8] = {**validation, "timing_s/step": 0}
    assert anatomy.analyze(make_run(tmp_path / "r3", {}, steps)).seconds.index.tolist() == list(range(1, 8))


def test_the_generation_share_trend_is_the_share_the_headline_gives(tmp_path):
    # 8 steps; the last quarter (steps 6-7): generation (90 + 10) s of (100 + 20) s, 83%, not the
    # per-step mean (0.9 + 0.5) / 2 = 70%; the first quarter (steps 0-1): 10 of 20 s each, 50%
    steps = {s: {"timing_s/gen": 10, "timing_s/update_actor": 10, "timing_s/step": 20} for s in range(6)}
    steps[6] = {"timing_s/gen": 90, "timing_s/update_actor": 10, "timing_s/step": 100}
    steps[7] = {"timing_s/gen": 10, "timing_s/update_actor": 10, "timing_s/step": 20}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.trend.loc["gen", "first"] == pytest.approx(0.5) and r.trend.loc["gen", "last"] == pytest.approx(100 / 120)
    found = {f.id: f for f in r.findings}
    assert found["generation-dominates"].evidence["generation_share"] == pytest.approx(100 / 120)
    assert found["generation-share-growing"].evidence["last"] == pytest.approx(100 / 120)


def test_a_step_that_timed_nothing_is_left_out_of_the_share_trend(tmp_path):
    # step 0 timed 0 s: it has no share, so the quarters are of steps 1-8, where generation
    # takes 40 + 10 s of 80 + 10 s: first (50 + 60) / (90 + 100), last (110 + 120) / (150 + 160)
    steps = {s: {"timing_s/gen": 40 + 10 * s, "timing_s/update_actor": 40} for s in range(1, 9)}
    steps[0] = {"timing_s/gen": 0, "timing_s/update_actor": 0}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.seconds.loc[0, "step"] == 0 and np.isnan(r.shares.loc[0, "gen"])
    assert r.trend.loc["gen", "first"] == pytest.approx(110 / 190)
    assert r.trend.loc["gen", "last"] == pytest.approx(230 / 310)
    shares = [(40 + 10 * s) / (80 + 10 * s) for s in range(1, 9)]
    assert r.trend.loc["gen", "slope_per_step"] == pytest.approx(np.polyfit(range(1, 9), shares, 1)[0])
    assert r.trend.loc["update_actor", "last"] == pytest.approx(80 / 310)


def test_anatomy_old_key_spelling_without_step_timer(tmp_path):
    metrics = {"timing/gen": 21.47, "timing/ref": 4.36, "timing/values": 5.8, "timing/adv": 0.109}
    metrics |= {"timing/update_critic": 15.664, "timing/update_actor": 20.314}
    r = anatomy.analyze(make_run(tmp_path / "r", {}, {0: metrics}))
    # no step timer: step = sum of phases = 67.717, other = 0
    assert not r.step_timer
    assert r.seconds.loc[0, "step"] == pytest.approx(67.717) and r.seconds.loc[0, "other"] == 0
    assert r.seconds.loc[0, "update_critic"] == pytest.approx(15.664)


def test_anatomy_trend_untracked_time_and_switching(tmp_path):
    # gen grows 40, 50, ..., 110 s while the rest stays 40 s: the first quarter's share of its time is
    # (40 + 50) / (80 + 90) = 0.529, the last quarter's (100 + 110) / (140 + 150) = 0.724
    steps = {s: {"timing_s/gen": 40 + 10 * s, "timing_s/update_actor": 40} for s in range(8)}
    r = anatomy.analyze(make_run(tmp_path / "grow", {}, steps))
    assert r.trend.loc["gen", "first"] == pytest.approx(90 / 170)
    assert r.trend.loc["gen", "last"] == pytest.approx(210 / 290)
    assert "generation-share-growing" in ids(r)
    # 20 s of a 100 s step outside any timer; 8 s switching
    steps = {0: {"timing_s/gen": 50, "timing_s/update_actor": 22, "timing_s/switch": 8, "timing_s/step": 100}}
    r = anatomy.analyze(make_run(tmp_path / "untracked", {}, steps))
    found = {f.id: f for f in r.findings}
    assert found["untracked-time"].evidence["other_s"] == pytest.approx(20)
    assert found["switching-costly"].evidence["switching_share"] == pytest.approx(0.08)


def test_untracked_time_is_judged_over_the_recent_steps_a_step_timer_holds(tmp_path):
    # 8 steps of gen 50 + update 30 = 80 s (recent: the last 2). Steps 0-5 and 7 have a step timer,
    # 90 s and 92 s; step 6 has none, so its step is the 80 s sum and its other 0 by definition, no
    # measurement. Over the timed recent step 7 alone other is 12 s of 92 s (13%, above 10%); spread
    # over both recent steps it would read 6 s of 86 s (7%) and hide the finding
    stages = {"timing_s/gen": 50, "timing_s/update_actor": 30}
    steps = {s: stages | ({"timing_s/step": 92 if s == 7 else 90} if s != 6 else {}) for s in range(8)}
    r = anatomy.analyze(make_run(tmp_path / "partly", {}, steps))
    found = {f.id: f for f in r.findings}
    evidence = found["untracked-time"].evidence
    assert evidence["other_s"] == pytest.approx(12) and evidence["step_s"] == pytest.approx(92)
    assert evidence["other_share"] == pytest.approx(12 / 92)
    assert (evidence["timed_steps"], evidence["recent_steps"]) == (1, 2)
    assert "in 1 of the 2 recent steps" in found["untracked-time"].recommendation
    # no recent step timer (only steps 0-5 have one): other is measured in none of them, nothing to judge
    steps = {s: stages | ({"timing_s/step": 120} if s < 6 else {}) for s in range(8)}
    assert "untracked-time" not in ids(anatomy.analyze(make_run(tmp_path / "early", {}, steps)))


def test_anatomy_overlapped_generation_is_beside_the_step(tmp_path):
    # one-step overlap: a 200 s rollout runs beside a 120 s trainer step timed at 50 + 10 s;
    # the 60 s no timer covers is the trainer waiting for samples (at most the rollout's 200 s)
    steps = {0: {"timing_s/gen": 200, "timing_s/update_actor": 50, "timing_s/old_log_prob": 10, "timing_s/step": 120}}
    r = anatomy.analyze(make_run(tmp_path / "r", {"topology": "one_step_overlap"}, steps))
    row = r.seconds.loc[0]
    assert r.overlapped and (row["step"], row["waiting"], row["other"]) == (120, 60, 0)
    assert r.shares.loc[0, "gen"] == pytest.approx(200 / 120)
    assert "generation-dominates" not in ids(r)


def test_anatomy_restarted_step_uses_the_latest_attempt(tmp_path):
    with Recorder(tmp_path / "r") as rec:
        rec.log_step(3, {"timing_s/gen": 90, "timing_s/step": 200})
        rec.log_step(3, {"timing_s/gen": 30, "timing_s/step": 60}, attempt=1)
    r = anatomy.analyze(str(tmp_path / "r"))
    assert r.seconds.loc[3, "gen"] == 30 and r.seconds.loc[3, "other"] == 30


# -- long tail -------------------------------------------------------------------------


def test_longtail_measured_from_trajectories(tmp_path):
    # finish 1..9 and 20 s: t90 = 9, tail 11, f = 11/20 = 0.55 (>= 0.5: critical); the aborted
    # trajectory (finish 100) is continued next step and left out
    rows = [*finish_rows([1, 2, 3, 4, 5, 6, 7, 8, 9, 20]), {"traj_id": "x", "finish_time": 100, "aborted": True}]
    r = longtail.analyze(make_run(tmp_path / "r", {}, {}, {0: rows, 1: rows}))
    assert not r.estimated
    assert r.per_step.loc[0].to_dict() == {"n": 10, "rollout_s": 20, "t_thr_s": 9, "t_tail_s": 11, "tail_share": 0.55}
    (f,) = r.findings
    assert f.id == "long-tail-dominates" and f.severity is Severity.CRITICAL
    assert f.evidence["t_tail_s"] == 11 and "11 s of 20 s" in f.recommendation


def test_a_straggler_among_fewer_than_10_trajectories_is_a_tail(tmp_path):
    # 9 trajectories a step, 8 done by 44 s and one at 300 s: T_tail = 0.9 x 256 = 230.4 s,
    # f = 230.4 / 300 = 77% (>= 0.5: critical); the finding says how the tail was read
    rows = finish_rows([30, 32, 34, 36, 38, 40, 42, 44, 300])
    steps = {s: {"timing_s/gen": 300.0, "timing_s/update_actor": 30.0} for s in range(4)}
    r = longtail.analyze(make_run(tmp_path / "r", {}, steps, dict.fromkeys(range(4), rows)))
    assert (r.t_thr_s, r.t_tail_s, r.tail_share) == (pytest.approx(69.6), pytest.approx(230.4), pytest.approx(0.768))
    (f,) = [f for f in r.findings if f.id == "long-tail-dominates"]
    assert f.severity is Severity.CRITICAL
    assert f.title == (
        "the slowest 10% of trajectories take 77% of rollout time (measured; as few as 9 trajectories a step: "
        "the tail is read off the last two finishes)"
    )
    # the same 9 beside 3 that never finished (infinite times): 9 counted, the same tail and note
    r = longtail.analyze(
        make_run(
            tmp_path / "inf",
            {},
            steps,
            dict.fromkeys(range(4), finish_rows([*[30, 32, 34, 36, 38, 40, 42, 44, 300], *[math.inf] * 3])),
        )
    )
    assert set(r.per_step["n"]) == {9} and r.tail_share == pytest.approx(0.768)
    assert "as few as 9 trajectories a step" in next(f for f in r.findings if f.id == "long-tail-dominates").title
    # three even finishes a step: 10%, no finding (the slowest one alone would have said 33%)
    even = make_run(tmp_path / "even", {}, steps, dict.fromkeys(range(4), finish_rows([100, 200, 300])))
    assert longtail.analyze(even).tail_share == pytest.approx(0.1) and "long-tail-dominates" not in ids(
        longtail.analyze(even)
    )


@pytest.mark.parametrize(
    ("topology", "lever"),
    [
        ("colocated", "Async streaming or partial rollout stops the trainer waiting for them"),
        ("one_step_overlap", "One-step overlap still waits for them every step: async streaming or partial rollout"),
        ("async", "Async streaming already keeps the trainer from waiting for them"),
        ("colocate_async", "take turns on the same GPUs, so the GPUs train only once the batch is in"),
    ],
)
def test_the_long_tail_lever_depends_on_the_topology(tmp_path, topology, lever):
    # the same 40% tail: an async run is not told that going async stops the trainer waiting
    meta = {"gpu": {"type": "H100", "count": 8}, "topology": topology, "split": "8:8" if "coloc" in topology else "4:4"}
    r = longtail.analyze(_async_run(tmp_path / "r", meta, 152.0))
    (f,) = [f for f in r.findings if f.id == "long-tail-dominates"]
    assert lever in f.recommendation
    told_to_go_async = "Async streaming or partial rollout stops" in f.recommendation
    assert told_to_go_async == (topology == "colocated")


def test_longtail_growing(tmp_path):
    # step s: nine finish by 10 s, the last at 10 + 10 s: f = 10 s / (10 + 10 s); s = 0 -> 0, s = 3 -> 0.75
    traj = {s: finish_rows([1, 2, 3, 4, 5, 6, 7, 8, 10, 10 + 10 * s]) for s in range(4)}
    r = longtail.analyze(make_run(tmp_path / "r", {}, {}, traj))
    assert r.trend.first == 0 and r.trend.last == pytest.approx(0.75)
    assert {"long-tail-dominates", "long-tail-growing"} <= set(ids(r))


def test_longtail_estimated_from_response_lengths(tmp_path):
    steps = {0: {"response_length/mean": 8000, "response_length/max": 32000, "timing_s/gen": 602}}
    r = longtail.analyze(make_run(tmp_path / "r", {}, steps))
    # f = 1 - 8000 ln 10 / 32000 = 0.4243; T_tail = 0.4243 * 602 = 255.4 s
    assert r.estimated and r.tail_share == pytest.approx(0.4243, abs=1e-4)
    assert r.t_tail_s == pytest.approx(255.4, abs=0.1)
    (f,) = r.findings
    assert f.severity is Severity.WARN and f.evidence["estimated"] and "estimated" in f.recommendation


def test_an_estimated_tail_growing_is_information(tmp_path):
    # lengths spread out: max/mean 2.5 -> 8.5. f = 1 - mean ln 10 / max: 1 - 2.303/2.5 = 0.079 -> 1 - 2.303/8.5 = 0.73
    steps = {
        s: {"response_length/mean": 1000, "response_length/max": 2500 + 2000 * s, "timing_s/gen": 100} for s in range(4)
    }
    r = longtail.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.estimated and r.trend.first == pytest.approx(1 - 1000 * math.log(10) / 2500)
    assert r.trend.last == pytest.approx(1 - 1000 * math.log(10) / 8500)
    (f,) = [f for f in r.findings if f.id == "long-tail-growing"]
    assert f.severity is Severity.INFO and "estimated" in f.recommendation


def test_lengths_bunched_near_the_max_give_a_bound_not_a_zero_tail(tmp_path):
    # verl's quickstart: mean x ln 10 past the max 256, no clip ratio. The tail is unknown; it is at
    # most (max - mean) / (0.9 max) of each rollout: (256 - 239) / 230.4 = 0.0738, (256 - 232) / 230.4
    # = 0.1042 (the min's 1 - 77/256 and 1 - 91/256 are looser)
    lengths = [(239, 77, 21.0), (232, 91, 23.0), (239, 77, 21.0), (232, 91, 23.0)]
    steps = {
        s: {"response_length/mean": m, "response_length/max": 256, "response_length/min": lo, "timing_s/gen": g}
        for s, (m, lo, g) in enumerate(lengths)
    }
    r = longtail.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.estimated and math.isnan(r.tail_share) and math.isnan(r.t_tail_s) and math.isnan(r.t_thr_s)
    assert r.per_step["tail_share"].isna().all()
    assert r.per_step["tail_share_max"].tolist() == pytest.approx([17 / 230.4, 24 / 230.4] * 2)
    # the last quarter is step 3: its bound
    assert r.tail_share_max == pytest.approx(24 / 230.4)
    assert r.findings == []


def test_a_recent_share_needs_every_recent_step_estimated(tmp_path):
    # 8 steps, the last two recent: step 6 estimated (f = 1 - 8000 ln 10 / 32000 = 0.4243), step 7
    # bunched (mean 30000 of 32000): a mean over step 6 alone is not the recent share
    steps = {s: {"response_length/mean": 8000, "response_length/max": 32000, "timing_s/gen": 600} for s in range(7)}
    steps[7] = {"response_length/mean": 30000, "response_length/max": 32000, "timing_s/gen": 600}
    r = longtail.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.per_step.loc[6, "tail_share"] == pytest.approx(0.4243, abs=1e-4) and math.isnan(r.tail_share)
    # bounds (32000 - 8000) / 28800 = 0.8333 and 2000 / 28800 = 0.0694, weighted alike by 600 s
    assert r.tail_share_max == pytest.approx((24000 / 28800 + 2000 / 28800) / 2)


def test_longtail_without_evidence_is_empty(tmp_path):
    r = longtail.analyze(make_run(tmp_path / "r", {}, {0: {"actor/pg_loss": 0.1}}))
    assert r.per_step.empty and r.findings == []


# -- MFU -------------------------------------------------------------------------------


def test_mfu_8b_run(eight_b):
    r = mfu.analyze(eight_b)
    # 12 * 8e9 * 71,303,168 / (810 * 64 * 989e12) = 13.35%
    assert r.mfu == pytest.approx(0.1335, abs=5e-4)
    row = r.per_step.loc[0]
    assert row["eta_forward"] == pytest.approx(0.5, abs=0.01) and row["eta_training"] == pytest.approx(0.4, abs=0.01)
    assert row["eta_thr"] == pytest.approx(0.044, abs=0.001)  # "decode MFU 4% on the throughput part"
    # the tail is 196 of 810 s on all 64 GPUs: 24.20 points, whatever the FLOPs
    assert r.waterfall["long_tail"] == pytest.approx(100 * 196 / 810)
    assert r.waterfall.sum() == pytest.approx(100 - 100 * r.mfu)
    assert r.waterfall.idxmax() == "decode"
    assert r.cross_check.empty and ids(r) == ["mfu-waterfall"]


def test_mfu_without_ref_and_tokens_from_trajectories(tmp_path):
    # no ref timer: 10 N per token; tokens from trajectories: 4 * (100 + 900) = 4000
    steps = {0: {"timing_s/gen": 10, "timing_s/old_log_prob": 2, "timing_s/update_actor": 8, "timing_s/step": 20}}
    rows = [{"traj_id": str(i), "prompt_tokens": 100, "response_tokens": 900} for i in range(4)]
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e12}}
    r = mfu.analyze(make_run(tmp_path / "r", meta, steps, {0: rows}))
    row = r.per_step.loc[0]
    assert row["tokens"] == 4000 and row["flops"] == 10 * 1e9 * 4000
    # 4e13 FLOPs / (20 s * 1 GPU * 1e12) = 2.0: a toy peak; the point is the arithmetic
    assert row["mfu"] == pytest.approx(2.0)


def test_mfu_of_a_critic_of_unknown_size_is_called_a_lower_bound(tmp_path):
    # PPO: values and update_critic timed; 1 GPU at a toy 1e13 peak, 1000 tokens a step
    step = {
        "timing_s/gen": 4,
        "timing_s/ref": 1,
        "timing_s/values": 1,
        "timing_s/update_critic": 2,
        "timing_s/update_actor": 2,
        "timing_s/step": 10,
        "perf/total_num_tokens": 1000,
    }
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e13}}
    r = mfu.analyze(make_run(tmp_path / "unknown", meta, {0: step}))
    # gen 2N + ref 2N + update_actor 6N only: 10 * 1e9 * 1000 / (10 s * 1e13) = 0.1, the critic's 8 N_c left out
    assert r.mfu == pytest.approx(0.1) and r.uncounted == ("values", "update_critic")
    (f,) = [f for f in r.findings if f.id == "mfu-waterfall"]
    assert f.evidence["uncounted"] == ["values", "update_critic"]
    assert "values, update_critic" in f.recommendation and "critic_params" in f.recommendation
    meta["model"]["critic_params"] = 1e9
    r = mfu.analyze(make_run(tmp_path / "known", meta, {0: step}))
    # + values 2 N_c + update_critic 6 N_c: 18 * 1e9 * 1000 / 1e14 = 0.18
    assert r.mfu == pytest.approx(0.18) and r.uncounted == ()
    (f,) = [f for f in r.findings if f.id == "mfu-waterfall"]
    assert "critic_params" not in f.recommendation


def test_every_verl_mfu_key_the_cross_check_reads_is_one_verl_logs():
    spec = importlib.util.find_spec("verl")
    if spec is None or spec.origin is None:
        pytest.skip("verl is not installed")
    source = "".join(p.read_text(errors="replace") for p in Path(spec.origin).parent.rglob("*.py"))
    assert set(mfu.VERL_MFU_KEYS) <= set(re.findall(r"[\"'](perf/mfu/\w+)[\"']", source))


def test_mfu_cross_check_with_verl(tmp_path):
    steps = {s: EIGHT_B_STEP | {"perf/mfu/actor": 0.1} for s in range(2)}
    r = mfu.analyze(make_run(tmp_path / "r", H100_64, steps))
    # verl 0.1 vs rlscope 6N * tokens / (136 s * 64 * peak) = 0.3976: ratio 0.25, outside [0.5, 2]
    assert r.cross_check.loc["perf/mfu/actor", "ratio"] == pytest.approx(0.1 / 0.3976, abs=1e-3)
    assert "mfu-cross-check-mismatch" in ids(r)
    steps = {0: EIGHT_B_STEP | {"perf/mfu/actor": 0.35}}
    assert "mfu-cross-check-mismatch" not in ids(mfu.analyze(make_run(tmp_path / "ok", H100_64, steps)))


def test_mfu_needs_model_and_gpus(tmp_path):
    r = mfu.analyze(make_run(tmp_path / "r", {}, {0: EIGHT_B_STEP}))
    assert r.per_step.empty and r.findings == []


def test_mfu_without_step_timers_says_so(tmp_path):
    # every fact and the tokens, but no step timed: MFU (FLOPs over GPU-seconds) has no seconds
    tokens = {"perf/total_num_tokens": EIGHT_B_STEP["perf/total_num_tokens"]}
    r = mfu.analyze(make_run(tmp_path / "untimed", H100_64, dict.fromkeys(range(4), tokens)))
    assert math.isnan(r.mfu) and r.missing == (
        "training-step timers (timing_s/* other than validation, checkpoint and profiling timers)",
    )
    # timers and tokens, but never in the same step
    apart = {0: tokens, 1: {"timing_s/step": 810.0, "timing_s/gen": 602.0}}
    r = mfu.analyze(make_run(tmp_path / "apart", H100_64, apart))
    assert math.isnan(r.mfu) and r.missing == ("tokens per step in the steps that have timers",)
    # a step timer alone (or stage timers of 0 s): no stage is known to have computed, so no FLOPs, not 0%
    computes = "a timer above zero of a stage that computes (timing_s/gen, old_log_prob, ref, update_actor)"
    for name, timers in (
        ("step-only", {"timing_s/step": 810.0}),
        ("zeros", {"timing_s/gen": 0.0, "timing_s/step": 0.0}),
    ):
        r = mfu.analyze(make_run(tmp_path / name, H100_64, dict.fromkeys(range(4), tokens | timers)))
        assert math.isnan(r.mfu) and r.missing == (computes,), name


# -- topology --------------------------------------------------------------------------


def test_topology_8b_colocated_recommends_async(eight_b):
    r = topology.analyze(eight_b)
    assert r.model == topology.StepModel(406, 196, 208, 64)
    assert r.what_if.loc["async_streaming", ["n_rollout", "n_train"]].tolist() == [42, 22]
    assert r.what_if.loc["one_step_overlap", "n_rollout"] == 46
    assert r.async_speedup == pytest.approx(810 / 614)
    (f,) = r.findings
    assert f.id == "async-recommended" and f.severity is Severity.INFO  # 1.31x < 1.5x
    assert f.recommendation.startswith("switching to async streaming at 42:22 predicts 810 s -> 619 s (1.31x)")


def test_an_async_recommendation_on_an_estimated_tail_says_so(tmp_path, eight_b):
    measured = topology.analyze(eight_b).findings[0].recommendation
    assert "estimated" not in measured
    # no trajectories: the tail comes from response lengths (mean 8K, max 32K)
    step = {**EIGHT_B_STEP, "response_length/mean": 8192, "response_length/max": 32768}
    r = topology.analyze(make_run(tmp_path / "est", {**H100_64, "topology": "colocated"}, {0: step}))
    (f,) = [f for f in r.findings if f.id == "async-recommended"]
    assert "estimated from response lengths: log trajectories to measure it" in f.recommendation


def test_topology_separated_sync_at_46_18(tmp_path):
    # measured on the pools: generation on 46 GPUs 406 * 64/46 + 196 = 760.87 s (t90 564.87),
    # training on 18 GPUs 208 * 64/18 = 739.56 s; step 1500.43 s. Scaled back: T_thr 406, T_t 208.
    gen46, train18 = 406 * 64 / 46 + 196, 208 * 64 / 18
    steps = {0: {"timing_s/gen": gen46, "timing_s/update_actor": train18, "timing_s/step": gen46 + train18}}
    finish = [100, 200, 300, 400, 450, 500, 520, 540, 406 * 64 / 46, gen46]
    meta = {**H100_64, "topology": "separated", "split": "46:18"}
    r = topology.analyze(make_run(tmp_path / "r", meta, steps, {0: finish_rows(finish)}))
    m = r.model
    assert (m.t_thr_s, m.t_tail_s, m.t_train_s) == (pytest.approx(406), pytest.approx(196), pytest.approx(208))
    assert r.current == "separated_sync" and r.step_now_s == pytest.approx(1500.43, abs=0.01)
    found = {f.id: f for f in r.findings}
    # best separated-sync split 37:27 = 1391.31 s (see the formula tests): move 9 GPUs to training
    assert found["split-imbalanced"].recommendation == (
        "move 9 GPUs from rollout to training: the model predicts 1,391 s a step, against 1,500 s modelled for 46:18, "
        "1,500 s measured"
    )
    # the title names the baseline its speedup is over: the current topology rebalanced, not the step now
    assert found["async-recommended"].title == (
        "async streaming at 42:22 predicts 619 s a step, 2.25x the 1,391 s of the current topology rebalanced to 37:27"
    )
    assert r.overlap_bound == pytest.approx((gen46 + train18) / gen46)  # each side on its own pool
    assert "one-step overlap at 46:18 predicts 1,500 s -> 761 s (1.97x)" in found["separated-sync"].recommendation
    # async is credited beyond rebalancing: from separated sync at 37:27, 406 * 64/37 + 196 + 208 * 64/27
    # = 1391.31 s, to async at 42:22, max(406 * 64/42, 208 * 64/22) = 618.67 s: 2.25x >= 1.5x
    rebalanced, async_s = 406 * 64 / 37 + 196 + 208 * 64 / 27, max(406 * 64 / 42, 208 * 64 / 22)
    assert found["async-recommended"].severity is Severity.WARN
    assert found["async-recommended"].evidence["speedup"] == pytest.approx(rebalanced / async_s)
    assert found["async-recommended"].recommendation.startswith(
        "switching to async streaming at 42:22 predicts 1,391 s -> 619 s (2.25x), beyond rebalancing the current "
        "split (1,500 s modelled now, 1,500 s measured)"
    )


def test_topology_of_one_gpu_is_colocation_alone(tmp_path):
    # one GPU cannot hold a rollout pool and a training pool: only colocation is predicted
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1}, "topology": "colocated"}
    r = topology.analyze(make_run(tmp_path / "r", meta, {0: EIGHT_B_STEP}, {0: finish_rows(EIGHT_B_FINISH)}))
    assert r.what_if.index.tolist() == ["colocated"] and r.what_if.loc["colocated", "step_s"] == pytest.approx(810)
    assert not [f for f in r.findings if f.id == "async-recommended"]


def test_topology_colocate_async_has_no_split_to_move(tmp_path):
    # verl's colocate_async shares all GPUs: no split to move; its GPUs take turns, so in GPU time it is
    # the colocated row (406 + 196 + 208 = 810 s), and async streaming on separate pools is DOMAIN's
    # 42:22 at ~619 s, which is what it is told
    meta = {**H100_64, "topology": "colocate_async", "split": {"rollout": 64, "train": 64}}
    run = make_run(tmp_path / "r", meta, {0: EIGHT_B_STEP}, {0: finish_rows(EIGHT_B_FINISH)})
    r = topology.analyze(run)
    assert r.current == "colocated" and r.shared and r.n_rollout is None and r.model is not None
    assert r.step_now_s == pytest.approx(810) and r.what_if.loc["colocated", "speedup"] == pytest.approx(1.0)
    assert ids(r) == ["async-recommended"] and r.what_if.loc["async_streaming", "n_rollout"] == 42
    said = r.findings[0].recommendation  # its samples are stale already: it is told about pools
    assert said.startswith("moving to separate pools at 42:22 predicts 810 s -> ") and "become stale" not in said
    assert ": training stops taking turns with generation and its 196 s tail (" in said
    doc = build_document(analyze_run(run), RunReader(run), run)
    assert doc["run"]["topology"] == "colocate_async" and doc["topology"]["current"] == "colocated"
    assert doc["topology"]["shared"] is True and doc["run"]["split"] is None and doc["run"]["warnings"] == []
    # without a GPU count there is no model, and the run is still said to be colocate_async
    bare = make_run(tmp_path / "bare", {"topology": "colocate_async"}, {0: EIGHT_B_STEP})
    doc = build_document(analyze_run(bare), RunReader(bare), bare)
    assert doc["run"]["topology"] == "colocate_async" and doc["topology"]["shared"] is True


# 8 GPUs; per step gen 100 s, old_log_prob 10, ref 10, update_actor 30, update_weights 2.
# 20 trajectories: 18 finish by 60 s (t90 = the 18th = 60 s), then 80 and 100 s: T_thr 60, T_tail 40, f = 0.4
ASYNC_STEP = {
    "timing_s/gen": 100.0,
    "timing_s/old_log_prob": 10.0,
    "timing_s/ref": 10.0,
    "timing_s/update_actor": 30.0,
    "timing_s/update_weights": 2.0,
    "perf/total_num_tokens": 20 * 1100,
}
ASYNC_FINISH = [i * 60 / 18 for i in range(1, 19)] + [80.0, 100.0]


def _async_run(path, meta, step_s):
    steps = {s: {**ASYNC_STEP, "timing_s/step": step_s} for s in range(8)}
    return make_run(path, meta, steps, dict.fromkeys(range(8), finish_rows(ASYNC_FINISH)))


def test_colocate_async_is_modelled_from_its_generation_timer_not_stacked_tails(tmp_path):
    # colocate_async takes turns on all 8 GPUs, 152 s a step. DOMAIN's colocated T = T_thr + T_tail
    # + T_t + T_sync = 60 + 40 + (10 + 10 + 30) + 2 = 152 s: the model's step now, the measured one.
    # Async streaming on separate pools, T = max(T_thr n/n_r, T_t n/n_t): at 4:4 max(120, 100) = 120 s;
    # 5:3 max(96, 133.3); 3:5 max(160, 80): best 4:4, 152 / 120 = 1.27x
    meta = {"model": {"active_params": 7e9}, "gpu": {"type": "H100", "count": 8}, "topology": "colocate_async"}
    run = _async_run(tmp_path / "r", {**meta, "split": "8:8"}, 152.0)
    r = topology.analyze(run)
    assert (r.model.t_thr_s, r.model.t_tail_s, r.model.t_train_s, r.model.t_sync_s) == pytest.approx((60, 40, 50, 2))
    assert r.step_now_s == pytest.approx(152) and r.what_if.loc["colocated", "step_s"] == pytest.approx(152)
    best = r.what_if.loc["async_streaming"]
    assert (best["n_rollout"], best["n_train"], best["step_s"]) == (4, 4, pytest.approx(120))
    assert best["speedup"] == pytest.approx(152 / 120)
    # rollout (tail included: the GPUs take turns) against learner: (100 + 50) / 100
    assert r.overlap_bound == pytest.approx(1.5)
    head = build_document(analyze_run(run), RunReader(run), run)["headline"]
    assert head["step_s_model"] == pytest.approx(152)
    assert head["best_topology"] == {
        "topology": "async_streaming",
        "n_rollout": 4,
        "n_train": 4,
        "step_s": pytest.approx(120),
        "speedup": pytest.approx(152 / 120),
        "improves": True,
    }


def test_a_run_that_ties_for_the_shortest_step_is_the_best_as_it_is(tmp_path):
    # async 4:4, rollout pool busy half the 100 s step, training 50 s, no tail: on 8 GPUs T_thr 25,
    # T_t 25; colocated 25 + 25 = 50 s and async at 4:4 max(25 x 2, 25 x 2) = 50 s tie: the run as it is
    meta = {"gpu": {"type": "H100", "count": 8}, "topology": "async", "split": "4:4"}
    step = {"timing_s/gen": 90.0, "timing_s/update_actor": 50.0, "timing_s/step": 100.0}
    steps = {s: {**step, "fully_async/rollouter/idle_ratio": 0.5} for s in range(4)}
    run = make_run(tmp_path / "tie", meta, steps)
    doc = build_document(analyze_run(run), RunReader(run), run)
    (row,) = [v for k, v in headline_rows(doc) if k == "best topology"]
    assert (
        row
        == "async streaming at 4:4: 50 s modelled (100 s measured), as the run is now: the fastest option the model sees"
    )
    # colocate_async on one GPU: the colocated row is the run as it is, and is named as the run
    shared = make_run(
        tmp_path / "ca1", {**meta, "gpu": {"type": "H100", "count": 1}, "topology": "colocate_async"}, steps
    )
    doc = build_document(analyze_run(shared), RunReader(shared), shared)
    (row,) = [v for k, v in headline_rows(doc) if k == "best topology"]
    assert row.startswith("colocate async: ") and row.endswith(", as the run is now: the fastest option the model sees")
    # a run of validation records only has no training step to model
    val = make_run(
        tmp_path / "val", {**meta, "topology": "colocated"}, {s: {"timing_s/testing": 30.0} for s in range(3)}
    )
    assert topology.analyze(val).missing == (
        "the what-if needs training steps: the run's timers are validation or checkpointing only"
    )


def test_async_on_separate_pools_without_the_pool_s_busy_time_has_no_model(tmp_path):
    # async 4:4 without verl's rollouter idle ratio (verl's v1 separate_async logs none): its gen timer
    # (100 s) is the trainer's wait for samples, not the pool's time. Taken as busy the whole step, the
    # pool would be every such run's bottleneck and every split advice a move towards it: no model,
    # no split advice, and the reports say what is missing
    meta = {"model": {"active_params": 7e9}, "gpu": {"type": "H100", "count": 8}, "topology": "async", "split": "4:4"}
    run = _async_run(tmp_path / "r", meta, 102.0)
    d = analyze_run(run)
    assert d.topology.model is None and "fully_async/rollouter/idle_ratio" in d.topology.missing
    assert d.drift.per_step.empty and not {"split-imbalanced", "split-drift", "async-recommended"} & set(ids(d))
    (fall,) = [f for f in d.findings if f.id == "mfu-waterfall"]  # MFU needs no pool times, its split of causes does
    assert (
        fall.evidence["rollout_pool_assumed_busy"]
        and "decode throughput holds whatever time it idled" in fall.recommendation
    )
    doc = build_document(d, RunReader(run), run)
    assert doc["headline"]["best_topology"] is None and doc["topology"]["missing"] == d.topology.missing
    (row,) = [v for k, v in headline_rows(doc) if k == "best topology"]
    assert row.startswith("n/a (the what-if of an async run on separate pools needs the rollout pool's busy time")
    # with the ratio (rollouter idle 25%): the pool is busy 0.75 x 102 = 76.5 s, 38.25 s on all 8 GPUs
    ratio = {s: {**ASYNC_STEP, "timing_s/step": 102.0, "fully_async/rollouter/idle_ratio": 0.25} for s in range(8)}
    r = topology.analyze(make_run(tmp_path / "ratio", meta, ratio, dict.fromkeys(range(8), finish_rows(ASYNC_FINISH))))
    assert r.missing is None and r.model.t_thr_s == pytest.approx(0.75 * 102 * 4 / 8)
    # and without a split, nothing says which GPUs each side had
    nosplit = topology.analyze(_async_run(tmp_path / "nosplit", {**meta, "split": None}, 102.0))
    assert nosplit.model is None and "rollout:train split" in nosplit.missing
    # one GPU has no split to give: verl gives each pool a GPU at least, so meta.json is wrong
    one = topology.analyze(
        _async_run(tmp_path / "one", {**meta, "gpu": {"type": "H100", "count": 1}, "split": None}, 102.0)
    )
    assert one.model is None and one.missing == (
        "an async run on separate pools needs 2 GPUs or more, but meta.json's gpu.count is 1"
    )


def test_mfu_of_an_overlapped_run_without_a_split_is_over_the_whole_step(tmp_path):
    # one-step overlap, no split: gen 100 s runs beside the 102 s step. Useful FLOPs a step:
    # 22,000 tokens x (2 + 2 + 2 + 6) x 7e9 = 1.848e15, 1.848 GPU-s at 1e15 FLOP/s. DOMAIN/docs:
    # MFU = useful / (n x step x peak) = 1.848 / (8 x 102) = 0.2265%, not 1.848 / (8 x 152)
    meta = {"model": {"active_params": 7e9}, "gpu": {"count": 8, "peak_flops": 1e15}, "topology": "one_step_overlap"}
    m = mfu.analyze(_async_run(tmp_path / "r", meta, 102.0))
    useful, budget = 22_000 * 12 * 7e9 / 1e15, 8 * 102
    assert m.mfu == pytest.approx(useful / budget)
    assert m.per_step["mfu"].tolist() == pytest.approx([useful / budget] * 8)
    # the ledger charges every phase to all 8 GPUs, 8 x 152 GPU-s: each cause's lost GPU-s are scaled
    # alike to the 816 - 1.848 the step leaves; the tail's 8 x 40 of 8 x 152 - 1.848 lost
    assert m.waterfall.sum() == pytest.approx(100 - 100 * m.mfu) and m.waterfall["idle_other"] == pytest.approx(0)
    assert m.waterfall["long_tail"] == pytest.approx(100 * (8 * 40) / (8 * 152 - useful) * (budget - useful) / budget)
    assert m.scaled and "no usable rollout:train split in meta.json" in m.findings[0].recommendation


def test_a_best_topology_is_a_gain_only_against_the_model_s_step_now(tmp_path):
    # colocated on one GPU: only colocation is predicted, 100 + 50 = 150 s, the step the model gives
    # now: the best topology is the run as it is, never shown as a gain
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1}, "topology": "colocated"}
    steps = {s: {"timing_s/gen": 100.0, "timing_s/update_actor": 50.0, "timing_s/step": 120.0} for s in range(4)}
    run = make_run(tmp_path / "r", meta, steps)
    doc = build_document(analyze_run(run), RunReader(run), run)
    best = doc["headline"]["best_topology"]
    assert best["topology"] == "colocated" and best["step_s"] == pytest.approx(150) and best["improves"] is False
    (row,) = [v for k, v in headline_rows(doc) if k == "best topology"]
    assert row == "colocated: 150 s modelled (120 s measured), as the run is now: the fastest option the model sees"
    # DOMAIN's 8B run with a step timer of 600 s (its stage timers overlap): async at 42:22 is ~619 s
    # against the 810 s modelled, model against model as the async-recommended finding says (1.31x);
    # the measured 600 s is said beside it
    steps = {key: {**EIGHT_B_STEP, "timing_s/step": 600} for key in range(4)}
    run = make_run(
        tmp_path / "8b",
        {**H100_64, "topology": "colocated"},
        steps,
        dict.fromkeys(range(4), finish_rows(EIGHT_B_FINISH)),
    )
    d = analyze_run(run)
    doc = build_document(d, RunReader(run), run)
    best = doc["headline"]["best_topology"]
    assert (best["topology"], best["n_rollout"], best["improves"]) == ("async_streaming", 42, True)
    assert best["step_s"] == pytest.approx(619, rel=0.01) and best["speedup"] == pytest.approx(1.31, abs=0.01)
    (row,) = [v for k, v in headline_rows(doc) if k == "best topology"]
    assert row.startswith("async streaming at 42:22: ") and row.endswith("x the 810 s it models now (600 s measured)")
    assert "810 s -> " in next(f for f in d.findings if f.id == "async-recommended").recommendation


def test_the_run_s_own_best_topology_is_said_to_be_modelled_beside_the_measured_step(tmp_path):
    # log 12's shape: colocated on one GPU, gen 30 s + update 18 s = 48 s modelled, 48.7 s measured
    # (within 10%: no measured aside), the step time two rows up; the 48 s must read as the model's
    meta = {"gpu": {"type": "H100", "count": 1}, "topology": "colocated"}
    steps = {s: {"timing_s/gen": 30.0, "timing_s/update_actor": 18.0, "timing_s/step": 48.7} for s in range(4)}
    run = make_run(tmp_path / "r", meta, steps)
    rows = dict(headline_rows(build_document(analyze_run(run), RunReader(run), run)))
    assert rows["step time"].startswith("48.7 s")
    assert rows["best topology"] == "colocated: 48 s modelled, as the run is now: the fastest option the model sees"


def test_a_step_without_the_rollouter_idle_ratio_takes_its_neighbours(tmp_path):
    # logged at steps 1 and 3 only: 0.2, 0.4. Busy shares 1 - idle: step 0 takes the next
    # logged (0.8), step 2 the last logged (0.8), step 4 the last (0.6); never logged: 1.0
    steps = {s: {"timing_s/step": 100.0} for s in range(5)}
    steps[1]["fully_async/rollouter/idle_ratio"] = 0.2
    steps[3]["fully_async/rollouter/idle_ratio"] = 0.4
    frames = load(make_run(tmp_path / "r", {"topology": "async"}, steps))
    assert topology.async_busy_share(frames.steps).tolist() == pytest.approx([0.8, 0.8, 0.8, 0.6, 0.6])
    never = load(make_run(tmp_path / "never", {"topology": "async"}, {0: {"timing_s/step": 100.0}}))
    assert topology.async_busy_share(never.steps).tolist() == [1.0]


def _idle_run(path, rollouter_idle):
    # async 8:8 on 16 GPUs, 100 s steps with forward + training 10 + 40 = 50 s on the 8 training
    # GPUs, verl's rollouter idle ratio per step as given (no occupancy share: verl before 0.9.1)
    meta = {"gpu": {"type": "H100", "count": 16}, "topology": "fully_async", "split": "8:8"}
    step = {"timing_s/gen": 5.0, "timing_s/old_log_prob": 10.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0}
    steps = {s: {**step, "fully_async/trainer/idle_ratio": 0.05} for s in rollouter_idle}
    for s, idle in rollouter_idle.items():
        steps[s]["fully_async/rollouter/idle_ratio"] = idle
    return make_run(path, meta, steps)


def test_a_rollouter_idle_ratio_above_one_is_read_as_not_logged(tmp_path):
    # steps 1-9, idle 0.5 but 1.1 at steps 3 and 8 (no share of a step is 110%) and 0.2 at step 9.
    # Step 1 fills the pipeline: the model is of steps 2-9, its recent quarter steps 8 and 9. Step 8
    # takes the last idle ratio logged, step 7's 0.5: busy 0.5 x 100 = 50 s; step 9 0.8 x 100 = 80 s.
    # T_thr = (50 + 80) / 2 = 65 s on the 8 rollout GPUs, 32.5 s on all 16; T_t = 50 x 8/16 = 25 s.
    # Async T = max(32.5 x 16/r, 25 x 16/(16 - r)): r = 8: 65; r = 9: max(57.8, 57.1) = 520/9; r = 10:
    # max(52, 66.7): 9:7. (Read as 1.1, step 8 would be busy -10 s: T_thr (-10 + 80) / 2 x 8/16 = 17.5 s)
    idle = {s: 0.5 for s in range(1, 10)} | {3: 1.1, 8: 1.1, 9: 0.2}
    run = _idle_run(tmp_path / "r", idle)
    frames = load(run)
    assert frames.steps["fully_async/rollouter/idle_ratio"].isna().tolist() == [s in (3, 8) for s in range(1, 10)]
    assert frames.out_of_range == {"fully_async/rollouter/idle_ratio": ((3, 1.1), (8, 1.1))}
    d = analyze_run(run)
    r = d.topology
    assert (r.model.t_thr_s, r.model.t_train_s) == pytest.approx((32.5, 25.0))
    best = r.what_if.loc["async_streaming"]
    assert (best["n_rollout"], best["n_train"], best["step_s"]) == (9, 7, pytest.approx(520 / 9))
    # the balanced split per step: steps 3 and 8 at busy 50 s (25 s on all 16 GPUs) as their neighbours
    assert d.drift.per_step["t_thr_s"].to_dict() == pytest.approx({**dict.fromkeys(range(2, 9), 25.0), 9: 40.0})
    assert r.out_of_range == frames.out_of_range


def test_shares_in_range_are_read_as_logged(tmp_path):
    # 0 and 1 are shares; so is 1 + 1e-7 (float32 rounding of 1, as TensorBoard keeps it), read as 1
    idle = {1: 0.0, 2: 1.0, 3: 1 + 1e-7, 4: 0.25}
    frames = load(_idle_run(tmp_path / "r", idle))
    assert frames.steps["fully_async/rollouter/idle_ratio"].tolist() == [0.0, 1.0, 1.0, 0.25]
    assert frames.steps["fully_async/trainer/idle_ratio"].tolist() == [0.05] * 4
    assert frames.out_of_range == {}
    assert topology.async_busy_share(frames.steps).tolist() == pytest.approx([1.0, 0.0, 0.0, 0.75])


def _verl_async_run(path, steps, *, utilization=True):
    # verl 0.9.1's fully async trainer logs two records per policy version, both at step =
    # current_param_version: reset_staleness()'s timing_raw (the rollouter's time-based active_time,
    # version_time, idle_ratio and its occupancy share), then the aggregated trainer metrics
    meta = {"model": {"active_params": 7e9}, "gpu": {"type": "H100", "count": 16, "peak_flops": 1e15}}
    with Recorder(path, meta={**meta, "topology": "fully_async", "split": "8:8"}) as rec:
        for step in steps:
            reset = {
                "fully_async/rollouter/active_time": 90.0,
                "fully_async/rollouter/version_time": 100.0,
                "fully_async/rollouter/idle_ratio": 1 - 90.0 / 100.0,
                "fully_async/rollouter/step_generated_samples": 64,
            }
            if utilization if isinstance(utilization, bool) else step in utilization:
                reset["dynamic_resource/rollout_resource_utilization"] = 0.6
            rec.log_step(step, reset)
            rec.log_step(
                step,
                {
                    "timing_s/gen": 5.0,  # the trainer's wait for samples, not the pool's time
                    "timing_s/old_log_prob": 10.0,
                    "timing_s/update_actor": 40.0,
                    "timing_s/step": 100.0,
                    "perf/total_num_tokens": 20_000,
                    "fully_async/trainer/idle_ratio": 0.05,
                },
            )
    return str(path)


def test_async_busy_time_is_verl_s_occupancy_share_not_its_time_based_idle_ratio(tmp_path):
    # 16 GPUs, async 8:8, 100 s versions. The rollouter was active 90 of them (idle_ratio 0.1, by time:
    # it drained at part occupancy before idling) but its occupancy share is 0.6. DOMAIN's T_thr is
    # generation at full concurrency: 0.6 x 100 = 60 s on the 8-GPU pool, 60 x 8/16 = 30 s on all 16;
    # forward + training 10 + 40 = 50 s on 8, 25 s on all 16. Async: T = max(30 x 16/r, 25 x 16/(16 - r)):
    # r = 8: max(60, 50) = 60; r = 9: max(53.3, 57.1) = 57.1; r = 10: max(48, 66.7) = 66.7 -> 9:7, 400/7 s.
    # (1 - idle_ratio) would give T_thr 45 s and 10:6 (max(72, 66.7) = 72 s), leaning to rollout
    r = topology.analyze(_verl_async_run(tmp_path / "r", range(1, 9)))
    assert r.missing is None and (r.model.t_thr_s, r.model.t_train_s) == pytest.approx((30.0, 25.0))
    best = r.what_if.loc["async_streaming"]
    assert (best["n_rollout"], best["n_train"], best["step_s"]) == (9, 7, pytest.approx(400 / 7))
    assert r.step_now_s == pytest.approx(60.0) and not r.busy_upper_bound
    # the MFU ledger charges the pool the same busy time: decode 60 s of each 100 s step on 8 GPUs
    m = mfu.analyze(_verl_async_run(tmp_path / "m", range(1, 9)))
    (fall,) = [f for f in m.findings if f.id == "mfu-waterfall"]
    assert not fall.evidence["rollout_pool_busy_upper_bound"]


def test_async_busy_time_falls_back_to_the_idle_ratio_as_an_upper_bound(tmp_path):
    # step 1 without the occupancy share (a record of verl before 0.9.1): its busy share is 1 - idle_ratio,
    # 0.9; the others 0.6. And a run that never logs it takes 1 - 0.1 = 0.9 everywhere: T_thr 0.9 x 100
    # x 8/16 = 45 s, 10:6 at max(45 x 16/10, 25 x 16/6) = 72 s against max(90, 50) = 90 s at 8:8, said
    # to be an upper bound that counts the pool's draining tail as busy
    first = load(_verl_async_run(tmp_path / "first", range(1, 5), utilization={2, 3, 4}))
    assert topology.async_busy_share(first.steps).tolist() == pytest.approx([0.9, 0.6, 0.6, 0.6])
    assert topology.async_busy_bounded(first.steps)
    run = _verl_async_run(tmp_path / "old", range(1, 9), utilization=False)
    d = analyze_run(run)
    r = d.topology
    assert r.busy_upper_bound and r.model.t_thr_s == pytest.approx(45.0)
    best = r.what_if.loc["async_streaming"]
    assert (best["n_rollout"], best["n_train"], best["step_s"]) == (10, 6, pytest.approx(72.0))
    (split,) = [f for f in r.findings if f.id == "split-imbalanced"]
    assert split.evidence["busy_upper_bound"] and "an upper bound that counts its draining tail" in split.recommendation
    (fall,) = [f for f in d.findings if f.id == "mfu-waterfall"]
    assert fall.evidence["rollout_pool_busy_upper_bound"] and "draining tail" in fall.recommendation
    assert build_document(d, RunReader(run), run)["topology"]["busy_upper_bound"] is True


def test_colocate_async_without_a_gpu_count_shares_its_gpus():
    facts = RunFrames(pd.DataFrame(), meta={"topology": "colocate_async", "split": "8:8"}).facts
    assert facts.n_gpus == 8 and not facts.is_pooled and facts.kind == "async_streaming"


def test_topology_async_idle_ratios(tmp_path):
    steps = {s: {"rollouter/idle_ratio": 0.3, "trainer/idle_ratio": 0.02} for s in range(3)}
    r = topology.analyze(make_run(tmp_path / "r", {"topology": "separate_async"}, steps))
    (f,) = r.findings
    assert f.id == "async-idle-imbalanced" and f.evidence["target"] == "trainer"
    assert r.model is None


# -- engine balance and sync bubble ------------------------------------------------------


def test_engine_imbalance_and_sync_bubble(tmp_path):
    # engine e0 carries 2600 tokens, e1..e7 1400 each (two trajectories per engine):
    # mean (2600 + 7 * 1400) / 8 = 1550, utilisation 1550 / 2600 = 0.596;
    # variance (1050^2 + 7 * 150^2) / 8 = 157,500, std 396.86, CV 0.256 (>= 0.25: critical)
    loads = {"e0": 2600, **{f"e{i}": 1400 for i in range(1, 8)}}
    rows = [
        {"traj_id": f"{e}-{j}", "engine": e, "response_tokens": load // 2}
        for e, load in loads.items()
        for j in range(2)
    ]
    steps = {0: {"timing_s/update_actor": 10, "timing_s/update_weights": 3, "timing_s/gen": 20}}
    meta = {"topology": "separated", "split": {"rollout": 6, "train": 2}}
    r = sync_balance.analyze(make_run(tmp_path / "r", meta, steps, {0: rows}))
    e = r.engines.loc[0]
    assert e["n_engines"] == 8 and e["utilisation"] == pytest.approx(1550 / 2600)
    assert e["cv"] == pytest.approx(0.2560, abs=1e-4) and r.load_unit == "response_tokens"
    # bubble 3 / (1 * 10 + 3) = 0.2308 (warn: 10-25%)
    assert r.bubble == pytest.approx(3 / 13) and r.k == 1
    found = {f.id: f for f in r.findings}
    assert found["engine-imbalanced"].severity is Severity.CRITICAL
    assert found["sync-bubble"].severity is Severity.WARN
    # one update per sync is "1 step", not "1 step(s)"; syncing every 2 would be 3 / (2 * 10 + 3) = 13%
    assert found["sync-bubble"].title.endswith("(3 s per sync, after 1 step of 10 s updates)")
    assert "stalls the trainer 3 s per 1 step of 10 s updates (23%)" in found["sync-bubble"].recommendation
    assert "sync every 2 steps (13%" in found["sync-bubble"].recommendation


def test_an_engine_that_stops_serving_counts_at_load_zero(tmp_path):
    # 8 engines serve 100 tokens each in steps 0 and 7; in steps 1-6 e4..e7 serve nothing.
    # Those steps: loads 100 x 4 and 0 x 4: mean 50, max 100, utilisation 0.5, std 50, CV 1.0
    every = [{"traj_id": f"e{i}", "engine": f"e{i}", "response_tokens": 100} for i in range(8)]
    half = every[:4]
    traj = {s: every if s in (0, 7) else half for s in range(8)}
    steps = {s: {"timing_s/gen": 10} for s in range(8)}
    r = sync_balance.analyze(make_run(tmp_path / "r", {}, steps, traj))
    assert r.engines["n_engines"].tolist() == [8] * 8 and r.engines["starved"].tolist() == [0] + [4] * 6 + [0]
    assert r.engines["utilisation"].tolist() == pytest.approx([1.0] + [0.5] * 6 + [1.0])
    assert r.engines["cv"].tolist() == pytest.approx([0.0] + [1.0] * 6 + [0.0])
    # the last quarter (steps 6, 7): mean CV 0.5
    (f,) = r.findings
    assert f.id == "engine-imbalanced" and f.severity is Severity.CRITICAL
    assert f.recommendation.startswith("up to 4 engines served nothing in 1 of the last 2 steps")
    # engines renamed by a restart (or added, or removed) are not starved outside the steps they served
    renamed = [{**row, "engine": "new-" + row["engine"]} for row in every]
    r = sync_balance.analyze(make_run(tmp_path / "re", {}, steps, {s: every if s < 4 else renamed for s in range(8)}))
    assert r.engines["n_engines"].tolist() == [8] * 8 and r.engines["starved"].tolist() == [0] * 8
    assert r.findings == []


@pytest.mark.parametrize(
    ("unit", "nothing"),
    [("response_tokens", 0), ("gen_s", None)],  # trajectories of no tokens; of no time logged (a gap adds 0)
)
def test_an_engine_whose_trajectories_add_no_load_still_served(tmp_path, unit, nothing):
    # e0, e1 carry 100 each in every step; e2's rows in step 1 add nothing: loads (100, 100, 0),
    # mean 200/3, population std sqrt(((100/3)^2 * 2 + (200/3)^2) / 3) = 100 sqrt(2) / 3, CV 1/sqrt(2).
    # e2 is there (it served those rows), not starved.
    def rows(load_of_e2):
        return [
            {"traj_id": f"{e}-{i}", "engine": e, unit: 50 if e != "e2" else load_of_e2}
            for e in ("e0", "e1", "e2")
            for i in range(2)
        ]

    traj = {0: rows(50), 1: rows(nothing), 2: rows(50)}
    r = sync_balance.analyze(make_run(tmp_path / "r", {}, {s: {"timing_s/gen": 10} for s in range(3)}, traj))
    assert r.load_unit == unit
    assert r.engines["n_engines"].tolist() == [3, 3, 3] and r.engines["starved"].tolist() == [0, 0, 0]
    assert r.engines["cv"].tolist() == pytest.approx([0.0, 2**-0.5, 0.0])
    assert r.engines["utilisation"].tolist() == pytest.approx([1.0, 2 / 3, 1.0])


def test_a_sync_without_an_update_timer_has_no_bubble(tmp_path):
    # T_sync / (k T_mb + T_sync) needs T_mb: without it the bubble is unknown, not 100%
    steps = {s: {"timing_s/gen": 20, "timing_s/update_weights": 3, "timing_s/step": 23} for s in range(4)}
    r = sync_balance.analyze(make_run(tmp_path / "r", {"topology": "separated", "split": "6:2"}, steps))
    assert r.t_sync_s == 3 and r.bubble != r.bubble and r.findings == []


def test_sync_every_k_steps(tmp_path):
    # a 6 s sync every 3rd step of 10 s updates: 6 / (3 * 10 + 6) = 1/6
    steps = {s: {"timing_s/update_actor": 10, "timing_s/param_sync": 6 if s % 3 == 2 else 0} for s in range(12)}
    r = sync_balance.analyze(make_run(tmp_path / "r", {}, steps))
    assert r.k == 3 and r.t_sync_s == 6 and r.bubble == pytest.approx(1 / 6)
    # colocated (no topology in meta): the bubble is measured but not a finding
    assert r.findings == []


# -- staleness -------------------------------------------------------------------------


def _stale_rows():
    # lags 0..9 (trainer version 20), lengths 100..1000 growing with the lag
    return [
        {"traj_id": str(i), "trainer_version": 20, "policy_version_start": 20 - i, "response_tokens": 100 * (i + 1)}
        for i in range(10)
    ]


def test_staleness_distribution_and_drop_bias(tmp_path):
    r = staleness.analyze(make_run(tmp_path / "r", {}, {}, {0: _stale_rows()}))
    row = r.per_step.loc[0]
    # p90: the 9th of 10 sorted lags = 8; mean 4.5; one of ten above 8
    assert (row["n"], row["mean"], row["p50"], row["p90"], row["max"]) == (10, 4.5, 4, 8, 9)
    assert row["over_threshold"] == pytest.approx(0.1)
    assert r.length_correlation == pytest.approx(1.0)
    assert r.drop.bias == 2.0  # 1000 dropped vs mean(100..900) = 500 kept
    assert {"staleness-high", "stale-drop-length-bias"} == set(ids(r))


def test_staleness_threshold_from_meta(tmp_path):
    r = staleness.analyze(make_run(tmp_path / "r", {"max_off_policy_threshold": 5}, {}, {0: _stale_rows()}))
    # lags 6..9 dropped: mean(700..1000) = 850 vs mean(100..600) = 350: bias 2.43
    assert r.drop.threshold == 5 and r.drop.dropped_share == pytest.approx(0.4)
    assert r.drop.bias == pytest.approx(850 / 350)


def _async_rows(lag: int, submit: list[float], finish: list[float]) -> list[dict]:
    return [
        {"traj_id": str(i), "trainer_version": 10, "policy_version_start": 10 - lag, "submit_time": s, "finish_time": f}
        for i, (s, f) in enumerate(zip(submit, finish, strict=True))
    ]


def test_the_expected_lag_leaves_out_steps_with_one_trajectory_time_a_clock_s(tmp_path):
    # 8 steps of 100 s with a weight sync each; the recent quarter is steps 6 and 7. Step 7 logged its
    # submit times as time.time() but its finish times in seconds since the rollout began: the two
    # clocks do not subtract, so only step 6 (submitted at 0 and 50 s, taken at 250 s) is judged,
    # (250 + 200) / 2 / 100 = 2.25 versions expected, against its lags of 2
    steps = {key: {"timing_s/step": 100.0, "timing_s/update_weights": 5.0} for key in range(8)}
    rows = dict.fromkeys(range(7), _async_rows(2, [0, 50], [200, 250]))
    rows[7] = _async_rows(2, [1.7e9, 1.7e9 + 50], [200, 250])
    r = staleness.analyze(make_run(tmp_path / "r", {}, steps, rows))
    assert (r.expected.mean_observed, r.expected.mean_expected) == (2.0, pytest.approx(2.25))
    assert "staleness-unexplained" not in ids(r)


def test_staleness_checks_the_lag_generation_and_wait_explain(tmp_path):
    # steps of 100 s with a weight sync each. Submitted at 0 and 50 s, the batch is taken when its
    # last sample finishes at 250 s: (250 + 200) / 2 / 100 = 2.25 versions expected on average
    steps = {key: {"timing_s/step": 100.0, "timing_s/update_weights": 5.0} for key in range(4)}
    explained = make_run(tmp_path / "ok", {}, steps, dict.fromkeys(range(4), _async_rows(2, [0, 50], [200, 250])))
    r = staleness.analyze(explained)
    assert r.expected.t_sync_s == pytest.approx(100.0)
    assert (r.expected.mean_observed, r.expected.mean_expected) == (2.0, pytest.approx(2.25))
    assert r.expected.within_one == 1.0 and "staleness-unexplained" not in ids(r)
    # the same timing with lags of 5: 2.75 versions more than generation and wait explain
    queued = make_run(tmp_path / "queued", {}, steps, dict.fromkeys(range(4), _async_rows(5, [0, 50], [200, 250])))
    (f,) = [f for f in staleness.analyze(queued).findings if f.id == "staleness-unexplained"]
    assert f.severity is Severity.WARN and f.evidence["excess"] == pytest.approx(2.75)
    # a sync every other step doubles T_sync (the recent quarter of 8 steps: 6 without, 7 with a sync):
    # lags of 2 are then 0.875 versions more than the 1.125 that generation and wait explain
    sparse = {s: {"timing_s/step": 100.0, "timing_s/update_weights": 5.0 * (s % 2)} for s in range(8)}
    rows = dict.fromkeys(range(8), _async_rows(2, [0, 50], [200, 250]))
    r = staleness.analyze(make_run(tmp_path / "sparse", {}, sparse, rows))
    assert r.expected.t_sync_s == pytest.approx(200.0) and r.expected.mean_expected == pytest.approx(1.125)


def test_staleness_without_trainer_versions_takes_verl_s_own_per_step_lag(tmp_path):
    # verl's v1 async modes: the worker's rows have no trainer_version; the trainer logs
    # training/off_policy/trajectory_staleness_worst/{mean,max} = (global_steps - 1) - min_global_steps
    worst = "training/off_policy/trajectory_staleness_worst/"
    steps = {s: {"timing_s/step": 10.0, worst + "mean": 0.5 * s, worst + "max": float(s)} for s in range(1, 5)}
    rows = [{"traj_id": "a", "policy_version_start": 3, "response_tokens": 10}]
    r = staleness.analyze(make_run(tmp_path / "r", {}, steps, dict.fromkeys(range(1, 5), rows)))
    assert r.source == "verl" and r.per_step.index.tolist() == [1, 2, 3, 4]
    assert r.per_step["mean"].tolist() == [0.5, 1.0, 1.5, 2.0] and r.per_step["max"].tolist() == [1, 2, 3, 4]
    assert r.per_step[["n", "p50", "p90", "over_threshold"]].isna().all().all() and r.drop is None
    assert staleness.recent_mean_lag(r) == 2.0  # the last quarter of 4 steps: step 4
    # with the samples' own versions, those are what count
    measured = [{"traj_id": "a", "trainer_version": 9, "policy_version_start": 3}]
    r = staleness.analyze(make_run(tmp_path / "m", {}, steps, dict.fromkeys(range(1, 5), measured)))
    assert r.source == "trajectories" and r.per_step["max"].tolist() == [6] * 4
    assert staleness.analyze(make_run(tmp_path / "none", {}, {1: {"timing_s/step": 1.0}})).source is None


def test_verl_s_lags_against_the_oldest_and_newest_weights_fill_their_own_columns(tmp_path):
    # verl 0.9.1's v1 trainer logs, over a step's samples, the lag behind the update taking them
    # (version global_steps - 1) against the oldest weights that generated each, min_global_steps
    # (trajectory_staleness_worst), and against the newest, max_global_steps (trajectory_staleness)
    versions = {  # step (global_steps) -> each sample's (min_global_steps, max_global_steps)
        3: [(0, 1), (1, 1), (2, 2)],
        4: [(0, 2), (1, 3), (3, 3), (2, 3)],
    }
    steps = {}
    for step, spans in versions.items():
        first, last = np.array(spans).T
        worst, end = (step - 1) - first, (step - 1) - last
        steps[step] = {"timing_s/step": 10.0}
        for name, lag in (("trajectory_staleness_worst", worst), ("trajectory_staleness", end)):
            for stat in ("mean", "max", "min"):
                steps[step][f"training/off_policy/{name}/{stat}"] = float(getattr(lag, stat)())
    rows = [{"traj_id": "a", "policy_version_start": 0, "response_tokens": 10}]  # no trainer_version
    r = staleness.analyze(make_run(tmp_path / "r", {}, steps, dict.fromkeys(versions, rows)))
    assert r.source == "verl" and r.per_step.index.tolist() == [3, 4]
    # step 3: worst lags 2, 1, 0; end lags 1, 1, 0. step 4: worst 3, 2, 0, 1; end 1, 0, 0, 0
    per_step = r.per_step
    assert per_step["mean"].tolist() == [1.0, 1.5] and per_step["max"].tolist() == [2, 3]
    assert per_step["min"].tolist() == [0, 0]
    assert per_step["end_mean"].tolist() == [pytest.approx(2 / 3), 0.25]
    assert per_step["end_max"].tolist() == [1, 1] and per_step["end_min"].tolist() == [0, 0]
    worst, end = "training/off_policy/trajectory_staleness_worst/", "training/off_policy/trajectory_staleness/"
    assert r.verl_keys == {
        **{stat: worst + stat for stat in ("mean", "max", "min")},
        **{"end_" + stat: end + stat for stat in ("mean", "max", "min")},
    }
    assert staleness.recent_mean_lag(r) == 1.5  # the lag against the oldest weights, as samples measure it
    # a log with only the lags against the newest weights: those, and no mean lag made of them
    only_end = {s: {k: v for k, v in m.items() if not k.startswith(worst)} for s, m in steps.items()}
    r = staleness.analyze(make_run(tmp_path / "end", {}, only_end, dict.fromkeys(versions, rows)))
    assert r.source == "verl" and set(r.verl_keys) == {"end_mean", "end_max", "end_min"}
    assert r.per_step["mean"].isna().all() and r.per_step["end_mean"].tolist() == [pytest.approx(2 / 3), 0.25]


def test_staleness_per_step_min_from_the_samples_own_versions(tmp_path):
    rows = [{"traj_id": str(i), "trainer_version": 9, "policy_version_start": v} for i, v in enumerate([3, 5, 8])]
    r = staleness.analyze(make_run(tmp_path / "r", {}, {1: {"timing_s/step": 1.0}}, {1: rows}))
    assert r.source == "trajectories" and r.verl_keys == {}
    assert r.per_step.loc[1, ["min", "mean", "max"]].tolist() == [1, pytest.approx(11 / 3), 6]
    assert r.per_step[["end_mean", "end_max", "end_min"]].isna().all().all()


def test_a_synchronous_run_has_no_staleness_check(tmp_path):
    steps = {key: {"timing_s/step": 100.0} for key in range(2)}
    rows = dict.fromkeys(range(2), _async_rows(0, [0, 50], [200, 250]))
    assert staleness.analyze(make_run(tmp_path / "sync", {}, steps, rows)).expected is None


def test_staleness_without_versions(tmp_path):
    r = staleness.analyze(make_run(tmp_path / "r", {}, {}, {0: finish_rows([1, 2])}))
    assert r.per_step.empty and r.drop is None and r.findings == []


# -- the facade ------------------------------------------------------------------------


def test_analyze_run_gathers_catalogued_findings_most_severe_first(eight_b):
    d = analyze_run(eight_b)
    found = d.findings
    assert {f.id for f in found} == {
        "generation-dominates",
        "long-tail-dominates",
        "mfu-waterfall",
        "async-recommended",
    }
    assert all(f.id in CATALOGUE for f in found)
    ranks = [f.severity.rank for f in found]
    assert ranks == sorted(ranks, reverse=True) and found[0].id == "long-tail-dominates"


def test_every_input_form_gives_the_same_answer(eight_b):
    frames = load(eight_b)
    assert isinstance(frames, RunFrames) and load(frames) is frames
    results = [longtail.analyze(x).tail_share for x in (eight_b, RunReader(eight_b), frames)]
    assert results == [pytest.approx(196 / 602)] * 3


def test_a_run_without_evidence_yields_no_findings(tmp_path):
    d = analyze_run(make_run(tmp_path / "r", {"gpu": {"count": 8}}, {0: {"actor/pg_loss": 0.1}}))
    assert d.findings == [] and d.anatomy.seconds.empty and d.topology.model is None


# -- shipped sample traces: the analyzers recover the simulator's ground truth ------------

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
# sample_traces/README.md's "what an analyzer should find", for the analyzers of this package
EXPECTED = {
    "healthy-colocated": set(),
    "longtail-8b": {"long-tail-dominates", "async-recommended"},
    "separated-8b": {"separated-sync", "split-imbalanced", "async-recommended"},
    "async-drift": {"async-idle-imbalanced"},
    "agentic-failing-reward": {"engine-imbalanced", "long-tail-dominates"},
    "moe-mismatch": {"split-imbalanced"},
}


@pytest.fixture(scope="module")
def sample():
    """``sample(name)`` -> (Diagnosis, ground truth) of a shipped trace, each analysed once."""
    cache: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        path = SAMPLES / name
        if not (path / "meta.json").is_file():
            pytest.skip(f"sample trace {name} is not in this checkout")
        if name not in cache:
            cache[name] = (analyze_run(str(path)), json.loads((path / "meta.json").read_text())["ground_truth"])
        return cache[name]

    return get


def _own_findings(d):
    """Findings of this package's analyzers (not gpu_idle, mismatch, rewards)."""
    return [f for r in (d.anatomy, d.longtail, d.mfu, d.topology, d.sync_balance, d.staleness) for f in r.findings]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_sample_trace_ground_truth(sample, name):
    d, truth = sample(name)
    per_step = truth["per_step"]
    # the same t90 definition as the simulator: per-step throughput and tail agree (truth rounds to 1e-6)
    assert d.longtail.per_step["t_thr_s"].tolist() == pytest.approx(per_step["T_thr_s"], abs=1e-5)
    assert d.longtail.per_step["t_tail_s"].tolist() == pytest.approx(per_step["T_tail_s"], abs=1e-5)
    assert d.staleness.per_step["mean"].tolist() == pytest.approx(per_step["staleness_mean"], abs=1e-5)
    assert d.staleness.per_step["max"].tolist() == pytest.approx(per_step["staleness_max"], abs=1e-5)
    # balanced splits within one GPU of the truth's, which is the last step's: rlscope averages the last
    # quarter of steps, and a pooled run's tail (measured on n_r GPUs) stands for the tail on all GPUs
    for topo, key in (("async_streaming", "async"), ("one_step_overlap", "one_step")):
        want = truth["balanced_split"][key]["last"]["rollout"]
        assert abs(d.topology.what_if.loc[topo, "n_rollout"] - want) <= 1
    # the simulator's async trainer really takes batches as they fill and syncs after each update:
    # the lag it records is the one generation and wait explain, to within a version
    e = d.staleness.expected
    if d.staleness.per_step.empty or d.staleness.per_step["max"].max() == 0:
        assert e is None
    else:
        assert abs(e.excess) < 1 and e.within_one > 0.9
    found = _own_findings(d)
    assert EXPECTED[name] <= {f.id for f in found}
    if not EXPECTED[name]:
        assert all(f.severity is Severity.INFO for f in found)


def test_sample_trace_recommendations(sample):
    d, _ = sample("longtail-8b")
    assert d.topology.what_if.loc["async_streaming", ["n_rollout", "n_train"]].tolist() == [42, 22]
    assert d.topology.async_speedup == pytest.approx(1.3, abs=0.05)
    drift = {f.id: f for f in sample("async-drift")[0].findings}
    assert drift["async-idle-imbalanced"].evidence["target"] == "rollouter"  # late, the trainer waits
    # the ledger's best async split is the current 21:11: the warning says the two disagree
    assert sample("async-drift")[0].topology.what_if.loc["async_streaming", "n_rollout"] == 21
    assert "the topology model finds 21:11 already the best split" in drift["async-idle-imbalanced"].recommendation
    moe = {f.id: f for f in sample("moe-mismatch")[0].findings}
    assert moe["split-imbalanced"].recommendation.startswith("move 3 GPUs from training to rollout")


@pytest.mark.parametrize("busy_time", [True, False])
def test_async_what_if_from_busy_time_not_from_finish_windows(busy_time):
    # Under async streaming a step's finish times count from a submit steps earlier (~1500 s
    # windows on ~700 s steps), so the rollout pool's busy time comes from verl's occupancy share
    # (else its rollouter idle ratio); without either the run has no model (this balanced run's pool is busy nearly the whole
    # step, but a trainer-bound run's is not, and nothing else tells them apart). Truth: the
    # simulator's colocated-equivalent quantities on all 32 GPUs, last quarter of steps.
    path = SAMPLES / "async-drift"
    if not (path / "meta.json").is_file():
        pytest.skip("sample trace async-drift is not in this checkout")
    truth = json.loads((path / "meta.json").read_text())["ground_truth"]
    frames = load(str(path))
    if not busy_time:
        busy = [topology.ROLLOUT_UTILIZATION, topology.ROLLOUTER_IDLE, topology.TRAINER_IDLE]
        frames.steps = frames.steps.drop(columns=busy)
    a, lt = anatomy.analyze(frames), longtail.analyze(frames)
    r, m = topology.analyze(frames, a, lt), mfu.analyze(frames, a, lt)
    if not busy_time:
        assert r.model is None and topology.ROLLOUT_UTILIZATION in r.missing
        assert 0 < m.mfu < 1  # MFU is useful work over the whole step: it needs no pool times
        return
    q = len(truth["steps"]) // 4

    def last(key: str) -> float:
        return sum(truth["per_step"][key][-q:]) / q

    assert r.model.t_thr_s == pytest.approx(last("T_thr_n_s"), rel=0.1)
    assert r.model.t_tail_s == pytest.approx(last("T_tail_n_s"), rel=0.1)
    # the tail is what the measured share f adds to the pool's busy time (21 of 32 GPUs), not a window's seconds
    f = lt.tail_share
    assert r.model.t_tail_s == pytest.approx(r.model.t_thr_s * 32 / 21 * f / (1 - f))
    colocated = last("T_thr_n_s") + last("T_tail_n_s") + last("train_n_s")
    assert r.what_if.loc["colocated", "step_s"] == pytest.approx(colocated, rel=0.05)
    assert abs(r.what_if.loc["async_streaming", "n_rollout"] - truth["balanced_split"]["async"]["last"]["rollout"]) <= 1
    assert r.async_speedup == pytest.approx(colocated / last("step_s"), rel=0.05)
    # no pool is busy longer than the step: the waterfall's points stay within 100 - MFU
    assert 0 < m.mfu < 1 and m.waterfall.sum() == pytest.approx(100 - 100 * m.mfu)
    assert (m.waterfall >= -1e-9).all()


# -- a resumed run: each step's last attempt ---------------------------------------------------


def _resumed_run(path):
    """Attempt 0 generates steps 1-5 and crashes in step 5 (its metrics never logged); the run
    resumes from step 3's checkpoint and generates steps 4-6 again as attempt 1."""
    crashed = [10.0 * (i + 1) for i in range(10)]  # t90 (9th of 10) 90 s, last 100 s
    redone = [3.0 * (i + 1) for i in range(10)]  # t90 27 s, last 30 s
    with Recorder(path, meta={"topology": "colocated"}) as rec:
        for step in range(1, 6):
            rows = finish_rows(crashed, reward=0.0, reward_status="ok", data_source="math")
            rec.log_trajectories(step, rows)
            if step < 5:
                rec.log_step(step, {"timing_s/gen": 100.0, "timing_s/step": 120.0})
        for step in range(4, 7):
            rows = finish_rows(redone, reward=1.0, reward_status="ok", data_source="math")
            rec.log_trajectories(step, rows, attempt=1 if step < 6 else 0)
            rec.log_step(step, {"timing_s/gen": 30.0, "timing_s/step": 50.0}, attempt=1 if step < 6 else 0)
    return str(path)


def test_a_resumed_run_counts_each_step_s_last_attempt_only(tmp_path):
    run = _resumed_run(tmp_path / "resumed")
    d = analyze_run(run)
    tail = d.longtail.per_step
    assert tail["n"].to_dict() == dict.fromkeys(range(1, 7), 10)
    assert tail["t_thr_s"].to_dict() == {1: 90.0, 2: 90.0, 3: 90.0, 4: 27.0, 5: 27.0, 6: 27.0}
    assert tail["rollout_s"].to_dict() == {1: 100.0, 2: 100.0, 3: 100.0, 4: 30.0, 5: 30.0, 6: 30.0}
    by_step = d.rewards.by_step.set_index("step")
    assert by_step["n"].to_dict() == dict.fromkeys(range(1, 7), 10)
    assert by_step["mean_reward"].to_dict() == {1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 1.0, 6: 1.0}


def test_a_run_that_never_restarted_reads_no_attempt_column(tmp_path):
    """Attempts all 0 (or no column at all): the segment footers say so, and no row is read for it."""
    run = make_run(tmp_path / "r", {}, {1: {"timing_s/gen": 1.0}}, {1: finish_rows([1.0, 2.0])})
    assert [s.attempts for s in RunReader(run).segments("trajectories")] == [False]
    redone = _resumed_run(tmp_path / "resumed")
    assert any(s.attempts for s in RunReader(redone).segments("trajectories"))


def test_trajectories_given_as_a_table_keep_each_step_s_last_attempt():
    import pyarrow as pa

    from rlscope.analyzers._data import Trajectories

    table = pa.table({"step": [1, 1, 2, 2, 2], "attempt": [0, 0, 0, 1, None], "finish_time": [1.0, 2, 3, 4, 5]})
    traj = Trajectories(table)
    assert len(traj) == 3
    assert traj.numbers("finish_time").tolist() == [1.0, 2.0, 4.0]


def test_a_waterfall_whose_estimated_tail_is_unknown_does_not_split_generation(tmp_path):
    # lengths bunched near the max (mean 232, max 256): the tail is unknown, at most (256 - 232) /
    # (0.9 x 256) = 24 / 230.4 of each rollout. 1 GPU at a toy 1e12 peak, 1000 tokens a step of 40 s:
    # gen 2N x 1000 = 2e12 (2 GPU-s useful of 20), update_actor 6e12 (6 of 20): MFU 8 / 40 = 20%
    step = {
        "timing_s/gen": 20,
        "timing_s/update_actor": 20,
        "timing_s/step": 40,
        "perf/total_num_tokens": 1000,
        "response_length/mean": 232,
        "response_length/max": 256,
        "response_length/min": 91,
    }
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e12}}
    r = mfu.analyze(make_run(tmp_path / "r", meta, dict.fromkeys(range(4), step)))
    assert r.mfu == pytest.approx(0.2) and r.tail_estimated and r.tail_unknown
    # generation's 18 lost GPU-s of 40 in one bar, not all to decode throughput beside a 0 tail; no step has either
    assert r.waterfall["decode_long_tail"] == pytest.approx(45.0) and r.waterfall[["decode", "long_tail"]].isna().all()
    assert r.waterfall["training"] == pytest.approx(35.0) and r.waterfall.sum() == pytest.approx(80.0)
    # the tail at its bound: 24 / 230.4 of 20 s over 40 s
    assert r.tail_points_max == pytest.approx(100 * 24 / 230.4 * 20 / 40)
    assert r.per_step["eta_thr"].isna().all() and r.per_step["eta_gen"].tolist() == pytest.approx([0.1] * 4)
    (f,) = [f for f in r.findings if f.id == "mfu-waterfall"]
    assert f.evidence["tail_unknown"] and f.evidence["top_label"] == "decode + long tail (split unknown)"
    assert (
        "-45.0 decode + long tail (split unknown)" in f.recommendation
        and "long tail (estimated)" not in f.recommendation
    )
    assert f"at most {100 * 24 / 230.4 * 20 / 40:.1f}" in f.recommendation
    # a known estimate still splits: mean 50 of 256, f = 1 - 50 ln 10 / 256 = 0.5503
    known = {**step, "response_length/mean": 50}
    r = mfu.analyze(make_run(tmp_path / "known", meta, dict.fromkeys(range(4), known)))
    f = 1 - 50 * math.log(10) / 256
    assert not r.tail_unknown and math.isnan(r.tail_points_max)
    assert r.waterfall["long_tail"] == pytest.approx(100 * f * 20 / 40)
    assert r.waterfall["decode"] == pytest.approx(45.0 - 100 * f * 20 / 40)


# 1 GPU at a toy 1e12 peak, 1000 tokens a 40 s step of 20 s gen + 20 s update_actor: gen 2N x 1000 = 2e12 FLOPs
# (2 GPU-s useful of 20), update_actor 6e12 (6 of 20), MFU 8 / 40 = 20% in every step
_TOY_STEP = {"timing_s/gen": 20, "timing_s/update_actor": 20, "timing_s/step": 40, "perf/total_num_tokens": 1000}
_TOY_META = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e12}}


def test_a_mixed_window_splits_the_known_steps_and_merges_only_the_unknown_ones(tmp_path):
    # 24 steps, the recent quarter 18-23. Steps 0-20 log 10 trajectories finishing at 1..9 s and 20 s: t90 = 9 s,
    # a tail of 11 s, f = 11 / 20 = 0.55. Steps 21-23 log none (nor response lengths): nothing to estimate from.
    # Over the window's 6 x 40 = 240 GPU-s, each known step loses 20 - 11 - 2 = 7 to decode and 11 to the tail,
    # each unknown step 20 - 2 = 18 to generation unsplit; every step 20 - 6 = 14 to training
    finish = finish_rows([1, 2, 3, 4, 5, 6, 7, 8, 9, 20])
    run = make_run(tmp_path / "r", _TOY_META, dict.fromkeys(range(24), _TOY_STEP), dict.fromkeys(range(21), finish))
    r = mfu.analyze(run)
    assert r.mfu == pytest.approx(0.2) and r.tail_unknown and not r.tail_estimated
    assert r.tail_unknown_steps == (21, 22, 23)
    assert r.waterfall["decode"] == pytest.approx(100 * 3 * 7 / 240)  # 8.75
    assert r.waterfall["long_tail"] == pytest.approx(100 * 3 * 11 / 240)  # 13.75
    assert r.waterfall["decode_long_tail"] == pytest.approx(100 * 3 * 18 / 240)  # 22.5
    assert r.waterfall["training"] == pytest.approx(100 * 6 * 14 / 240)  # 35
    assert r.waterfall.sum() == pytest.approx(80.0)  # every lost point charged once
    assert math.isnan(r.tail_points_max)  # the unknown steps have no lengths to bound their tail
    assert r.per_step.loc[[21, 22, 23], "eta_thr"].isna().all()
    assert r.per_step.loc[[18, 19, 20], "eta_thr"].tolist() == pytest.approx([2 / 9] * 3)
    (f,) = [f for f in r.findings if f.id == "mfu-waterfall"]
    said = f.recommendation
    assert "-8.8 decode throughput" in said and "-13.8 long tail" in said
    assert "-22.5 decode + long tail (split unknown)" in said and "steps 21-23" in said
    assert f.evidence["lost_decode_long_tail"] == pytest.approx(22.5)


def test_a_mixed_estimated_window_bounds_the_tail_of_its_unknown_steps_only(tmp_path):
    # response lengths, no trajectories: steps 0-20 mean 50 of max 256, f = 1 - 50 ln 10 / 256; steps 21-23 mean 232
    # (min 91): no estimate, at most b = (256 - 232) / (0.9 x 256) = 24 / 230.4 of their 20 s rollout
    f, b = 1 - 50 * math.log(10) / 256, 24 / 230.4
    lengths = {"response_length/max": 256, "response_length/min": 1}
    steps = {s: _TOY_STEP | lengths | {"response_length/mean": 50} for s in range(21)}
    steps |= {s: _TOY_STEP | lengths | {"response_length/mean": 232, "response_length/min": 91} for s in (21, 22, 23)}
    r = mfu.analyze(make_run(tmp_path / "r", _TOY_META, steps))
    assert r.tail_unknown and r.tail_estimated and r.tail_unknown_steps == (21, 22, 23)
    assert r.waterfall["decode"] == pytest.approx(100 * 3 * (18 - 20 * f) / 240)
    assert r.waterfall["long_tail"] == pytest.approx(100 * 3 * 20 * f / 240)
    assert r.waterfall["decode_long_tail"] == pytest.approx(100 * 3 * 18 / 240)
    assert r.waterfall.sum() == pytest.approx(80.0)
    # the bound is of the unknown steps' tail alone, not the known steps' tail beside it
    assert r.tail_points_max == pytest.approx(100 * 3 * 20 * b / 240)


def test_a_what_if_whose_estimated_tail_is_unknown_models_none_and_bounds_the_async_gain(tmp_path):
    # colocated on 8 GPUs, gen 60 s + update_actor 40 s; lengths mean 232 of max 256: the tail is unknown, at most
    # b = (256 - 232) / (0.9 x 256) = 24 / 230.4 of generation. The model has no tail (T_thr = 60 s), so DOMAIN's
    # async speedup 1 / (1 - f T_gen / (T_gen + T_t)) is 1 at f = 0, and 1 / (1 - b 60 / 100) at the bound
    step = {"timing_s/gen": 60, "timing_s/update_actor": 40, "timing_s/step": 100}
    step |= {"response_length/mean": 232, "response_length/max": 256, "response_length/min": 91}
    r = topology.analyze(make_run(tmp_path / "r", {"gpu": {"count": 8}}, dict.fromkeys(range(4), step)))
    assert r.tail_unknown and r.model.t_tail_s == 0 and r.model.t_thr_s == pytest.approx(60)
    assert r.async_speedup == pytest.approx(1.0)
    assert r.async_speedup_max == pytest.approx(1 / (1 - 24 / 230.4 * 60 / 100))
    # a mean above the max (lengths that contradict each other) has no bound either: none is given
    odd = {s: {**step, "response_length/mean": 300} for s in range(4)}
    r = topology.analyze(make_run(tmp_path / "odd", {"gpu": {"count": 8}}, odd))
    assert r.tail_unknown and math.isnan(r.async_speedup_max)
    # a 30 s weight sync, which async overlaps: recommended, its gain called a lower bound, not a "0 s tail"
    synced = {**step, "timing_s/update_weights": 30, "timing_s/step": 130}
    r = topology.analyze(make_run(tmp_path / "s", {"gpu": {"count": 8}}, dict.fromkeys(range(4), synced)))
    (f,) = [f for f in r.findings if f.id == "async-recommended"]
    assert f.evidence["tail_unknown"] and "0 s tail" not in f.recommendation
    assert "a lower bound" in f.recommendation and f"add up to {r.async_speedup_max:.2f}x more" in f.recommendation
    # a known estimate (mean 50: f = 1 - 50 ln 10 / 256) is modelled as before, with no bound beside it
    known = topology.analyze(
        make_run(tmp_path / "k", {"gpu": {"count": 8}}, {s: {**step, "response_length/mean": 50} for s in range(4)})
    )
    f = 1 - 50 * math.log(10) / 256
    assert not known.tail_unknown and math.isnan(known.async_speedup_max)
    assert known.async_speedup == pytest.approx(1 / (1 - f * 60 / 100))


def test_a_drift_whose_estimated_tail_is_unknown_says_the_split_leans_to_rollout(tmp_path):
    # colocated on 8 GPUs, update_actor 40 s; gen 20 s for steps 0-3, 80 s for 4-7; lengths mean 232 of max 256:
    # the tail unknown, generation taken as all throughput part. Async's balanced n_r = 8 T_thr / (T_thr + T_t):
    # 8 x 20 / 60 = 2.7 -> 3 (max(160 / 3, 320 / 5) = 64 s beats 2's 80 s), 8 x 80 / 120 = 5.3 -> 5 (128 s, 6's 160 s)
    lengths = {"response_length/mean": 232, "response_length/max": 256, "response_length/min": 91}
    steps = {s: {"timing_s/gen": 20 if s < 4 else 80, "timing_s/update_actor": 40, **lengths} for s in range(8)}
    r = drift.analyze(make_run(tmp_path / "r", {"gpu": {"count": 8}}, steps))
    assert r.tail_unknown and (r.per_step["t_tail_s"] == 0).all()
    assert r.first_rollout == 3 and r.last_rollout == 5
    (f,) = [f for f in r.findings if f.id == "split-drift"]
    assert f.evidence["tail_unknown"] and "leans the balanced split to rollout" in f.recommendation
    # a known estimate (mean 5: f = 1 - 5 ln 10 / 256, tail split off) says nothing of it
    known = {s: {**v, "response_length/mean": 5} for s, v in steps.items()}
    r = drift.analyze(make_run(tmp_path / "k", {"gpu": {"count": 8}}, known))
    assert not r.tail_unknown and all("tail_unknown" not in f.evidence for f in r.findings)
    assert r.per_step["t_tail_s"].iloc[0] == pytest.approx(20 * (1 - 5 * math.log(10) / 256))


def test_findings_on_a_tail_with_no_estimate_and_no_bound_give_no_number_for_it(tmp_path):
    # a mean above the max (300 of 256) gives neither an estimate nor a bound (max - mean < 0): the MFU waterfall
    # and the async gain are said to have none, not "at most nan" or "nanx more"
    lengths = {"response_length/mean": 300, "response_length/max": 256}
    step = {"timing_s/gen": 20, "timing_s/update_actor": 20, "timing_s/step": 40, "perf/total_num_tokens": 1000}
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e12}}
    r = mfu.analyze(make_run(tmp_path / "mfu", meta, dict.fromkeys(range(4), step | lengths)))
    assert r.tail_unknown and math.isnan(r.tail_points_max)
    (f,) = [f for f in r.findings if f.id == "mfu-waterfall"]
    assert "nan" not in f.recommendation and "no bound on the tail's part either" in f.recommendation
    # colocated on 8 GPUs with a 30 s weight sync, which async overlaps: recommended, as in the bounded case above
    synced = {"timing_s/gen": 60, "timing_s/update_actor": 40, "timing_s/update_weights": 30, "timing_s/step": 130}
    r = topology.analyze(make_run(tmp_path / "topo", {"gpu": {"count": 8}}, dict.fromkeys(range(4), synced | lengths)))
    assert r.tail_unknown and math.isnan(r.async_speedup_max)
    (f,) = [f for f in r.findings if f.id == "async-recommended"]
    assert "nan" not in f.recommendation and "a lower bound" in f.recommendation
    assert "no bound on the tail either" in f.recommendation


def _capped_run(path, lengths):
    """Steps of 100 s generation with response lengths ``(mean, clip ratio)`` of max 256 tokens."""
    steps = {
        s: {
            "response_length/mean": mean,
            "response_length/max": 256,
            "response_length/clip_ratio": clip,
            "timing_s/gen": 100,
        }
        for s, (mean, clip) in enumerate(lengths)
    }
    return make_run(path, {}, steps)


def test_a_tail_growth_is_judged_from_the_steps_below_the_length_cap(tmp_path):
    # steps 0-1: 30% of responses at the 256-token cap, so the slowest 10% all stop there together: f = 0,
    # which is the cap, not no tail. Below it f = 1 - mean ln 10 / 256: mean 80 -> 0.2804 (steps 2-3),
    # 70 (4-5), 50 -> 0.5503 (6-7). Over the six steps below the cap the first quarter is steps 2-3 and
    # the last steps 6-7: 28% -> 55%, not 0% -> 55%
    low, high = 1 - 80 * math.log(10) / 256, 1 - 50 * math.log(10) / 256
    lengths = [(180, 0.3), (175, 0.25)] + [(80, 0.02)] * 2 + [(70, 0.02)] * 2 + [(50, 0.0)] * 2
    r = longtail.analyze(_capped_run(tmp_path / "r", lengths))
    assert r.per_step.loc[[0, 1], "tail_share"].tolist() == [0, 0]  # true to the definition
    assert r.capped_steps == (0, 1) and r.growth_judged
    assert (r.trend.first, r.trend.last) == (pytest.approx(low), pytest.approx(high))
    (f,) = [f for f in r.findings if f.id == "long-tail-growing"]
    assert (f.evidence["first"], f.evidence["last"]) == (pytest.approx(low), pytest.approx(high))
    assert f.evidence["capped_steps"] == [0, 1]
    assert f.title.startswith("tail share grew from 28% to 55% of rollout time")
    assert "steps 0-1 at the length cap left out" in f.title
    assert (
        "25-30% of their responses hit the length cap" in f.recommendation
        and "not that there was none" in f.recommendation
    )
    # the recent share (steps 6-7) is below the cap: long-tail-dominates is as before
    assert r.tail_share == pytest.approx(high) and "long-tail-dominates" in ids(r)


def test_a_step_just_over_the_length_cap_rule_reads_over_10_percent(tmp_path):
    # a clip ratio of 0.1004 is over the 0.1 rule; rounded to a whole percent it would read "10% of its
    # responses hit the length cap", the rule's own bound, so it shows the decimals that put it above
    lengths = [(180, 0.1004)] + [(80, 0.02)] * 2 + [(50, 0.0)] * 2
    r = longtail.analyze(_capped_run(tmp_path / "r", lengths))
    (f,) = [f for f in r.findings if f.id == "long-tail-growing"]
    assert r.capped_steps == (0,) and "10.04% of its responses hit the length cap" in f.recommendation


def test_a_tail_growth_is_not_judged_when_recent_steps_are_at_the_length_cap(tmp_path):
    # steps 0-5 at f = 1 - 100 ln 10 / 256 = 0.1006, step 6 at 1 - 20 ln 10 / 256 = 0.8201, step 7 at the
    # cap (f = 0 there). The recent quarter (6-7) holds 0.82 and a 0 set by the cap: the recent share,
    # (0.8201 x 100 s + 0) / 200 s = 0.41, is true to the definition, but a growth up to now is not known
    mid = 1 - 20 * math.log(10) / 256
    lengths = [(100, 0.0)] * 6 + [(20, 0.0), (200, 0.4)]
    r = longtail.analyze(_capped_run(tmp_path / "r", lengths))
    assert r.tail_share == pytest.approx(mid / 2) and r.capped_steps == (7,) and r.recent_capped_steps == (7,)
    assert not r.growth_judged and "long-tail-growing" not in ids(r)
    (f,) = [f for f in r.findings if f.id == "long-tail-dominates"]
    assert "step 7 at the length cap counts 0" in f.evidence["basis"]


def test_a_run_with_one_step_below_the_length_cap_has_no_growth_to_judge(tmp_path):
    lengths = [(180, 0.3)] * 3 + [(50, 0.0)]
    r = longtail.analyze(_capped_run(tmp_path / "r", lengths))
    assert r.capped_steps == (0, 1, 2) and r.recent_capped_steps == () and not r.growth_judged
    assert r.tail_share == pytest.approx(1 - 50 * math.log(10) / 256)


def test_a_run_below_the_length_cap_judges_its_growth_as_before(tmp_path):
    lengths = [(100, 0.0)] * 2 + [(20, 0.05)] * 2
    r = longtail.analyze(_capped_run(tmp_path / "r", lengths))
    assert r.capped_steps == () and r.growth_judged
    (f,) = [f for f in r.findings if f.id == "long-tail-growing"]
    assert "length cap" not in f.title + f.recommendation and "capped_steps" not in f.evidence
