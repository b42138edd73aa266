"""`rlscope compare`: the step-time difference explained by phase and by throughput vs tail."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlscope import Recorder
from rlscope.cli import main


def _run(tmp_path, name: str, gen: float, tail_share: float) -> str:
    """4 steps: gen, 30 s update; 10 trajectories finishing so the slowest 10% take ``tail_share``."""
    run = str(tmp_path / name)
    t90 = gen * (1 - tail_share)
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": gen, "timing_s/update_actor": 30.0, "timing_s/step": gen + 30.0})
            # 9 of 10 finish by t90 (the 9th at t90), the last at gen
            finish = [t90 * (i + 1) / 9 for i in range(9)] + [gen]
            rec.log_trajectories(step, [{"traj_id": str(i), "finish_time": f} for i, f in enumerate(finish)])
    return run


def _said(explanations: list[str], start: str) -> str:
    """The one explanation starting ``start``: where it stands among them is not what most tests check."""
    (line,) = [e for e in explanations if e.startswith(start)]
    return line


def test_compare_explains_the_step_difference(tmp_path, capsys):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)  # T_thr 80, T_tail 20
    b = _run(tmp_path, "b", gen=200.0, tail_share=0.5)  # T_thr 100, T_tail 100
    assert main(["compare", a, b, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "rlscope.compare/1" and out["runs"] == [a, b]
    rows = {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}
    assert rows["step time"] == pytest.approx((130.0, 230.0))
    assert rows["generation"] == pytest.approx((100.0, 200.0))
    assert rows["generation / step"] == pytest.approx((100 / 130, 200 / 230))
    assert rows["T_tail"] == pytest.approx((20.0, 100.0))
    assert rows["slowest-10% share of rollout"] == pytest.approx((0.2, 0.5))
    assert rows["tail measured from"] == ("trajectories", "trajectories")
    assert _said(out["explanations"], "B's steps") == "B's steps are 100 s slower than A's (+77%): gen +100 s"
    assert _said(out["explanations"], "generation's").startswith(
        "generation's throughput part changed +20 s and its tail +80 s"
    )
    assert main(["compare", a, b]) == 0
    assert "What differs" in capsys.readouterr().out


def test_compare_missing_run_is_a_one_line_error(tmp_path, capsys):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)
    assert main(["compare", a, str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_the_hardware_and_model_options_apply_to_both_runs(tmp_path, capsys):
    # two console logs that state neither GPUs nor model: no MFU until the options give them
    logs = []
    for name, step_s in (("a.log", 100.0), ("b.log", 200.0)):
        log = tmp_path / name
        log.write_text(
            f"step:1 - timing_s/gen:40.0 - timing_s/update_actor:40.0 - timing_s/step:{step_s} - "
            "prompt_length/mean:100.0 - response_length/mean:400.0\n"
        )
        logs.append(str(log))
    assert main(["compare", *logs, "--format", "json"]) == 0
    rows = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["whole-step MFU"] == (None, None)
    facts = ["--gpus", "16", "--peak-tflops", "1000", "--active-params", "7.62e9"]
    batch = ["--meta", '{"batch_size": 64, "group_size": 4}']
    assert main(["compare", *logs, "--format", "json", *facts, *batch]) == 0
    rows = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    # 64 x 4 sequences of 500 tokens at 8N FLOPs a token (generation 2N, the update 6N), on 16 GPUs
    flops = 64 * 4 * 500 * 8 * 7.62e9
    assert rows["whole-step MFU"] == pytest.approx((flops / (100 * 16e15), flops / (200 * 16e15)))


def test_bad_hardware_options_are_a_usage_error_for_compare(tmp_path, capsys):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)
    assert main(["compare", a, a, "--meta", '{"batch_size": 0}']) == 2
    err = capsys.readouterr().err
    assert "--meta: batch_size is 0, not a positive whole number" in err and len(err.strip().splitlines()) == 1
    assert main(["compare", a, a, "--gpu-type", "V100"]) == 2
    assert "unknown --gpu-type 'V100'" in capsys.readouterr().err


def test_two_equal_runs_are_said_to_take_as_long(tmp_path, capsys):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)
    assert main(["compare", a, a, "--format", "json"]) == 0
    assert (
        _said(json.loads(capsys.readouterr().out)["explanations"], "B's steps")
        == "B's steps take as long as A's (130 s against 130 s)"
    )


def test_short_steps_are_compared_by_their_ratio(tmp_path, capsys):
    logs = []
    for name, scale in (("a.log", 1.0), ("b.log", 2.0)):
        log = tmp_path / name
        log.write_text(
            "".join(
                f"step:{i} - timing_s/gen:{0.2 * scale} - timing_s/update_actor:{0.2 * scale} - "
                f"timing_s/step:{0.5 * scale}\n"
                for i in range(1, 5)
            )
        )
        logs.append(str(log))
    assert main(["compare", *logs, "--format", "json"]) == 0
    assert (
        _said(json.loads(capsys.readouterr().out)["explanations"], "B's steps")
        == "B's steps are 0.5 s slower than A's (+100%)"
    )


def test_generation_beside_the_step_does_not_explain_its_time(tmp_path, capsys):
    # one-step overlap: gen (200 s) runs beside the step, which is the update (30 s then 50 s)
    runs = []
    for name, update in (("a", 30.0), ("b", 50.0)):
        run = str(tmp_path / name)
        meta = {"gpu": {"type": "H100", "count": 8}, "topology": "one_step_overlap", "split": "6:2"}
        with Recorder(run, meta=meta) as rec:
            for step in range(4):
                gen = 200.0 if name == "a" else 100.0
                rec.log_step(step, {"timing_s/gen": gen, "timing_s/update_actor": update, "timing_s/step": update})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = _said(out["explanations"], "B's steps")
    assert first.startswith("B's steps are 20 s slower than A's (+67%): update_actor +20 s (")
    assert "gen" not in first.split("(")[1] and "beside the step in A and B" in first
    best = {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}["best topology (what-if)"]
    # model against model: A's one-step step at 6:2 is max(200, 30) = 200 s on its 6 rollout GPUs, colocated
    # 150 + 7.5 = 157.5 s on all 8 (1.27x); B's 100 s at 6:2 against colocated 75 + 12.5 = 87.5 s (1.14x)
    # the model's 200 s and 100 s are far off the measured 30 s and 50 s steps: said beside
    assert best == ("colocated: 158 s (1.27x; 30 s measured)", "colocated: 87.5 s (1.14x; 50 s measured)")


def test_generation_beside_the_step_is_no_share_of_it_in_the_table(tmp_path, capsys):
    # one-step overlap: generation beside the step is set against the step's length, as diagnose does
    runs = []
    for name, gen, update in (("a", 200.0, 40.0), ("b", 100.0, 40.0)):
        run = str(tmp_path / name)
        meta = {"gpu": {"type": "H100", "count": 8}, "topology": "one_step_overlap" if name == "a" else "colocated"}
        with Recorder(run, meta=meta) as rec:
            for step in range(4):
                step_s = update if name == "a" else gen + update
                rec.log_step(step, {"timing_s/gen": gen, "timing_s/update_actor": update, "timing_s/step": step_s})
        runs.append(run)
    assert main(["compare", *runs]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ generation / step ")]
    # A: 200 s of generation beside a 40 s step (5.0x its length); B: 100 s of a 140 s step (71%,
    # to the whole percent as diagnose's headline says it)
    assert "beside the step (5.0x its length)" in row and "71%" in row and "71.4%" not in row and "500" not in row
    assert main(["compare", *runs, "--format", "json"]) == 0  # the JSON keeps the number, as diagnose's does
    rows = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["generation / step"] == pytest.approx((200 / 40, 100 / 140))


def test_a_run_without_a_what_if_says_what_it_lacks(tmp_path, capsys):
    runs = []
    for name, meta in (("v1", {"topology": "async", "split": "4:4"}), ("colo", {"topology": "colocated"})):
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}, **meta}) as rec:
            for step in range(4):  # verl's v1 separate_async logs no rollouter idle ratio
                rec.log_step(step, {"timing_s/gen": 40.0, "timing_s/update_actor": 50.0, "timing_s/step": 100.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    best = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}[
        "best topology (what-if)"
    ]
    assert best[0].startswith("n/a (the what-if of an async run on separate pools needs the rollout pool's busy time")
    assert best[1].startswith("colocated: ")


def test_a_run_already_at_its_best_topology_and_split_is_said_to_be(capsys):
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    runs = [str(samples / "async-drift"), str(samples / "healthy-colocated")]
    assert main(["compare", *runs, "--format", "json"]) == 0
    best = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}[
        "best topology (what-if)"
    ]
    # async-drift streams at 21:11, the split the model finds fastest for it
    assert best[0] == "async streaming 21:11: 658 s (as the run is now)" and best[1].endswith("x)")
    assert main(["diagnose", runs[0]]) == 0
    assert (
        "async streaming at 21:11: 658 s modelled, as the run is now: the fastest option the model sees"
        in capsys.readouterr().out
    )


def test_a_step_time_summed_from_stage_timers_is_said_to_be_a_lower_bound(tmp_path, capsys):
    # A logs timing_s/step (100 s, 20 s of it untimed by the stages); B logs only its stages (40 + 40 s)
    logs = []
    for name, step in (("a.log", " - timing_s/step:100.0"), ("b.log", "")):
        log = tmp_path / name
        log.write_text(
            "".join(f"step:{i} - timing_s/gen:40.0 - timing_s/update_actor:40.0{step}\n" for i in range(1, 5))
        )
        logs.append(str(log))
    assert main(["compare", *logs, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}
    assert rows["step time"] == pytest.approx((100.0, 80.0))
    assert rows["step time from"] == ("step timer", "sum of stage timers")
    # B's 80 s leaves out what no stage timer held, as A's 20 s of "other": B is not known to be
    # faster, and B's other is unmeasured (n/a), not 0 s, so the 20 s is no phase's
    assert rows["other"] == (pytest.approx(20.0), None)
    assert _said(out["explanations"], "B's steps") == (
        "B's steps are 20 s faster than A's (-20%); "
        "B's step time is the sum of its stage timers (no timing_s/step), a lower bound"
    )


def test_runs_on_different_gpus_or_models_are_said_not_to_be_like_for_like(tmp_path, capsys):
    runs = []
    for name, count, kind, model, params in (("a", 8, "H100", "small", 1.5e9), ("b", 16, "A100", "big", 7.62e9)):
        run = str(tmp_path / name)
        meta = {"gpu": {"type": kind, "count": count}, "model": {"name": model, "active_params": params}}
        with Recorder(run, meta=meta) as rec:
            for step in range(4):
                rec.log_step(step, {"timing_s/gen": 60.0, "timing_s/update_actor": 40.0, "timing_s/step": 100.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}
    assert rows["model"] == ("small (1.5B active)", "big (7.62B active)")
    # same step time, but B does it with twice the GPUs, of another kind, on a model five times the size:
    # said first, so that the step difference is read knowing it
    assert out["explanations"][:2] == [
        "not like for like: GPUs 8 -> 16, GPU type H100 -> A100, model small (1.5B active) -> big (7.62B active)",
        "B's steps take as long as A's (100 s against 100 s)",
    ]


def test_one_model_s_size_rounded_two_ways_is_like_for_like(tmp_path, capsys):
    # 7.62e9 and 7.6e9 active parameters (0.3% apart) are one model stated two ways; 7e9 is another
    step = [GEN_UPDATE | {"timing_s/step": 140.0}] * 4
    for other, differs in ((7.6e9, False), (7e9, True)):
        runs = _timed_runs(
            tmp_path / str(other), step, step, {"model": {"active_params": 7.62e9}}, {"model": {"active_params": other}}
        )
        _, explanations = _compared(capsys, runs)
        assert any(e.startswith("not like for like: model") for e in explanations) is differs, other


def test_a_topology_change_to_a_run_without_a_split_is_said_whole(tmp_path, capsys):
    runs = []
    for name, meta in (("a", {"topology": "one_step_overlap", "split": "6:2"}), ("b", {"topology": "colocated"})):
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}, **meta}) as rec:
            for step in range(4):
                rec.log_step(step, {"timing_s/gen": 40.0, "timing_s/update_actor": 50.0, "timing_s/step": 100.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the sentence names the topologies as diagnose words them; the row keeps verl's identifiers for machines
    assert "topology one step overlap 6:2 -> colocated" in out["explanations"]
    assert {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}["topology"] == ("one_step_overlap", "colocated")
    assert main(["compare", *runs]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│ topology ")]
    assert "one step overlap" in row and "one_step_overlap" not in row


def test_mfu_is_judged_by_a_step_time_that_takes_as_long(tmp_path, capsys):
    # B's answers are twice as long (1000 tokens a sequence against 500) in a step 0.1% shorter
    logs = []
    for name, step_s, response in (("a.log", 100.0, 400.0), ("b.log", 99.9, 900.0)):
        log = tmp_path / name
        log.write_text(
            f"step:1 - timing_s/gen:40.0 - timing_s/update_actor:40.0 - timing_s/step:{step_s} - "
            f"prompt_length/mean:100.0 - response_length/mean:{response}\n"
        )
        logs.append(str(log))
    facts = ["--gpus", "16", "--peak-tflops", "20", "--active-params", "7.62e9"]
    assert main(["compare", *logs, "--format", "json", *facts, "--meta", '{"batch_size": 64, "group_size": 4}']) == 0
    out = json.loads(capsys.readouterr().out)["explanations"]
    # 64 x 4 sequences at 8 x 7.62e9 FLOPs a token on 16 x 20 TFLOP/s: 500 tokens in 100 s, 1000 in 99.9 s
    assert _said(out, "B's steps") == "B's steps take as long as A's (100 s against 100 s)"
    assert "whole-step MFU 24.4% -> 48.8%; judge by step time: B takes as long" in out


def test_control_characters_from_the_data_do_not_reach_the_terminal(tmp_path, capsys):
    # a run directory and a meta.json model name holding terminal escapes (recolour, retitle the window)
    runs = []
    for name in ("a\x1b[31m", "b"):
        run = str(tmp_path / name)
        meta = {"gpu": {"type": "H100", "count": 8}, "model": {"name": f"m-{name}\x1b]0;x\x07"}}
        with Recorder(run, meta=meta) as rec:
            rec.log_step(0, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
        runs.append(run)
    assert main(["compare", *runs]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "a\\x1b[31m" in out and "m-b\\x1b]0;x\\x07" in out


def test_runs_under_one_long_folder_are_told_apart(tmp_path, capsys):
    # the table's columns are narrower than these paths, which differ only in their last letter
    folder = tmp_path / "experiments" / "qwen-7b-grpo-learning-rate-sweep-2026-11"
    runs = [str(folder / "run-a"), str(folder / "run-b")]
    for run in runs:
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
            rec.log_step(0, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
    assert main(["compare", *runs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"A: {runs[0]}" in lines and f"B: {runs[1]}" in lines


def test_a_tail_estimated_from_response_lengths_is_said_to_be(tmp_path, capsys):
    log = tmp_path / "a.log"
    log.write_text(
        "".join(
            f"step:{i} - timing_s/gen:100.0 - timing_s/update_actor:30.0 - timing_s/step:130.0 - "
            "response_length/mean:400.0 - response_length/max:2000.0\n"
            for i in range(1, 5)
        )
    )
    b = _run(tmp_path, "b", gen=100.0, tail_share=0.2)  # measured: T_thr 80, T_tail 20
    assert main(["compare", str(log), b, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)["explanations"]
    # A's estimate: the 90th percentile length 400 ln 10 = 921 of the longest 2000, so a tail of
    # 1 - 921 / 2000 = 53.9% of its 100 s rollout (T_thr 46.05 s, T_tail 53.95 s): to the whole
    # percent as diagnose's headline says it, in the table and the sentence
    assert _said(out, "generation's") == (
        "generation's throughput part changed +33.9 s and its tail -33.9 s "
        "(tail share 54% -> 20%; A's estimated from response lengths); more GPUs shrink only the throughput part"
    )
    assert main(["compare", str(log), b]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "slowest-10% share" in line]
    assert [c.strip() for c in row.split("│")[2:4]] == ["54%", "20%"]


def test_a_run_without_step_timers_is_said_to_have_none(tmp_path, capsys):
    timed = _run(tmp_path, "timed", gen=100.0, tail_share=0.2)
    untimed = str(tmp_path / "untimed")
    with Recorder(untimed, meta={"gpu": {"type": "H100", "count": 8}}) as rec:  # trajectories, no step metrics
        rec.log_trajectories(0, [{"traj_id": str(i), "finish_time": float(i + 1)} for i in range(10)])
    assert main(["compare", untimed, timed, "--format", "json"]) == 0
    assert _said(json.loads(capsys.readouterr().out)["explanations"], "A has no") == (
        "A has no training-step timers (timing_s/* other than validation, checkpoint and profiling timers): its steps cannot be compared"
    )
    assert main(["compare", untimed, untimed, "--format", "json"]) == 0
    assert _said(json.loads(capsys.readouterr().out)["explanations"], "neither run has training") == (
        "neither run has training-step timers (timing_s/* other than validation, checkpoint and profiling timers):"
        " their steps cannot be compared"
    )


def test_a_run_compared_with_itself_is_warned_about(tmp_path, capsys, monkeypatch):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", a, "a/", "--format", "json"]) == 0  # one directory, named two ways
    err = capsys.readouterr().err
    assert f"A and B are the same run ({a}): nothing can differ" in err and len(err.strip().splitlines()) == 1


def test_a_finding_in_both_runs_that_grew_more_severe_is_said_to(tmp_path, capsys):
    # the slowest 10% hold 35% of A's rollout (at or above 30%: warn) and 60% of B's (at or above 50%: critical)
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.35)
    b = _run(tmp_path, "b", gen=100.0, tail_share=0.6)
    for runs, line in (((a, b), "more severe in B: "), ((b, a), "less severe in B: ")):
        assert main(["compare", *runs, "--format", "json"]) == 0
        (said,) = [s for s in json.loads(capsys.readouterr().out)["explanations"] if s.startswith(line)]
        change = "warn -> critical" if runs == (a, b) else "critical -> warn"
        assert f"long-tail-dominates ({change})" in said


def test_the_analysis_of_both_runs_shows_progress_on_a_terminal(tmp_path, capsys, monkeypatch):
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.2)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["compare", a, a, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("{") and "analysing A" in err and "analysing B" in err


def test_one_gpu_model_named_two_ways_is_like_for_like(tmp_path, capsys):
    runs = []
    for name, kind in (("a", "H100"), ("b", "NVIDIA H100 80GB HBM3")):  # a --gpu-type, and nvidia-smi's name
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": kind, "count": 8}}) as rec:
            rec.log_step(0, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    assert not [s for s in json.loads(capsys.readouterr().out)["explanations"] if "like for like" in s]


def test_phases_that_changed_alike_come_in_the_same_order_every_time(tmp_path):
    # old_log_prob and ref change alike (+10 s each), as do the phases that did not change: the order
    # of the rows and of the step sentence's parts must not hang on the process's string hash seed
    runs = []
    for name, fwd in (("a", 10.0), ("b", 20.0)):
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
            timers = {"gen": 40.0, "old_log_prob": fwd, "ref": fwd, "reward": 2.0, "adv": 1.0, "update_actor": 30.0}
            for step in range(4):
                rec.log_step(step, {f"timing_s/{k}": v for k, v in timers.items()})
        runs.append(run)
    outputs = set()
    for seed in ("1", "2", "3", "4", "5", "6"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        done = subprocess.run(
            [sys.executable, "-m", "rlscope", "compare", *runs, "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1
    assert _said(json.loads(outputs.pop())["explanations"], "B's steps").endswith(": old_log_prob +10 s, ref +10 s")


def test_a_run_without_mfu_is_told_what_it_needs(tmp_path, capsys):
    log = tmp_path / "b.log"  # a console log stating neither GPUs nor model nor batch
    log.write_text(
        "step:1 - timing_s/gen:40.0 - timing_s/update_actor:40.0 - timing_s/step:100.0 - "
        "prompt_length/mean:100.0 - response_length/mean:400.0\n"
    )
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    assert main(["compare", str(samples / "healthy-colocated"), str(log), "--format", "json"]) == 0
    said = [s for s in json.loads(capsys.readouterr().out)["explanations"] if "whole-step MFU" in s]
    assert said == [
        "B's whole-step MFU is n/a (needs --gpus; --gpu-type or --peak-tflops; --active-params; "
        '--meta \'{"batch_size": B, "group_size": G}\')'
    ]
    assert main(["compare", str(log), str(log), "--format", "json"]) == 0
    said = [s for s in json.loads(capsys.readouterr().out)["explanations"] if "whole-step MFU" in s]
    assert len(said) == 1 and said[0].startswith("neither run has a whole-step MFU (needs --gpus; ")


def test_what_a_run_was_read_without_is_said(tmp_path, capsys):
    good = "".join(f'{{"step": {i}, "timing_s/gen": 40.0, "timing_s/step": 100.0}}\n' for i in range(1, 5))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(good + '{"step": 5, "timing_s/gen": 4\n')  # a line cut short: left out
    b.write_text(good)
    assert main(["compare", str(a), str(b), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)["explanations"]
    # where the cut line is, and json's word for it
    first = f"{a}:5: Expecting ',' delimiter: line 1 column 30 (char 29)"
    assert f"A was read with a warning: the import (verl-jsonl) left out 1 bad_json (first at {first})" in out
    assert not [s for s in out if s.startswith("B was read")]


def test_an_option_that_does_not_fit_one_run_names_it(tmp_path, capsys):
    runs = []
    for name, count in (("a", 8), ("b", 16)):
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": count}}) as rec:
            rec.log_step(0, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
        runs.append(run)
    assert main(["compare", *runs, "--meta", '{"topology": "async", "split": "4:4"}']) == 2
    err = capsys.readouterr().err
    assert err == f"rlscope: compare: --meta: split 4:4 adds up to 8 GPUs, not the run's 16 (B: {runs[1]})\n"


def test_how_many_steps_each_run_has_is_a_row(tmp_path, capsys):
    # "recent means" of one step and of the last quarter of forty: the reader must see how much each rests on
    runs = []
    for name, steps in (("a", 1), ("b", 40)):
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
            for step in range(steps):
                rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    rows = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["steps (recent)"] == ("1 (1)", "40 (10)")


def test_runs_of_other_batch_shapes_are_said_not_to_be_like_for_like(tmp_path, capsys):
    runs = []
    for name, batch in (("a", 32), ("b", 64)):  # B's steps carry twice the prompts, 8 samples each
        run = str(tmp_path / name)
        with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}, "batch_size": batch, "group_size": 8}) as rec:
            rec.log_step(0, {"timing_s/gen": 10.0, "timing_s/step": 15.0})
        runs.append(run)
    assert main(["compare", *runs, "--format", "json"]) == 0
    assert "not like for like: prompts a step 32 -> 64" in json.loads(capsys.readouterr().out)["explanations"]
    assert main(["diagnose", runs[1], "--format", "json"]) == 0
    run = json.loads(capsys.readouterr().out)["run"]
    assert (run["batch_size"], run["group_size"]) == (64, 8)


H100_8 = {"gpu": {"type": "H100", "count": 8}}
GEN_UPDATE = {"timing_s/gen": 100.0, "timing_s/update_actor": 30.0}


def _timed_runs(tmp_path, a: list[dict], b: list[dict], meta_a: dict | None = None, meta_b: dict | None = None):
    """Runs ``a`` and ``b`` on 8 H100s (and ``meta_*``), step i logging the i-th dict of metrics."""
    runs = []
    for name, steps, meta in (("a", a, meta_a), ("b", b, meta_b)):
        runs.append(str(tmp_path / name))
        with Recorder(runs[-1], meta=H100_8 | (meta or {})) as rec:
            for step, metrics in enumerate(steps):
                rec.log_step(step, metrics)
    return runs


def _compared(capsys, runs: list[str]) -> tuple[dict[str, tuple], list[str]]:
    """``rlscope compare A B --format json``: its rows by measure (indent stripped), its explanations."""
    assert main(["compare", *runs, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return {r["measure"].strip(): (r["a"], r["b"]) for r in out["rows"]}, out["explanations"]


def test_a_phase_one_run_never_timed_is_n_a_not_zero(tmp_path, capsys):
    # A times gen 100 + update 30 of a 140 s step (10 s in no timer); B also times ref (8 s) of
    # a 148 s step, so gen and update_actor are alike and ref is B's alone: A's ref time, if any,
    # is inside A's 10 s of other, not 0 s
    a = [GEN_UPDATE | {"timing_s/step": 140.0}] * 4
    runs = _timed_runs(tmp_path, a, [GEN_UPDATE | {"timing_s/ref": 8.0, "timing_s/step": 148.0}] * 4)
    rows, explanations = _compared(capsys, runs)
    assert rows["ref"] == (None, pytest.approx(8.0)) and rows["other"] == pytest.approx((10.0, 10.0))
    assert _said(explanations, "B's steps") == "B's steps are 8 s slower than A's (+6%) (ref timed in B only)"
    assert main(["compare", *runs]) == 0
    (ref_row,) = [line for line in capsys.readouterr().out.splitlines() if "│   ref " in line]
    assert ref_row.split("│")[2].strip() == "n/a"


def test_the_wait_for_samples_of_a_run_whose_generation_is_beside_the_step_is_a_phase(tmp_path, capsys):
    # one-step overlap, no wait timer: gen 200 s beside the step, update 30 s of a 50 s (A) or 60 s
    # (B) step timer; the 20 s and 30 s no trainer timer holds are waiting for samples (up to the
    # rollout's 200 s), a measurement of the step timer, not an untimed 0
    overlap = {"topology": "one_step_overlap", "split": "6:2"}
    timers = {"timing_s/gen": 200.0, "timing_s/update_actor": 30.0}
    a, b = ([timers | {"timing_s/step": step_s}] * 4 for step_s in (50.0, 60.0))
    runs = _timed_runs(tmp_path, a, b, overlap, overlap)
    assert main(["diagnose", runs[0], "--format", "json"]) == 0
    assert "waiting" in json.loads(capsys.readouterr().out)["phases"]["logged"]
    rows, explanations = _compared(capsys, runs)
    assert rows["waiting"] == pytest.approx((20.0, 30.0)) and "other" not in rows  # 0 s in both: no row
    assert _said(explanations, "B's steps") == (
        "B's steps are 10 s slower than A's (+20%): waiting +10 s"
        " (generation runs beside the step in A and B: not counted in it)"
    )


def test_generation_beside_the_step_in_one_run_only_is_not_said_untimed(tmp_path, capsys):
    # both runs time gen (100 s) and update_actor (30 s); A's gen is inside its 130 s step, B's
    # (one-step overlap) beside its 30 s step: gen is timed in both, and the 100 s the steps differ
    # by is A's gen
    a, b = ([GEN_UPDATE | {"timing_s/step": step_s}] * 4 for step_s in (130.0, 30.0))
    runs = _timed_runs(tmp_path, a, b, {"topology": "colocated"}, {"topology": "one_step_overlap", "split": "6:2"})
    assert _said(_compared(capsys, runs)[1], "B's steps") == (
        "B's steps are 100 s faster than A's (-77%)"
        " (generation runs beside the step in B: not counted in it, while A's 100 s of gen is)"
    )


def test_steps_that_take_as_long_with_phases_that_moved_are_not_said_faster(tmp_path, capsys):
    # both 140 s steps of gen 100 and update 30; B also times ref (8 s) in every other step, out of
    # its other: over B's last 2 of 8 steps ref is 4 s a step and other 6 s, A's other 10 s
    step = GEN_UPDATE | {"timing_s/step": 140.0}
    runs = _timed_runs(tmp_path, [step] * 4, [step | ({"timing_s/ref": 8.0} if i % 2 else {}) for i in range(8)])
    assert _said(_compared(capsys, runs)[1], "B's steps") == (
        "B's steps take as long as A's (140 s against 140 s): other -4 s (ref timed in B only)"
    )


def test_other_of_a_run_without_a_step_timer_is_n_a_not_zero(tmp_path, capsys):
    # A times gen 100 + update 30 and no step (its step is their 130 s sum, a lower bound); B's
    # step timer holds 140 s, 10 s in no stage timer: A's other is unmeasured, not 0 s, so the 10 s
    # the steps differ by is no phase's
    rows, explanations = _compared(
        capsys, _timed_runs(tmp_path, [GEN_UPDATE] * 4, [GEN_UPDATE | {"timing_s/step": 140.0}] * 4)
    )
    assert rows["other"] == (None, pytest.approx(10.0))
    assert _said(explanations, "B's steps") == (
        "B's steps are 10 s slower than A's (+8%);"
        " A's step time is the sum of its stage timers (no timing_s/step), a lower bound"
    )


def test_a_phase_timed_only_before_the_recent_steps_is_n_a_there(tmp_path, capsys):
    # both 140 s steps of gen 100 and update 30 over 8 steps (recent: the last 2); A timed ref (8 s)
    # in its first 2 steps only, B in every step: A's recent ref is unmeasured (in its 10 s of
    # other), not 0 s, so no ref +8 s
    step = GEN_UPDATE | {"timing_s/step": 140.0}
    a = [step | ({"timing_s/ref": 8.0} if i < 2 else {}) for i in range(8)]
    runs = _timed_runs(tmp_path, a, [step | {"timing_s/ref": 8.0}] * 8)
    assert main(["diagnose", runs[0], "--format", "json"]) == 0
    phases = json.loads(capsys.readouterr().out)["phases"]
    assert phases["logged"] == ["gen", "ref", "update_actor"]
    assert phases["logged_recent"] == ["gen", "update_actor"]
    rows, explanations = _compared(capsys, runs)
    assert rows["ref"] == (None, pytest.approx(8.0)) and rows["other"] == pytest.approx((10.0, 2.0))
    assert (
        _said(explanations, "B's steps")
        == "B's steps take as long as A's (140 s against 140 s): other -8 s (ref timed in B only)"
    )


def test_a_run_of_no_training_steps_has_0_steps_not_n_a(tmp_path, capsys):
    # A logged a validation only (no training step), B 4 steps: A's count is known, and it is 0
    validation = [{"val-core/acc": 0.3, "timing_s/testing": 20.0}]
    rows, _ = _compared(capsys, _timed_runs(tmp_path, validation, [{"timing_s/gen": 10.0, "timing_s/step": 15.0}] * 4))
    assert rows["steps (recent)"] == ("0", "4 (1)")


def test_generation_a_run_did_not_time_is_n_a_not_0(tmp_path, capsys):
    # A times update_actor (30 s) of 140 s steps and no gen: its generation is unmeasured (in its
    # other), not 0 s and 0% of the step; B times gen 100 s of its 140 s steps
    a = [{"timing_s/update_actor": 30.0, "timing_s/step": 140.0}] * 4
    runs = _timed_runs(tmp_path, a, [GEN_UPDATE | {"timing_s/step": 140.0}] * 4)
    rows, _ = _compared(capsys, runs)
    assert rows["generation"] == (None, pytest.approx(100.0))
    assert rows["generation / step"] == (None, pytest.approx(100 / 140))
    assert main(["diagnose", runs[0]]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("generation ")]
    assert line.split(None, 1)[1].strip() == "n/a (no generation timer, timing_s/gen, in the recent steps)"


def test_a_run_of_validations_only_is_not_said_to_have_no_timers(tmp_path, capsys):
    # A timed a validation (timing_s/testing) and no training step: it has timers, none of a step
    timed = _run(tmp_path, "timed", gen=100.0, tail_share=0.2)
    validated = str(tmp_path / "validated")
    with Recorder(validated, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        rec.log_step(0, {"val-core/acc": 0.3, "timing_s/testing": 20.0})
    assert main(["compare", validated, timed, "--format", "json"]) == 0
    assert _said(json.loads(capsys.readouterr().out)["explanations"], "A has no") == (
        "A has no training-step timers (timing_s/* other than validation, checkpoint and profiling timers): its steps cannot be compared"
    )


def test_control_characters_in_a_path_do_not_reach_the_terminal_on_stderr(tmp_path, capsys):
    # the same-run warning and a one-line error name the path: an escape in it is written out
    run = _run(tmp_path, "ev\x1b[31mil", gen=100.0, tail_share=0.2)
    assert main(["compare", run, run, "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "ev\\x1b[31mil" in err
    assert main(["compare", run + "\x1b[2J", run]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and err.endswith("il\\x1b[2J: no such run directory or log file\n")


def test_not_like_for_like_is_said_before_the_step_difference(tmp_path, capsys):
    # B's steps are 40 s longer on twice the GPUs: the reader must know the runs differ before reading why
    a, b = ([GEN_UPDATE | {"timing_s/step": step_s}] * 4 for step_s in (140.0, 180.0))
    runs = _timed_runs(tmp_path, a, b, None, {"gpu": {"type": "H100", "count": 16}})
    explanations = _compared(capsys, runs)[1]
    assert explanations[0] == "not like for like: GPUs 8 -> 16"
    assert explanations[1].startswith("B's steps are 40 s slower than A's (+29%)")


def test_a_phase_timed_in_some_recent_steps_is_the_mean_of_those(tmp_path, capsys):
    # 140 s steps of gen 100 and update 30 over 8 steps (recent: the last 2); A times ref (8 s) in
    # every step, B in every other: B's ref takes 8 s where timed (not 4 s), while per step its 8 s
    # in 1 of 2 steps is 4 s, the rest of the other step in its other (10 s, else 2 s): per step B
    # has ref 4 s less and other 4 s more than A, which add up to the steps' 0 s difference
    step = GEN_UPDATE | {"timing_s/step": 140.0}
    b = [step | ({"timing_s/ref": 8.0} if i % 2 else {}) for i in range(8)]
    runs = _timed_runs(tmp_path, [step | {"timing_s/ref": 8.0}] * 8, b)
    assert main(["diagnose", runs[1], "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["phases"]["timed_recent"] == {"gen": 2, "ref": 1, "update_actor": 2}
    rows, explanations = _compared(capsys, runs)
    assert rows["ref"] == pytest.approx((8.0, 8.0)) and rows["other"] == pytest.approx((2.0, 6.0))
    assert (
        _said(explanations, "B's steps") == "B's steps take as long as A's (140 s against 140 s): other +4 s, ref -4 s"
    )
    assert _said(explanations, "B timed") == (
        "B timed ref in 1 of its 2 recent steps: the rows are the means of the steps that timed them,"
        " the step difference counts 0 s in the others"
    )
    assert not [e for e in explanations if e.startswith("A timed")]


def test_a_finding_the_other_run_could_not_evaluate_is_said_so(tmp_path, capsys):
    # the slowest 10% hold 35% of A's rollout (long-tail-dominates, warn); B has the same steps and
    # either trajectories whose tail is 20% (judged: no finding) or none at all (not judged)
    a = _run(tmp_path, "a", gen=100.0, tail_share=0.35)
    clean = _run(tmp_path, "clean", gen=100.0, tail_share=0.2)
    blind = _timed_runs(tmp_path, [], [GEN_UPDATE | {"timing_s/step": 130.0}] * 4)[1]
    explanations = _compared(capsys, [a, clean])[1]
    assert "long-tail-dominates" in _said(explanations, "only A: ").removeprefix("only A: ").split(", ")
    assert not [e for e in explanations if "could not evaluate" in e]
    explanations = _compared(capsys, [a, blind])[1]
    assert not [e for e in explanations if e.startswith("only A: ") and "long-tail-dominates" in e]
    assert _said(explanations, "only A, as B could not evaluate: ") == (
        "only A, as B could not evaluate: long-tail-dominates (no tail: no trajectories or response lengths)"
    )
    explanations = _compared(capsys, [blind, a])[1]
    assert (
        "only B, as A could not evaluate: long-tail-dominates (no tail: no trajectories or response lengths)"
        in explanations
    )


def test_every_finding_id_says_what_it_is_judged_from():
    # a new finding id must name its evidence, or be said to rest on what the document does not show
    from rlscope.advice.catalogue import CATALOGUE
    from rlscope.report import compare

    assert set(compare._JUDGED_FROM) | {"async-idle-imbalanced", "reward-no-signal"} == set(CATALOGUE)
    assert set(compare._JUDGED_FROM.values()) == set(compare._EVIDENCE)


def test_an_impossible_mfu_judges_no_cross_check():
    # MFU above 100% (mfu-impossible) returns before verl's phase MFUs are checked, though the
    # document lists them: a run without the mismatch finding there was not found clean of it
    from rlscope.report import compare

    check = [{"stage": "update_actor", "verl": 0.4, "rlscope": 0.1, "ratio": 4.0}]
    assert compare._unjudged({"mfu": {"mfu": 0.3, "cross_check": check}}, "mfu-cross-check-mismatch") is None
    assert compare._unjudged({"mfu": {"mfu": 1.7, "cross_check": check}}, "mfu-cross-check-mismatch") == (
        "no verl perf/mfu to check, or an MFU above 100%"
    )
    assert compare._unjudged({"mfu": {"mfu": 0.3, "cross_check": []}}, "mfu-cross-check-mismatch") is not None


def _long_tail_run(tmp_path, name: str, meta: dict) -> str:
    """4 steps of 200 s generation (its slowest 10% half of it) and a 30 s update: a run on
    more than one GPU whose what-if finds async streaming worth it (async-recommended)."""
    run = str(tmp_path / name)
    with Recorder(run, meta=meta) as rec:
        for step in range(4):
            rec.log_step(step, {"timing_s/gen": 200.0, "timing_s/update_actor": 30.0, "timing_s/step": 230.0})
            finish = [100.0 * (i + 1) / 9 for i in range(9)] + [200.0]
            rec.log_trajectories(step, [{"traj_id": str(i), "finish_time": f} for i, f in enumerate(finish)])
    return run


def test_a_topology_finding_is_judged_by_what_the_run_could_model(tmp_path, capsys):
    # one GPU cannot be split: the what-if has no async_streaming row, so async-recommended was not
    # judged there, though the run has a model (topology.missing null)
    eight = _long_tail_run(tmp_path, "eight", H100_8)
    one = _long_tail_run(tmp_path, "one", {"gpu": {"type": "H100", "count": 1}})
    explanations = _compared(capsys, [eight, one])[1]
    assert "async-recommended" in _said(explanations, "only A, as B could not evaluate: ")
    assert not [e for e in explanations if e.startswith("only A: ")]
    # a colocated run (no topology in meta.json) is never separated_sync: clean of separated-sync,
    # with or without a what-if (this one has no GPU count, so none)
    bare = _long_tail_run(tmp_path, "bare", {})
    separated = _long_tail_run(
        tmp_path, "separated", H100_8 | {"topology": "separated_sync", "split": {"rollout": 4, "train": 4}}
    )
    explanations = _compared(capsys, [bare, separated])[1]
    assert "separated-sync" in _said(explanations, "only B: ").removeprefix("only B: ").split(", ")
    assert "separated-sync" not in _said(explanations, "only B, as A could not evaluate: ")


def test_a_run_with_verl_lag_means_only_could_not_evaluate_staleness(tmp_path, capsys):
    # A's samples are 6 versions stale (p90 6, past the 4 of staleness-high); B logs only verl's
    # per-step lag mean and max, which the document shows (staleness.source "verl") but no
    # staleness finding is judged from
    a = str(tmp_path / "a")
    with Recorder(a, meta=H100_8) as rec:
        for step in range(4):
            rec.log_step(step, GEN_UPDATE | {"timing_s/step": 130.0})
            rec.log_trajectories(
                step,
                [
                    {
                        "traj_id": str(i),
                        "finish_time": 10.0 + i,
                        "trainer_version": step + 6,
                        "policy_version_start": step,
                    }
                    for i in range(10)
                ],
            )
    lag = "training/off_policy/trajectory_staleness_worst/"
    b = _timed_runs(
        tmp_path / "b", [], [GEN_UPDATE | {"timing_s/step": 130.0, lag + "mean": 6.0, lag + "max": 6.0}] * 4
    )[1]
    explanations = _compared(capsys, [a, b])[1]
    assert not [e for e in explanations if e.startswith("only A: ") and "staleness-high" in e]
    assert "staleness-high (no trajectories' policy versions)" in _said(
        explanations, "only A, as B could not evaluate: "
    )


def test_piped_explanations_are_whole_lines_without_trailing_blanks(capsys):
    # to a file or a pipe each explanation is one line, as diagnose's warnings: a number is not cut
    # from its unit at column 120, nor the cut line padded with a blank
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    assert main(["compare", str(samples / "moe-mismatch"), str(samples / "async-drift")]) == 0
    out = capsys.readouterr().out
    explained = out.split("What differs\n", 1)[1].splitlines()
    assert explained and all(line.startswith("  - ") for line in explained)
    assert not [line for line in out.splitlines() if line != line.rstrip()]


def test_stage_timers_overlap_is_judged_over_every_step_untracked_time_over_the_recent(tmp_path, capsys):
    # B's 8 steps of gen 100 and update 30: the first 6 in 140 s step timers, the recent 2 (the last
    # quarter) with none. stage-timers-overlap is judged over every step a step timer holds, so B's
    # first 6 were checked (130 s of stages within 140 s: clean); untracked-time over the recent
    # steps, none of which has a step timer, so B could not evaluate it
    b = [GEN_UPDATE | ({"timing_s/step": 140.0} if i < 6 else {}) for i in range(8)]
    overlapping = _timed_runs(tmp_path / "overlap", [GEN_UPDATE | {"timing_s/step": 120.0}] * 4, b)  # 130 s in 120 s
    untracked = _timed_runs(tmp_path / "untracked", [GEN_UPDATE | {"timing_s/step": 160.0}] * 4, b)  # 30 of 160 s
    assert main(["diagnose", overlapping[1], "--format", "json"]) == 0
    phases = json.loads(capsys.readouterr().out)["phases"]
    assert (phases["step_timed"], phases["step_timed_recent"]) == (6, 0)
    explanations = _compared(capsys, overlapping)[1]
    assert "stage-timers-overlap" in _said(explanations, "only A: ").removeprefix("only A: ").split(", ")
    assert not [e for e in explanations if "could not evaluate" in e]
    explanations = _compared(capsys, untracked)[1]
    assert _said(explanations, "only A, as B could not evaluate: ") == (
        "only A, as B could not evaluate: untracked-time (no timing_s/step in its recent steps)"
    )


def test_other_of_a_run_with_a_step_timer_in_some_recent_steps_is_the_mean_of_those(tmp_path, capsys):
    # 8 steps of gen 100 and update 30 (recent: the last 2). A's step timers hold 140 s (other 10 s);
    # B's hold 160 s in its odd steps (other 30 s) and its even steps have none (130 s, other 0 s by
    # definition). B's recent other is 30 s where a step timer measured it (not 15 s), while per
    # step B's (130 + 160) / 2 = 145 s is 5 s longer than A's, all of it other (15 - 10 s)
    a = [GEN_UPDATE | {"timing_s/step": 140.0}] * 8
    b = [GEN_UPDATE | ({"timing_s/step": 160.0} if i % 2 else {}) for i in range(8)]
    runs = _timed_runs(tmp_path, a, b)
    assert main(["diagnose", runs[1], "--format", "json"]) == 0
    phases = json.loads(capsys.readouterr().out)["phases"]
    assert (phases["step_timed"], phases["step_timed_recent"]) == (4, 1)
    rows, explanations = _compared(capsys, runs)
    assert rows["other"] == pytest.approx((10.0, 30.0)) and rows["step time"] == pytest.approx((140.0, 145.0))
    assert _said(explanations, "B's steps") == (
        "B's steps are 5 s slower than A's (+4%): other +5 s;"
        " B's step time is the sum of its stage timers where a step has no timing_s/step, a lower bound there"
    )
    assert _said(explanations, "B timed") == (
        "B timed other (timing_s/step) in 1 of its 2 recent steps: the rows are the means of the steps that timed"
        " them, the step difference counts 0 s in the others"
    )
    assert not [e for e in explanations if e.startswith("A timed")]


def test_untracked_time_of_a_run_with_a_step_timer_in_some_recent_steps_is_judged_over_those(tmp_path, capsys):
    # 8 steps of gen 100 and update 30 (recent: the last 2). A's step timers hold 140 s (other 10 s,
    # 7%: clean). B's hold 140 s too but for step 6, which has none (130 s, other 0 s by definition,
    # no measurement), and step 7, 146 s (other 16 s): B's untracked time is 16 of 146 s (11%, above
    # 10%) in the one recent step that measured it, not 8 of 138 s (6%) spread over both
    a = [GEN_UPDATE | {"timing_s/step": 140.0}] * 8
    b = [GEN_UPDATE | ({} if i == 6 else {"timing_s/step": 146.0 if i == 7 else 140.0}) for i in range(8)]
    explanations = _compared(capsys, _timed_runs(tmp_path, a, b))[1]
    assert _said(explanations, "only B: ") == "only B: untracked-time"  # A's recent steps were judged: clean
    assert not [e for e in explanations if "could not evaluate" in e]


def test_a_saved_report_is_refused_naming_its_schema(tmp_path, capsys):
    # compare reads runs, not saved reports: a report of an older rlscope lacks the fields added
    # since (phases.step_timed, ...) and would be misread as a run without them. Refused in one
    # line naming the report's schema, compact as diagnose writes it or indented as jq . prints it
    run = _timed_runs(tmp_path, [GEN_UPDATE | {"timing_s/step": 140.0}] * 4, [])[0]
    saved = tmp_path / "report.json"
    assert main(["diagnose", run, "--format", "json", "--output", str(saved)]) == 0
    indented = tmp_path / "indented.json"
    indented.write_text(json.dumps(json.loads(saved.read_text()), indent=2))
    for report, command in ((saved, ["compare", str(saved), run]), (indented, ["diagnose", str(indented)])):
        capsys.readouterr()
        assert main(command) == 1
        assert capsys.readouterr().err == (
            f"rlscope: {report}: an rlscope report (rlscope.diagnose/2), not a run: give the run directory"
            " or log it was made from\n"
        )


def _compare_with_lengths(tmp_path: Path, capsys, lengths: str) -> tuple[dict, dict]:
    """``compare`` of A, a console log of 4 steps whose response lengths are ``lengths`` (no
    trajectories), and B, a run with a measured tail of half its rollout (long-tail-dominates):
    the JSON and its rows by measure."""
    log = tmp_path / "a.log"
    log.write_text(
        "".join(
            f"step:{i} - timing_s/gen:100.0 - timing_s/update_actor:30.0 - timing_s/step:130.0 - {lengths}\n"
            for i in range(1, 5)
        )
    )
    b = _run(tmp_path, "b", gen=100.0, tail_share=0.5)
    assert main(["compare", str(log), b, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    return out, {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}


def test_a_tail_the_response_lengths_cannot_estimate_is_compared_by_its_bound(tmp_path, capsys):
    # A: mean 232 of max 256 (min 91): no estimate, at most (256 - 232) / (0.9 x 256) = 24 / 230.4 = 10% of rollout
    lengths = "response_length/mean:232.0 - response_length/max:256.0 - response_length/min:91.0"
    out, rows = _compare_with_lengths(tmp_path, capsys, lengths)
    assert rows["slowest-10% share of rollout"] == (None, pytest.approx(0.5))
    assert rows["slowest-10% share at most"] == (pytest.approx(24 / 230.4), None)
    assert rows["tail measured from"] == ("response lengths (no estimate: a bound only)", "trajectories")
    assert _said(out["explanations"], "A's response lengths") == (
        "A's response lengths give no estimate of the tail, only a bound (A's at most 10% of rollout, if all decode "
        "in one wave): generation's change is not split into throughput part and tail"
    )
    assert "long-tail-dominates (no tail estimate: response lengths bunched near the max give only a bound)" in (
        _said(out["explanations"], "only B, as A could not evaluate")
    )


def test_a_tail_the_response_lengths_give_neither_an_estimate_nor_a_bound_for_is_not_called_missing(tmp_path, capsys):
    # A: mean 300 above its max 256 (lengths that contradict each other): no estimate and no bound, yet A logged
    # response lengths, so it is no run "without trajectories or response lengths"
    out, rows = _compare_with_lengths(tmp_path, capsys, "response_length/mean:300.0 - response_length/max:256.0")
    assert rows["slowest-10% share of rollout"] == (None, pytest.approx(0.5))
    assert rows["slowest-10% share at most"] == (None, None)
    assert rows["tail measured from"] == ("response lengths (no estimate, no bound)", "trajectories")
    assert _said(out["explanations"], "A's response lengths") == (
        "A's response lengths give no estimate of the tail, nor a bound: generation's change is not split into "
        "throughput part and tail"
    )
    only = _said(out["explanations"], "only B, as A could not evaluate")
    assert "long-tail-dominates (no tail estimate: its response lengths give neither an estimate nor a bound)" in only
    assert "no trajectories or response lengths" not in " ".join(out["explanations"])


def _lengths_run(tmp_path: Path, name: str, means: dict[int, float]) -> str:
    """Steps of 100 s gen and 30 s update whose only tail evidence is ``means`` of max 256 (min 91)."""
    run = str(tmp_path / name)
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step, mean in means.items():
            rec.log_step(step, {"timing_s/gen": 100.0, "timing_s/update_actor": 30.0, "timing_s/step": 130.0})
            rec.log_step(
                step, {"response_length/mean": mean, "response_length/max": 256.0, "response_length/min": 91.0}
            )
    return run


def test_long_tail_growing_is_judged_only_where_the_recent_tail_is_known_as_compare_says(tmp_path, capsys):
    # estimated tail share 1 - mean ln 10 / 256: mean 100 gives 10%, mean 20 gives 82%, mean 232 none (bunched near
    # the max). A: 10% in steps 0-5, 82% from step 6 on, step 3 unknown: growing, judged over the steps it knows, as
    # its recent quarter is known. B: the same, but its recent quarter (steps 18-23) unknown: no tail share now, so
    # no growth to judge up to now, and compare says B could not evaluate it, not that B is clean of it
    grows = {s: 100.0 if s < 6 else 20.0 for s in range(24)}
    a = _lengths_run(tmp_path, "a", grows | {3: 232.0})
    b = _lengths_run(tmp_path, "b", grows | dict.fromkeys(range(18, 24), 232.0))
    assert main(["compare", a, b, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["measure"]: (r["a"], r["b"]) for r in out["rows"]}
    assert rows["slowest-10% share of rollout"] == (pytest.approx(1 - 20 * math.log(10) / 256), None)
    assert "long-tail-growing (no tail estimate: response lengths bunched near the max give only a bound)" in _said(
        out["explanations"], "only A, as B could not evaluate"
    )
    assert not any(e.startswith("only B") for e in out["explanations"])
    assert main(["diagnose", b, "--format", "json"]) == 0
    assert "long-tail-growing" not in {f["id"] for f in json.loads(capsys.readouterr().out)["findings"]}


def _clipped_run(tmp_path: Path, name: str, lengths: list[tuple[float, float]]) -> str:
    """Steps of 100 s gen and 30 s update with response lengths ``(mean, clip ratio)`` of max 256."""
    run = str(tmp_path / name)
    with Recorder(run, meta={"gpu": {"type": "H100", "count": 8}}) as rec:
        for step, (mean, clip) in enumerate(lengths):
            rec.log_step(step, {"timing_s/gen": 100.0, "timing_s/update_actor": 30.0, "timing_s/step": 130.0})
            rec.log_step(
                step,
                {"response_length/mean": mean, "response_length/max": 256.0, "response_length/clip_ratio": clip},
            )
    return run


def test_a_tail_growth_hidden_by_the_length_cap_is_not_evaluable_in_compare(tmp_path, capsys):
    # A: steps 0-1 at the cap, then 1 - mean ln 10 / 256 from 28% (mean 80) to 55% (mean 50): growing below
    # the cap. B: the same below the cap, but its recent step 7 at the cap: its growth up to now is not known,
    # so compare says B could not evaluate long-tail-growing, not that B is clean of it
    below = [(80.0, 0.02)] * 2 + [(70.0, 0.02)] * 2 + [(50.0, 0.0)] * 2
    a = _clipped_run(tmp_path, "a", [(180.0, 0.3)] * 2 + below)
    b = _clipped_run(tmp_path, "b", [*below, (50.0, 0.0), (200.0, 0.4)])
    assert main(["compare", a, b, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    said = _said(out["explanations"], "only A, as B could not evaluate")
    assert "long-tail-growing (no tail growth to judge: recent step 7 at the length cap)" in said


def test_verl_s_stage_mfu_is_a_row_where_a_whole_step_mfu_is_n_a(tmp_path, capsys):
    def log(name: str, actor_mfu: float) -> str:
        path = tmp_path / name  # no GPUs nor model stated: no whole-step MFU
        path.write_text(
            "".join(
                f"step:{s} - timing_s/gen:40.0 - timing_s/update_actor:40.0 - timing_s/step:100.0 - "
                f"perf/mfu/actor:{actor_mfu}\n"
                for s in range(1, 5)
            )
        )
        return str(path)

    a, b = log("a.log", 0.25), log("b.log", 0.375)
    assert main(["compare", a, b, "--format", "json"]) == 0
    rows = {r["measure"]: (r["a"], r["b"]) for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["whole-step MFU"] == (None, None)
    assert rows["verl's MFU of update_actor alone"] == (0.25, 0.375)  # each run's recent mean of perf/mfu/actor
    assert main(["compare", a, b]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "verl's MFU of update_actor" in x)
    assert "25.0%" in line and "37.5%" in line  # to a tenth, as diagnose shows an MFU
    samples = Path(__file__).resolve().parents[1] / "sample_traces"
    assert main(["compare", str(samples / "healthy-colocated"), str(samples / "longtail-8b"), "--format", "json"]) == 0
    assert not [r for r in json.loads(capsys.readouterr().out)["rows"] if "verl's" in r["measure"]]  # MFU known
