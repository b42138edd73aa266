"""Reward by source, log-prob mismatch and GPU idle, on small runs whose answers are known by construction."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rlscope import Recorder, RunReader
from rlscope.analyzers import gpu_idle, mismatch, rewards
from rlscope.analyzers._data import Trajectories
from rlscope.analyzers.mismatch import abs_quantile
from rlscope.trace.schema import LOGPROB_BIN_EDGES


def _traj(source: str, reward: float | None, status: str = "ok", code: str | None = None) -> dict:
    return {"data_source": source, "reward": reward, "reward_status": status, "reward_error": code}


def _reward_run(tmp_path) -> str:
    """8 steps x 3 sources x 10 samples.

    math: half zeros throughout (legitimate zeros), never errors;
    code: from step 4 on, 6 of 10 samples fail with TIMEOUT, 1 with HTTP_503; the rest score 1;
    search: scores 0.8 on average until step 5, then only zeros with no errors (collapse).
    """
    run = str(tmp_path / "rewards")
    with Recorder(run) as rec:
        for step in range(8):
            rows = [_traj("math", float(i % 2)) for i in range(10)]
            if step >= 4:
                rows += [_traj("code", None, "error", "TIMEOUT") for _ in range(6)]
                rows += [_traj("code", None, "error", "HTTP_503")]
                rows += [_traj("code", 1.0) for _ in range(3)]
            else:
                rows += [_traj("code", 1.0) for _ in range(10)]
            rows += [_traj("search", 0.8 if step < 5 else 0.0) for _ in range(10)]
            rec.log_trajectories(step, rows)
    return run


def test_failing_source_is_told_apart_from_zero_scores(tmp_path):
    result = rewards.analyze(_reward_run(tmp_path))
    assert result.available
    s = result.by_source
    # recent = last quarter of 8 steps = steps 6, 7
    assert s.loc["code", "recent_error_rate"] == pytest.approx(7 / 10)
    assert s.loc["code", "recent_mean_reward"] == pytest.approx(1.0)
    assert s.loc["math", "zero_share"] == pytest.approx(0.5)
    assert s.loc["math", "recent_error_rate"] == 0
    assert s.loc["search", "recent_zero_share"] == 1.0
    assert s.loc["search", "earlier_mean_reward"] == pytest.approx(0.8 * 5 / 6)  # steps 0-4 at 0.8, step 5 at 0
    errors = {(r.source, r.code): (r.count, r.first_step) for r in result.errors.itertuples()}
    assert errors == {("code", "TIMEOUT"): (24, 4), ("code", "HTTP_503"): (4, 4)}
    step4 = result.by_step[(result.by_step["step"] == 4) & (result.by_step["source"] == "code")].iloc[0]
    assert (step4["n"], step4["error_rate"], step4["mean_reward"]) == (10, 0.7, 1.0)

    by_id = {(f.id, f.evidence["source"]): f for f in result.findings}
    assert set(by_id) == {("reward-source-failing", "code"), ("reward-source-zero-collapse", "search")}
    failing = by_id[("reward-source-failing", "code")]
    assert failing.severity.value == "critical"  # 70% >= 50%
    assert (failing.evidence["first_step"], failing.evidence["last_step"]) == (4, 7)
    assert failing.evidence["error_rate"] == pytest.approx(0.7) and failing.evidence["ongoing"]
    assert failing.evidence["top_code"] == "TIMEOUT" and "still failing" in failing.recommendation
    assert by_id[("reward-source-zero-collapse", "search")].severity.value == "warn"


def test_an_outage_that_ended_is_still_reported(tmp_path):
    # steps 2-3: 4 of 10 samples fail; steps 0-1 and 4-11 are clean (recent quarter: steps 9-11)
    run = str(tmp_path / "past")
    with Recorder(run) as rec:
        for step in range(12):
            bad = 4 if step in (2, 3) else 0
            rows = [_traj("judge", None, "error", "HTTP_503")] * bad + [_traj("judge", 1.0)] * (10 - bad)
            rec.log_trajectories(step, rows)
    (f,) = rewards.analyze(run).findings
    assert f.id == "reward-source-failing" and f.severity.value == "warn"
    assert (f.evidence["first_step"], f.evidence["last_step"], f.evidence["ongoing"]) == (2, 3, False)
    assert f.evidence["error_rate"] == pytest.approx(0.4) and f.evidence["recent_error_rate"] == 0
    assert f.title == "the reward service for 'judge' failed on 40% of samples in steps 2-3"
    assert "recovered after step 3" in f.recommendation


def test_a_source_failing_in_two_steps_is_not_told_as_a_long_outage(tmp_path):
    # 20 steps of 20 samples; half fail in steps 2 and 19 only; step 20 is clean
    run = str(tmp_path / "twice")
    with Recorder(run) as rec:
        for step in range(1, 21):
            bad = 10 if step in (2, 19) else 0
            rows = [_traj("A", None, "error", "TIMEOUT")] * bad + [_traj("A", 1.0)] * (20 - bad)
            rec.log_trajectories(step, rows)
    (f,) = rewards.analyze(run).findings
    # steps 2-19 hold 18 x 20 = 360 samples, 20 of them failed; the last quarter (steps 16-20) 10 of 100
    assert f.evidence["error_rate"] == pytest.approx(20 / 360) and f.evidence["recent_error_rate"] == 0.1
    assert (f.evidence["failing_steps"], f.evidence["steps"], f.severity.value) == (2, 18, "warn")
    assert f.title == "the reward service for 'A' failed on 6% of samples in steps 2-19"
    assert f.recommendation.startswith(
        "the reward service for 'A' failed on 6% of samples in steps 2-19 (mostly TIMEOUT; 2 of those 18 steps at 5% "
        "errors or more) and failed as late as step 19 (10% of recent samples): "
    )
    assert "still failing" not in f.recommendation


def test_a_source_that_stopped_appearing_is_not_still_failing(tmp_path):
    # 40 steps; source A only in steps 1-5, half failing in steps 4-5; source B clean throughout
    run = str(tmp_path / "gone")
    with Recorder(run) as rec:
        for step in range(1, 41):
            rows = [_traj("B", 1.0)] * 20
            if step <= 5:
                bad = 10 if step >= 4 else 0
                rows += [_traj("A", None, "error", "TIMEOUT")] * bad + [_traj("A", 1.0)] * (20 - bad)
            rec.log_trajectories(step, rows)
    (f,) = rewards.analyze(run).findings
    assert f.evidence["ongoing"] is False and "still failing" not in f.recommendation
    assert "and has had no samples since step 5" in f.recommendation and f.severity.value == "warn"
    assert f.title == "the reward service for 'A' failed on 50% of samples in steps 4-5"


def test_an_outage_of_one_step_is_told_as_one_step(tmp_path):
    run = str(tmp_path / "one")
    with Recorder(run) as rec:
        for step in range(12):
            bad = 4 if step == 3 else 0
            rec.log_trajectories(
                step, [_traj("judge", None, "error", "HTTP_503")] * bad + [_traj("judge", 1.0)] * (10 - bad)
            )
    (f,) = rewards.analyze(run).findings
    assert f.title == "the reward service for 'judge' failed on 40% of samples in step 3"
    assert "in step 3 (mostly HTTP_503) and recovered after step 3" in f.recommendation


def test_all_zero_run_without_errors_or_history_is_not_called_a_collapse(tmp_path):
    run = str(tmp_path / "zeros")
    with Recorder(run) as rec:
        for step in range(4):
            rec.log_trajectories(step, [_traj("math", 0.0) for _ in range(8)])
    result = rewards.analyze(run)
    assert result.by_source.loc["math", "zero_share"] == 1.0
    assert result.findings == []


def test_hard_source_that_always_scored_mostly_zero_is_not_a_collapse(tmp_path):
    # 9 of 10 samples score 0 in steps 0-5, then 10 of 10: zero share 90% -> 100%, a 10-point rise
    run = str(tmp_path / "hard")
    with Recorder(run) as rec:
        for step in range(8):
            zeros = 10 if step >= 6 else 9
            rows = [_traj("aime-hard", 0.0) for _ in range(zeros)] + [_traj("aime-hard", 1.0)] * (10 - zeros)
            rec.log_trajectories(step, rows + [_traj("gsm8k", 1.0) for _ in range(10)])
    result = rewards.analyze(run)
    assert result.by_source.loc["aime-hard", "recent_zero_share"] == 1.0
    assert result.by_source.loc["aime-hard", "earlier_zero_share"] == pytest.approx(0.9)
    assert result.findings == []


def test_no_rewards_recorded_is_unavailable(tmp_path):
    run = str(tmp_path / "none")
    with Recorder(run) as rec:
        rec.log_trajectories(0, [{"traj_id": "a", "response_tokens": 5}])
    assert rewards.analyze(run).available is False


def test_abs_quantile_interpolates_inside_log_bins():
    counts = np.zeros(len(LOGPROB_BIN_EDGES) - 1, dtype=np.int64)
    i = int(np.searchsorted(LOGPROB_BIN_EDGES, 1e-3, side="right") - 1)  # bin [1e-3, 1.78e-3)
    counts[i] = 100
    lo, hi = LOGPROB_BIN_EDGES[i], LOGPROB_BIN_EDGES[i + 1]
    assert lo == pytest.approx(1e-3)
    assert abs_quantile(counts, 0.5) == pytest.approx(math.sqrt(lo * hi))  # halfway in log space
    assert abs_quantile(counts, 1.0) == pytest.approx(hi)
    assert math.isnan(abs_quantile(np.zeros_like(counts), 0.5))


def test_abs_quantiles_of_each_row_of_a_table():
    edges, bins = LOGPROB_BIN_EDGES, len(LOGPROB_BIN_EDGES) - 1
    i = int(np.searchsorted(edges, 1e-3, side="right") - 1)
    table = np.zeros((6, bins), dtype=np.int64)
    table[1, i] = 100  # one bin: halfway through it in log space
    table[2, 0] = 10  # the first bin starts at 0: linear in it
    table[3, -1] = 4  # the last bin is open: its lower edge
    table[4, [i, i + 2]] = [30, 70]  # the median is 20 of bin i + 2's 70, past the empty bin i + 1
    table[5, [i, i + 2]] = [50, 50]  # the median is bin i's last count: its upper edge
    lo2, hi2 = edges[i + 2], edges[i + 3]
    want = [
        math.nan,
        math.sqrt(edges[i] * edges[i + 1]),
        edges[1] * 0.5,
        edges[-2],
        lo2 * (hi2 / lo2) ** (20 / 70),
        edges[i + 1],
    ]
    got = mismatch.abs_quantiles(table, 0.5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert [abs_quantile(row, 0.5) for row in table] == pytest.approx(want, nan_ok=True)


def _mismatch_run(tmp_path, name: str, meta: dict, scale: float, flips: int = 0) -> str:
    run = str(tmp_path / name)
    rng = np.random.default_rng(0)
    with Recorder(run, meta=meta) as rec:
        for step in range(4):
            d = rng.normal(0, scale, 20_000)
            d[:flips] = 3.0  # IS weight e^3 > 2: clipped, and |delta| > 1: a routing flip
            rec.log_logprob_delta(step, d)
    return run


def test_bf16_dense_at_its_normal_level_has_no_finding(tmp_path):
    # |N(0, s)| has median 0.674 s; s = 1e-3 -> 6.7e-4 < 1e-3
    result = mismatch.analyze(_mismatch_run(tmp_path, "bf16", {"precision": "bf16"}, 1e-3))
    assert result.source == "histogram" and result.level == 1e-3
    assert result.per_step["p50_abs"].iloc[-1] == pytest.approx(0.674e-3, rel=0.15)
    assert result.findings == []


def test_bf16_rollout_with_fp8_sized_mismatch_is_flagged(tmp_path):
    result = mismatch.analyze(_mismatch_run(tmp_path, "hot", {"precision": "bf16"}, 2e-2))
    (f,) = result.findings
    assert f.id == "logprob-mismatch-high" and f.severity.value == "critical"  # 13x the bf16 level
    assert f.evidence["abs_delta"] == pytest.approx(0.674 * 2e-2, rel=0.15)
    # the same numbers are normal for an fp8 rollout
    assert mismatch.analyze(_mismatch_run(tmp_path, "fp8", {"precision": "fp8"}, 2e-3)).findings == []


@pytest.mark.parametrize(("scale", "fresh", "stale"), [(4e-3, "warn", "info"), (2e-2, "critical", "critical")])
def test_a_gap_on_stale_samples_is_not_blamed_on_precision_alone(tmp_path, scale, fresh, stale):
    run = _mismatch_run(tmp_path, "gap", {"precision": "bf16"}, scale)  # median 2.7e-3 (2.7x), 1.3e-2 (13x)
    (now,) = mismatch.analyze(run).findings
    (late,) = mismatch.analyze(run, stale_versions=2.0).findings
    assert (now.severity.value, late.severity.value) == (fresh, stale)
    assert "further off-policy than precision explains" in now.recommendation
    if stale == "info":  # a critical gap is more than a version or two of drift explains
        assert "2.0 policy versions stale" in late.recommendation and late.evidence["mean_lag"] == 2.0
    else:
        assert late == now
    assert mismatch.analyze(run, stale_versions=0.4).findings[0].severity.value == fresh  # under half a version


def test_the_async_sample_s_gap_is_told_against_its_staleness():
    from rlscope.analyzers import analyze_run, staleness

    d = analyze_run(str(Path(__file__).resolve().parents[1] / "sample_traces" / "async-drift"))
    (f,) = [f for f in d.findings if f.id == "logprob-mismatch-high"]
    per_step = staleness.recent_mean_lag(d.staleness)
    last = d.staleness.per_step.iloc[-5:]  # the last quarter of 20 steps, weighted by samples
    assert per_step == pytest.approx((last["mean"] * last["n"]).sum() / last["n"].sum())
    assert f.severity.value == "info" and f.evidence["mean_lag"] == pytest.approx(per_step) and per_step >= 1


def test_flips_and_is_clipping_are_counted(tmp_path):
    run = _mismatch_run(tmp_path, "moe", {"precision": "bf16", "model_type": "moe"}, 1e-3, flips=400)
    result = mismatch.analyze(run)
    assert result.per_step["share_above_1"].iloc[0] == pytest.approx(400 / 20_000)
    assert result.per_step["is_clip_share"].iloc[0] == pytest.approx(400 / 20_000)
    # flips are expected for MoE (info), and 2% clipped >= 1% warns
    assert [(f.id, f.severity.value) for f in result.findings] == [
        ("moe-routing-flips", "info"),
        ("is-clip-high", "warn"),
    ]
    assert result.findings[0].evidence["flip_share"] == pytest.approx(400 / 20_000)
    dense = mismatch.analyze(_mismatch_run(tmp_path, "dense", {"precision": "bf16"}, 1e-3, flips=400))
    assert [f.id for f in dense.findings] == ["logprob-mismatch-high", "is-clip-high"]
    # its median is normal: the title names what is not, the 400 of 20,000 tokens past 1
    assert dense.findings[0].title.endswith("2.00% of tokens differ by more than 1 on a dense model")


def test_verl_scalars_are_used_when_no_histogram_exists(tmp_path):
    run = str(tmp_path / "scalars")
    with Recorder(run, meta={"precision": "bf16"}) as rec:
        for step in range(4):
            rec.log_step(step, {"training/rollout_probs_diff_mean": 5e-3, "training/rollout_probs_diff_max": 0.4})
    result = mismatch.analyze(run)
    assert result.source == "verl-scalars"
    assert list(result.per_step.columns) == ["prob_diff_mean", "prob_diff_max"]
    (f,) = result.findings
    assert f.evidence["measure"].startswith("mean |delta p|") and f.evidence["factor"] == pytest.approx(5.0)
    # the title says which statistic it is: verl's mean gap in probability, not a median log-prob gap
    assert f.evidence["statistic"] == "mean |delta p|" and "mean |delta p| 0.005 against" in f.title


def _gpu_run(tmp_path, meta=None) -> str:
    """4 steps of 100 s: gen 0-70 s (rollout GPU 100%, trainer GPU 0%), update 70-100 s (trainer 100%).

    Samples every second: the trainer GPU is idle for 70 of 100 samples per step.
    """
    run = str(tmp_path / "gpu")
    with Recorder(run, meta=meta) as rec:
        for step in range(4):
            t0 = 1000.0 + 100 * step
            rec.log_span(step, "gen", t0, t0 + 70, role="rollout")
            rec.log_span(step, "update_actor", t0 + 70, t0 + 100)
            samples = []
            for s in range(100):
                gen = s < 70
                samples.append({"time": t0 + s, "gpu": 0, "role": "trainer", "util_pct": 0.0 if gen else 100.0})
                samples.append({"time": t0 + s, "gpu": 1, "role": "rollout", "util_pct": 100.0 if gen else 3.0})
            rec.log_gpu(samples)
    return run


def test_gpu_idle_share_per_role_step_and_phase(tmp_path):
    result = gpu_idle.analyze(_gpu_run(tmp_path))
    assert result.by_role.loc["trainer", "idle_share"] == pytest.approx(0.70)
    assert result.by_role.loc["rollout", "idle_share"] == pytest.approx(0.30)
    trainer_steps = result.by_step[result.by_step["role"] == "trainer"]
    assert list(trainer_steps["samples"]) == [100] * 4
    assert list(trainer_steps["idle_share"]) == pytest.approx([0.7] * 4)
    phases = result.by_phase.set_index(["phase", "role"])
    assert phases.loc[("gen", "trainer"), "idle_share"] == 1.0
    assert phases.loc[("update_actor", "trainer"), "idle_share"] == 0.0
    assert phases.loc[("update_actor", "rollout"), "mean_util_pct"] == pytest.approx(3.0)
    (f,) = result.findings
    assert (
        f.id == "gpu-idle-in-training"
        and f.severity.value == "critical"
        and f.evidence["idle_share"] == pytest.approx(0.7)
    )


@pytest.mark.parametrize(
    ("topology", "lever"),
    [
        ("separated", "Overlap rollout with training (one-step overlap or async streaming)"),
        ("one_step_overlap", "Move GPUs from training to rollout or cut the long tail"),
        ("async", "Move GPUs from training to rollout until the trainer idles little"),
    ],
)
def test_an_idle_learner_is_told_to_overlap_only_when_it_does_not(tmp_path, topology, lever):
    # the same 70% idle learner: a run that already overlaps rollout with training is not told
    # to overlap them; under one-step overlap T = max(T_thr n/n_r + T_tail, T_t n/n_t) + T_sync,
    # so the learner idles when the rollout side is the longer one: the lever is the split
    meta = {"gpu": {"type": "H100", "count": 2}, "topology": topology, "split": "1:1"}
    (f,) = gpu_idle.analyze(_gpu_run(tmp_path, meta)).findings
    assert lever in f.recommendation
    assert ("Overlap rollout with training" in f.recommendation) == (topology == "separated")


def test_gpu_idle_without_samples_is_unavailable(tmp_path):
    run = str(tmp_path / "none")
    with Recorder(run) as rec:
        rec.log_step(0, {"a": 1.0})
    assert gpu_idle.analyze(RunReader(run)).available is False


def test_a_span_without_a_phase_counts_in_no_phase(tmp_path):
    run = _gpu_run(tmp_path)
    with Recorder(run) as rec:  # a second writer adds a span with no phase over the first step
        rec.log_span(0, None, 0.0, 50.0)
    result = gpu_idle.analyze(RunReader(run))
    assert set(result.by_phase["phase"]) == {"gen", "update_actor"}
    assert list(result.by_step[result.by_step["role"] == "trainer"]["samples"]) == [100] * 4


def _trainer_samples(idle: Callable[[int], bool]) -> list[dict]:
    """One trainer GPU sampled each second for 200 s: 0% busy in the seconds ``idle`` says, else 90%."""
    return [{"time": float(t), "gpu": 0, "role": "trainer", "util_pct": 0.0 if idle(t) else 90.0} for t in range(200)]


def _trainer_steps(run: str, spans: list[tuple], idle: Callable[[int], bool]) -> pd.DataFrame:
    """GPU idle's per-step table, by step, of a run of ``spans`` ((step, name, start, end[, role]))
    beside :func:`_trainer_samples` of ``idle``."""
    with Recorder(run) as rec:
        for step, name, start, end, *role in spans:
            rec.log_span(step, name, start, end, **({"role": role[0]} if role else {}))
        rec.log_gpu(_trainer_samples(idle))
    return gpu_idle.analyze(RunReader(run)).by_step.set_index("step")


def test_a_step_is_its_step_span_when_generation_overlaps_it(tmp_path):
    # one-step overlap: step 1's batch is generated during step 0 (gen span 50-100 s); the step
    # timers say step 0 is 0-100 s and step 1 is 100-200 s. The trainer GPU idles 100-150 s.
    spans = [(0, "step", 0.0, 100.0), (1, "step", 100.0, 200.0), (1, "gen", 50.0, 100.0, "rollout")]
    spans.append((1, "update_actor", 150.0, 200.0))
    steps = _trainer_steps(str(tmp_path / "overlap"), spans, lambda t: 100 <= t < 150)
    # 100 samples a step, none counted twice; step 1 idles 50 of its 100 (the spans' union, 50-200 s, says 50 of 150)
    assert steps["samples"].tolist() == [100, 100]
    assert steps["idle_share"].tolist() == [0.0, 0.5]


def test_steps_with_and_without_a_step_span_each_get_their_own_window(tmp_path):
    # step 0 has no step timer: its window is its spans' union, 0-100 s; step 1's step span
    # (100-200 s) is its window although its gen span began at 50 s. The trainer idles 40-60 s
    # and 100-150 s: 20 of step 0's 100 samples, 50 of step 1's 100.
    spans = [(0, "gen", 0.0, 60.0), (0, "update_actor", 60.0, 100.0), (1, "gen", 50.0, 100.0, "rollout")]
    spans.append((1, "step", 100.0, 200.0))
    steps = _trainer_steps(str(tmp_path / "mixed"), spans, lambda t: 40 <= t < 60 or 100 <= t < 150)
    assert steps["samples"].tolist() == [100, 100]
    assert steps["idle_share"].tolist() == [0.2, 0.5]


def test_time_shared_gpus_of_a_colocated_run_are_the_learner(tmp_path):
    # verl's colocated worker: every GPU is "actor_rollout", idle 70 of every 100 s
    run = str(tmp_path / "colocated")
    with Recorder(run) as rec:
        for step in range(4):
            t0 = 100.0 * step
            rec.log_span(step, "gen", t0, t0 + 100)
            rec.log_gpu(
                [
                    {"time": t0 + s, "gpu": 0, "role": "actor_rollout", "util_pct": 0.0 if s < 70 else 95.0}
                    for s in range(100)
                ]
            )
    (f,) = gpu_idle.analyze(RunReader(run)).findings
    assert f.evidence["role"] == "actor_rollout" and f.evidence["idle_share"] == pytest.approx(0.7)
    assert "engines empty while the slowest trajectories finish" in f.recommendation


def test_gpu_idle_with_many_roles_matches_each_role_alone(tmp_path):
    # 12 roles whose samples interleave in time: each role's idle share is its own
    run = str(tmp_path / "roles")
    with Recorder(run) as rec:
        rec.log_gpu(
            [
                {"time": float(i), "gpu": i % 12, "role": f"r{i % 12:02d}", "util_pct": float(i % 12 < 3) * 90}
                for i in range(1200)
            ]
        )
        rec.log_span(0, "gen", 0.0, 600.0)
        rec.log_span(1, "gen", 600.0, 1200.0)
    result = gpu_idle.analyze(RunReader(run))
    assert result.by_role["samples"].tolist() == [100] * 12
    assert result.by_role["idle_share"].tolist() == [0.0] * 3 + [1.0] * 9  # r00-r02 at 90%, the rest at 0%
    assert result.by_step["samples"].tolist() == [50] * 24


def test_gpu_idle_of_samples_written_out_of_time_order(tmp_path):
    # two roles' samples, logged newest first: role a idles for t < 30, role b from t = 30 on
    run = str(tmp_path / "unordered")
    with Recorder(run) as rec:
        rec.log_gpu(
            [
                {"time": float(t), "gpu": g, "role": role, "util_pct": 100.0 * ((t < 30) == (role == "b"))}
                for t in reversed(range(100))
                for g, role in enumerate("ab")
            ]
        )
        rec.log_span(0, "gen", 0.0, 50.0)
        rec.log_span(1, "gen", 50.0, 100.0)
    by_step = gpu_idle.analyze(RunReader(run)).by_step.set_index(["role", "step"])["idle_share"]
    # step 0 (t 0-49): a idles 30 of 50, b 20 of 50; step 1: a never, b always
    assert by_step.to_dict() == {("a", 0): 0.6, ("a", 1): 0.0, ("b", 0): 0.4, ("b", 1): 1.0}


def test_a_reward_beside_an_error_is_not_a_score(tmp_path):
    # scored rows 1.0 and 0.0: mean 0.5; the 1.0 reported alongside an error is left out
    run = str(tmp_path / "r")
    with Recorder(run) as rec:
        rec.log_trajectories(0, [_traj("a", 1.0), _traj("a", 1.0, "error", "E"), _traj("a", 0.0)])
    row = rewards.analyze(run).by_step.iloc[0]
    assert (row["n"], row["errors"], row["scored"], row["mean_reward"], row["zero_share"]) == (3, 1, 2, 0.5, 0.5)


def test_many_sources_are_counted_a_few_steps_at_a_time(tmp_path, monkeypatch):
    # the same counts whether a chunk holds every step or only one
    run = str(tmp_path / "many")
    with Recorder(run) as rec:
        for step in range(6):
            rec.log_trajectories(step, [_traj(f"s{(step * 7 + i) % 40:02d}", float(i % 3 == 0)) for i in range(30)])
    whole = rewards.analyze(run).by_step
    monkeypatch.setattr(rewards, "_CHUNK_CELLS", 1)
    split = rewards.analyze(run).by_step
    assert len(whole) == 6 * 30 and whole.equals(split)
    assert whole["source"].tolist()[:3] == sorted(whole["source"].tolist()[:30])[:3]  # sources sorted in a step


def test_errors_of_rows_out_of_step_order_across_chunks_keep_their_codes():
    # rows out of step order, their text in chunks whose dictionaries differ, errors under two
    # statuses and a missing status (ok): each error keeps its own code and first step
    rows = [
        (3, "a", None, "error", "E1"),
        (1, "a", 1.0, None, None),
        (2, "b", None, "timeout", "T"),
        (1, "a", None, "error", "E2"),
        (2, "a", 0.0, "ok", None),
        (1, "b", None, "timeout", "T"),
        (3, "a", 1.0, "ok", None),
        (2, "a", None, "error", "E2"),
    ]

    def text(i: int) -> pa.ChunkedArray:  # three chunks, each dictionary-encoded on its own
        values = [r[i] for r in rows]
        return pa.chunked_array([pa.array(values[a:b]).dictionary_encode() for a, b in ((0, 3), (3, 5), (5, 8))])

    table = pa.table(
        {
            "step": [r[0] for r in rows],
            "data_source": text(1),
            "reward": pa.array([r[2] for r in rows], pa.float64()),
            "reward_status": text(3),
            "reward_error": text(4),
        }
    )
    result = rewards.analyze(Trajectories(table))
    errors = {(r.source, r.code): (r.count, r.first_step) for r in result.errors.itertuples()}
    assert errors == {("a", "E1"): (1, 3), ("a", "E2"): (2, 1), ("b", "T"): (2, 1)}
    by_step = {(r.step, r.source): (r.n, r.errors, r.scored, r.zeros) for r in result.by_step.itertuples()}
    assert by_step == {
        (1, "a"): (2, 1, 1, 0),
        (1, "b"): (1, 1, 0, 0),
        (2, "a"): (2, 1, 1, 1),
        (2, "b"): (1, 1, 0, 0),
        (3, "a"): (2, 1, 1, 0),
    }


def _score_run(tmp_path, ranges: list[tuple[float, float]], advantages: list[tuple[float, float]] | None) -> str:
    """One step per (score min, score max); advantages (min, max) per step, if given."""
    run = str(tmp_path / "scores")
    with Recorder(run) as rec:
        for step, (low, high) in enumerate(ranges):
            metrics = {"critic/score/min": low, "critic/score/max": high, "critic/score/mean": (low + high) / 2}
            if advantages is not None:
                metrics |= {"critic/advantages/min": advantages[step][0], "critic/advantages/max": advantages[step][1]}
            rec.log_step(step, metrics)
    return run


def test_steps_where_every_sample_scored_the_same_have_no_reward_signal(tmp_path):
    # the last quarter of 8 steps is steps 6-7; both scored 0 on every sample, with advantages all 0
    flat = [(0.0, 1.0)] * 6 + [(0.0, 0.0)] * 2
    (f,) = rewards.analyze(_score_run(tmp_path / "a", flat, [(-1.0, 1.0)] * 6 + [(0.0, 0.0)] * 2)).findings
    assert f.id == "reward-no-signal" and f.severity.value == "critical"
    assert f.evidence == {"steps": 2, "first_step": 6, "last_step": 7, "reward": 0.0, "advantages_zero": True}
    # no advantages logged: a group-relative estimator would learn nothing, a critic might
    (f,) = rewards.analyze(_score_run(tmp_path / "b", flat, None)).findings
    assert f.severity.value == "warn" and "group-relative" in f.recommendation


def test_a_critic_or_one_informative_recent_step_is_a_signal(tmp_path):
    flat = [(0.0, 0.0)] * 8
    # PPO with a critic: flat rewards, yet advantages from the value function
    assert rewards.analyze(_score_run(tmp_path / "a", flat, [(-2.0, 2.0)] * 8)).findings == []
    # one recent step (of 6-7) with a spread of rewards
    mixed = [(0.0, 0.0)] * 7 + [(0.0, 1.0)]
    assert rewards.analyze(_score_run(tmp_path / "b", mixed, None)).findings == []


def test_a_broken_histogram_row_is_left_out_with_a_warning(tmp_path, caplog):
    from rlscope.trace.schema import LOGPROB
    from rlscope.trace.store import write_segment

    run = _mismatch_run(tmp_path, "broken", {"precision": "bf16"}, 1.0)
    before = mismatch.analyze(RunReader(run))
    for i, counts in enumerate(([1, 2, 3], None)):  # another writer's bins; no histogram at all
        row = pa.Table.from_pylist([{"step": 99, "abs_counts": counts}], schema=LOGPROB)
        write_segment(run, "logprob", row, writer_id="other", seq=i)
    with caplog.at_level("WARNING", logger="rlscope"):
        after = mismatch.analyze(RunReader(run))
    assert "2 log-prob histogram rows without one count per bin; left out" in caplog.text
    pd.testing.assert_frame_equal(after.per_step, before.per_step)


def test_mismatch_keeps_a_redone_step_s_last_attempt(tmp_path):
    """A restarted run measures step 2 again (attempt 1): only that histogram counts for it."""
    with Recorder(tmp_path / "r", meta={"precision": "bf16"}) as rec:
        rec.log_logprob_delta(1, np.full(100, 1e-3))
        rec.log_logprob_delta(2, np.full(100, 5.0))  # the crashed attempt's
        rec.log_logprob_delta(2, np.full(40, 1e-3), attempt=1)
    result = mismatch.analyze(str(tmp_path / "r"))
    assert result.per_step["n_tokens"].to_dict() == {1: 100, 2: 40}
    assert result.per_step["abs_max"].to_dict() == pytest.approx({1: 1e-3, 2: 1e-3})
