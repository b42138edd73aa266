"""Dashboard figure builders on the sample traces, the live data layer, and the pages served in-process.

Expected values are derived here straight from the run-directory tables (numpy and pandas
on what ``RunReader`` returns), not from the analyzers the dashboard uses.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

pytest.importorskip("dash")
pytest.importorskip("plotly")

from resumed_async import LOGGED_JOBS, RESUMED_JOBS, resumed_record

from rlscope import Recorder
from rlscope.analyzers import analyze_run, drift
from rlscope.analyzers.anatomy import PHASES
from rlscope.dashboards import figures
from rlscope.dashboards.live import LiveRun, LiveRuns, UnknownRun
from rlscope.trace.compact import RunReader, compact_run
from rlscope.trace.schema import LOGPROB_BIN_EDGES
from rlscope.trace.store import write_meta

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_traces"
NAMES = ["healthy-colocated", "async-drift", "agentic-failing-reward", "moe-mismatch", "longtail-8b"]


@pytest.fixture(scope="module")
def runs() -> dict[str, LiveRun]:
    live = LiveRuns([SAMPLES / n for n in NAMES])
    for run in live.runs:
        run.refresh(force=True)
    return {run.label: run for run in live.runs}


def _table(name: str, table: str, columns: list[str], **where) -> pd.DataFrame:
    reader = RunReader(SAMPLES / name)
    expr = None
    for col, value in where.items():
        cond = pc.field(col) == value
        expr = cond if expr is None else expr & cond
    return reader.read(table, columns, filter=expr).to_pandas()


def _metric(name: str, key: str) -> pd.Series:
    steps = _table(name, "steps", ["step", "key", "value"])
    return steps[steps["key"] == key].set_index("step")["value"].sort_index()


def _traces(fig, kind: str | None = None) -> list:
    return [t for t in fig.data if kind is None or t.type == kind]


def _trace(fig, name: str):
    (trace,) = [t for t in fig.data if t.name == name]
    return trace


def _is_placeholder(fig) -> bool:
    return not fig.data and len(fig.layout.annotations) == 1


# -- overview ------------------------------------------------------------------------------


def test_step_phases_stack_the_verl_stage_timers(runs):
    fig = figures.step_phases(runs["healthy-colocated"].phases)
    bars = _traces(fig)
    assert bars and all(t.type == "bar" for t in bars)
    assert {"gen", "old_log_prob", "ref", "update_actor", "reward"} <= {t.name for t in bars}
    assert fig.layout.barmode == "stack"
    assert fig.layout.xaxis.title.text == "step" and fig.layout.yaxis.title.text == "seconds"
    gen = _metric("healthy-colocated", "timing_s/gen")
    assert list(_trace(fig, "gen").x) == gen.index.tolist()
    np.testing.assert_allclose(_trace(fig, "gen").y, gen.to_numpy())
    # phases + other = the step timer, or the timers' sum where they add up to a little more
    steps = _table("healthy-colocated", "steps", ["step", "key", "value"])
    timers = steps[steps["key"].str.startswith("timing_s/")].pivot(index="step", columns="key", values="value")
    expected = np.maximum(timers["timing_s/step"], timers.drop(columns="timing_s/step").sum(axis=1))
    stacked = np.sum([np.asarray(t.y, dtype=float) for t in bars], axis=0)
    np.testing.assert_allclose(stacked, expected.to_numpy(), rtol=1e-9)


def test_overlapped_generation_is_a_line_beside_the_step(runs):
    run = runs["moe-mismatch"]
    assert run.facts.overlapped
    fig = figures.step_phases(run.phases, overlapped=True)
    gen = _trace(fig, "gen (beside the step)")
    assert gen.type == "scatter" and "gen" not in {t.name for t in fig.data if t.type == "bar"}
    np.testing.assert_allclose(gen.y, _metric("moe-mismatch", "timing_s/gen").to_numpy())


def test_mfu_waterfall_goes_from_peak_to_mfu(runs):
    d = runs["longtail-8b"].analysis()
    fig = figures.mfu_waterfall(d.mfu.waterfall, d.mfu.mfu)
    (w,) = fig.data
    assert w.type == "waterfall"
    # every cause but decode + long tail, drawn only where some step's tail is unknown
    assert w.x[0] == "peak" and w.x[-1] == "MFU" and len(w.x) == len(d.mfu.waterfall) - 1 + 2
    names = ["decode throughput", "long tail", "forward (logprobs)", "training", "weight sync", "switching"]
    assert list(w.x[1:-1]) == [*names, "idle / other"]  # the reports' names, not the JSON keys
    assert w.y[0] == 100 and w.measure[-1] == "total"
    assert 100 + sum(w.y[1:-1]) == pytest.approx(100 * d.mfu.mfu, abs=1e-6)  # every lost point charged once
    assert 0.05 < d.mfu.mfu < 0.25  # DOMAIN's 8B ledger: ~13%
    assert _is_placeholder(figures.mfu_waterfall(pd.Series(dtype=float), math.nan))
    estimated = figures.mfu_waterfall(d.mfu.waterfall, d.mfu.mfu, tail_estimated=True)
    assert estimated.data[0].x[2] == "long tail (estimated)"


def test_a_cause_that_cost_nothing_reads_0_on_the_waterfall():
    lost = pd.Series({"decode": 60.0, "long_tail": 0.0, "switching": 0.04, "idle_other": 20.0})
    (w,) = figures.mfu_waterfall(lost, 0.2).data
    assert list(w.text) == ["100", "-60.0", "0", "0", "-20.0", "20.0"]


def test_compare_views_overlay_one_trace_per_run(runs):
    a, b = runs["healthy-colocated"], runs["agentic-failing-reward"]
    fig = figures.step_time_compare({a.label: a.phases["step"], b.label: b.phases["step"]})
    assert [t.name for t in fig.data] == [a.label, b.label]
    np.testing.assert_allclose(fig.data[1].y, _metric(b.label, "timing_s/step").to_numpy(), rtol=1e-5)  # see above
    d1, d2 = a.analysis(), b.analysis()
    fig = figures.mfu_compare(
        {a.label: (d1.mfu.waterfall, d1.mfu.mfu, False), b.label: (d2.mfu.waterfall, d2.mfu.mfu, True)}
    )
    assert [t.name for t in fig.data] == [a.label, f"{b.label} (long tail estimated)"]
    assert fig.layout.barmode == "group" and fig.data[0].x[1] == "long tail"
    assert fig.data[0].y[-1] == pytest.approx(100 * d1.mfu.mfu)


def _legend_beside_the_plot(fig) -> bool:
    """The legend right of the plot, clear of everything under the x axis: turned category names
    take what room automargin gives them there, which a legend under the plot (at a share of
    the plot's height, not below the tick labels) covers once several runs make it tall."""
    legend = fig.layout.legend
    return legend.x >= 1 and legend.xanchor == "left" and legend.y >= 0 and fig.layout.template.layout.xaxis.automargin


def test_mfu_causes_of_several_runs_leave_the_cause_names_readable(runs):
    analyses = {label: run.analysis() for label, run in runs.items()}
    fig = figures.mfu_compare({k: (d.mfu.waterfall, d.mfu.mfu, False) for k, d in analyses.items()})
    assert len(fig.data) == len(runs) and fig.layout.showlegend is not False
    assert {"decode throughput", "forward (logprobs)", "idle / other"} <= set(fig.data[0].x)  # whole names
    assert _legend_beside_the_plot(fig)


# -- rollout -------------------------------------------------------------------------------


def _finish(name: str, step: int) -> np.ndarray:
    traj = _table(name, "trajectories", ["finish_time", "aborted"], step=step)
    return np.sort(traj.loc[~traj["aborted"].fillna(False), "finish_time"].to_numpy(dtype=float))


def test_finish_cdf_of_one_step_marks_t90(runs):
    run = runs["agentic-failing-reward"]
    expected = _finish(run.label, 24)
    traj = run.trajectories(24)
    fig = figures.finish_cdf({run.label: traj.loc[~traj["aborted"].eq(True), "finish_time"].to_numpy()}, 24)
    (line,) = fig.data
    np.testing.assert_allclose(line.x, expected)
    assert line.y[-1] == 1.0 and line.y[0] == pytest.approx(1 / expected.size)
    t90 = expected[math.ceil(0.9 * expected.size) - 1]
    (vline,) = fig.layout.shapes
    assert vline.x0 == pytest.approx(t90)
    assert fig.layout.xaxis.title.text == "seconds since the rollout began"
    assert "step 24" in fig.layout.title.text


def test_an_old_step_is_read_from_disk_only_when_asked(tmp_path):
    path = _small_run(tmp_path / "run", steps=8)
    run = LiveRun(0, str(path), "run", window=3)
    run.refresh(force=True)
    assert sorted(run._traj.index.unique()) == [6, 7, 8]  # raw rows only for the window
    old = run.trajectories(2)
    assert len(old) == 16 and set(old["step"]) == {2}


def test_tail_share_is_the_slowest_tenth_of_rollout_time(runs):
    run = runs["healthy-colocated"]
    fig = figures.tail_shares({run.label: run.tails["tail_share"]})
    line = _trace(fig, run.label)
    for step, y in zip(line.x, line.y, strict=True):
        t = _finish(run.label, int(step))
        t90 = t[math.ceil(0.9 * t.size) - 1]
        assert y == pytest.approx((t[-1] - t90) / t[-1])
    assert fig.layout.yaxis.tickformat == ".0%"


def test_response_length_band_is_per_step_quantiles(runs):
    run = runs["healthy-colocated"]
    fig = figures.response_lengths({run.label: run.lengths})
    assert {t.name for t in fig.data} == {"p10", "median", "p90", "max"}
    traj = _table(run.label, "trajectories", ["step", "response_tokens"])
    by = traj.groupby("step")["response_tokens"]
    np.testing.assert_allclose(_trace(fig, "median").y, by.median().to_numpy())
    np.testing.assert_allclose(_trace(fig, "max").y, by.max().to_numpy())
    assert _trace(fig, "p10").fill == "tonexty"


def test_engine_load_sums_response_tokens_per_engine(runs):
    run = runs["agentic-failing-reward"]
    step = 24
    fig = figures.engine_load({run.label: run.engines[run.engines.index == step]}, step)
    (bars,) = fig.data
    traj = _table(run.label, "trajectories", ["engine", "response_tokens"], step=step)
    expected = traj.groupby("engine")["response_tokens"].sum()
    assert list(bars.x) == [f"engine-{i}" for i in range(8)]  # engine-10 would sort after engine-9
    np.testing.assert_allclose(bars.y, expected.loc[list(bars.x)].to_numpy())
    cv = expected.std(ddof=0) / expected.mean()
    assert f"CV {cv:.0%}" in fig.layout.title.text
    assert fig.layout.yaxis.title.text == "response tokens"


# -- async ---------------------------------------------------------------------------------


def test_idle_ratios_are_verls_fully_async_metrics(runs):
    run = runs["async-drift"]
    fig = figures.idle_ratios({run.label: run.idle})
    assert [t.name for t in fig.data] == ["trainer", "rollouter"]
    np.testing.assert_allclose(fig.data[0].y, _metric(run.label, "fully_async/trainer/idle_ratio").to_numpy())
    np.testing.assert_allclose(fig.data[1].y, _metric(run.label, "fully_async/rollouter/idle_ratio").to_numpy())
    healthy = runs["healthy-colocated"]
    fig = figures.idle_ratios({healthy.label: healthy.idle})
    assert _is_placeholder(fig) and "async" in fig.layout.annotations[0].text


def test_an_idle_ratio_outside_zero_to_one_is_not_plotted(tmp_path):
    # a rollouter idle ratio of 1.1 (no share of a step is 110%) at step 2 is read as not logged there
    with Recorder(tmp_path / "run", meta={"topology": "fully_async"}) as rec:
        for s, idle in enumerate([0.25, 1.1, 0.5], start=1):
            rec.log_step(s, {"timing_s/step": 100.0, "fully_async/rollouter/idle_ratio": idle})
    run = LiveRun(0, str(tmp_path / "run"), "run")
    run.refresh(force=True)
    (line,) = figures.idle_ratios({run.label: run.idle}).data
    assert line.name == "rollouter" and dict(zip(line.x, line.y, strict=True)) == {1: 0.25, 3: 0.5}


def test_engine_loads_of_several_runs_keep_each_engines_whole_name_readable(runs):
    shown = {label: run.engines[run.engines.index == run.engines.index.max()] for label, run in runs.items()}
    fig = figures.engine_load(shown, None)
    longtail = next(t for t in fig.data if t.name == "longtail-8b")
    engines = _table("longtail-8b", "trajectories", ["step", "engine"])
    last = engines[engines["step"] == engines["step"].max()]["engine"].unique()
    assert sorted(longtail.x) == sorted(last) and "engine-10" in longtail.x  # the whole name is the tick
    assert fig.layout.xaxis.title.text == "engine" and _legend_beside_the_plot(fig)


def _lags(name: str) -> pd.DataFrame:
    traj = _table(name, "trajectories", ["step", "policy_version_start", "trainer_version", "response_tokens"])
    return traj.assign(lag=traj["trainer_version"] - traj["policy_version_start"])


def test_staleness_distribution_is_the_share_of_samples_per_lag(runs):
    run = runs["async-drift"]
    fig = figures.staleness({run.label: run.lags})
    assert all(t.type == "bar" for t in fig.data) and fig.layout.barmode == "stack"
    expected = _lags(run.label).groupby("step")["lag"].value_counts(normalize=True).unstack(fill_value=0)
    for trace in fig.data:
        lag = int(trace.name.split()[0])
        np.testing.assert_allclose(trace.y, expected[lag].to_numpy())
    np.testing.assert_allclose(np.sum([t.y for t in fig.data], axis=0), 1.0)


def test_a_run_without_sample_versions_draws_verl_s_own_lag(tmp_path):
    worst = "training/off_policy/trajectory_staleness_worst/"
    with Recorder(tmp_path / "v1", meta=META) as rec:  # verl's v1 async modes: no trainer_version on samples
        for step in range(1, 5):
            rec.log_step(step, {"timing_s/step": 10.0, worst + "mean": step / 2, worst + "max": float(step)})
            rec.log_trajectories(step, [{"finish_time": 1.0, "policy_version_start": step - 1}])
    run = LiveRun(0, str(tmp_path / "v1"), "v1")
    run.refresh(force=True)
    assert run.lags.empty
    fig = figures.staleness({run.label: run.lags}, {run.label: run.verl_lags})
    mean, top = (_trace(fig, name) for name in ("mean", "max"))
    assert list(mean.x) == [1, 2, 3, 4] and list(mean.y) == [0.5, 1.0, 1.5, 2.0] and list(top.y) == [1, 2, 3, 4]
    assert "trajectory_staleness_worst" in fig.layout.title.text


def test_a_step_of_one_trajectory_draws_no_t90():
    fig = figures.finish_cdf({"run": np.array([7.0])}, 3)
    assert len(fig.data) == 1 and not fig.layout.shapes and not fig.layout.annotations
    fig = figures.finish_cdf({"run": np.array([30, 32, 34, 36, 38, 40, 42, 44, 300.0])}, 3)
    (line,) = fig.layout.shapes  # t90 read at 0.9 n between the last two: 44 + 0.1 x 256
    assert line.x0 == pytest.approx(69.6) and "the last 77% of the rollout" in fig.layout.annotations[0].text


def test_the_finish_time_axis_spans_the_finish_times_with_the_t90_text_inside():
    # t90 late in the rollout: the text runs left of its line, and the axis stays the finish
    # times' own span (a browser widened it to hold text running right: 29-3,575 s for 29-1,764 s)
    times = np.linspace(100.0, 1100.0, 101)
    fig = figures.finish_cdf({"run": times}, 3)
    (note,) = fig.layout.annotations
    assert note.x == pytest.approx(1000.0) and note.xanchor == "right"
    assert fig.layout.xaxis.range == pytest.approx((80.0, 1120.0))
    early = figures.finish_cdf({"run": np.concatenate([np.linspace(0.0, 100.0, 91), np.full(10, 1000.0)])}, 3)
    assert early.layout.annotations[0].xanchor == "left"
    assert figures.finish_cdf({"run": np.array([7.0])}, 3).layout.xaxis.range == pytest.approx((6.0, 8.0))


def test_staleness_vs_length_shows_longer_answers_are_staler(runs):
    run = runs["async-drift"]
    fig = figures.staleness_vs_length({run.label: run.lag_lengths()})
    (bars,) = fig.data
    expected = _lags(run.label).groupby("lag")["response_tokens"].mean()  # 20 steps: all inside the window
    assert list(bars.x) == expected.index.tolist()
    np.testing.assert_allclose(bars.y, expected.to_numpy())
    assert list(bars.y) == sorted(bars.y)  # drop-stale would remove the longest answers
    assert fig.layout.xaxis.title.text == "policy versions behind"


def test_staleness_vs_length_writes_sample_counts_over_the_bars_of_at_most_two_runs(runs):
    run = runs["async-drift"]
    counts = [f"n={n:,}" for n in _lags(run.label).groupby("lag").size()]  # 20 steps: all inside the window
    two = figures.staleness_vs_length(
        {run.label: run.lag_lengths(), "healthy-colocated": runs["healthy-colocated"].lag_lengths()}
    )
    assert list(two.data[0].text) == counts and two.data[0].constraintext == "none"  # at the font's size
    three = figures.staleness_vs_length({k: r.lag_lengths() for k, r in list(runs.items())[:3]})
    assert run.label in three.data[1].name
    assert len(three.data) == 3 and all(t.text is None for t in three.data)  # too small to read over thin bars
    for fig in (two, three):  # the hover says it always
        (drift,) = [t for t in fig.data if t.name == run.label]
        assert list(drift.customdata) == counts and "%{customdata}" in drift.hovertemplate


# -- mismatch ------------------------------------------------------------------------------


def test_mismatch_heatmap_is_each_steps_histogram_with_the_precision_thresholds(runs):
    run = runs["moe-mismatch"]
    fig = figures.mismatch_heatmap(run.logprob, 1e-2)
    (heat,) = fig.data
    assert heat.type == "heatmap"
    rows = _table(run.label, "logprob", ["step", "abs_counts"])
    counts = rows.groupby("step")["abs_counts"].apply(lambda s: np.sum(np.stack(s.to_numpy()), axis=0))
    z = np.asarray(heat.z, dtype=float)
    assert z.shape == (len(LOGPROB_BIN_EDGES) - 1, len(counts))
    for j, (step, c) in enumerate(counts.items()):
        assert heat.x[j] == step
        share = c / c.sum()
        np.testing.assert_allclose(z[c > 0, j], np.log10(share[c > 0]))
        assert np.isnan(z[c == 0, j]).all()
    assert heat.y[1] == pytest.approx(-7 + 0.125)  # bin [1e-7, 10^-6.75): log10 centre
    lines = {round(s.y0, 6): s.line.dash for s in fig.layout.shapes}
    assert lines == {-3.0: "dash", -2.0: "solid", 0.0: "dash"}  # fp8 run: its own level solid
    assert fig.layout.yaxis.title.text == "|Δ log p| per token"


def test_mismatch_threshold_labels_stand_on_a_background_over_the_heatmap(runs):
    fig = figures.mismatch_heatmap(runs["moe-mismatch"].logprob, 1e-2)
    labels = {a.text: a.bgcolor for a in fig.layout.annotations}
    assert set(labels) == {"bf16 normal (0.001)", "fp8 normal (0.01)", "MoE routing flip (1)"}
    for text, bgcolor in labels.items():  # the bright cells of the colour scale would show through
        assert bgcolor is not None and bgcolor not in ("rgba(0,0,0,0)", "transparent"), text


def test_mismatch_median_lies_in_the_bin_holding_half_the_tokens(runs):
    run = runs["healthy-colocated"]
    fig = figures.mismatch_quantiles({run.label: run.logprob}, 1e-3)
    p50 = _trace(fig, "p50")
    rows = _table(run.label, "logprob", ["step", "abs_counts"])
    for step, y in zip(p50.x, p50.y, strict=True):
        (c,) = rows.loc[rows["step"] == step, "abs_counts"]
        i = int(np.searchsorted(np.cumsum(c), c.sum() / 2))
        assert LOGPROB_BIN_EDGES[i] <= 10**y <= LOGPROB_BIN_EDGES[i + 1]
    assert 1e-4 < 10 ** np.median(p50.y) < 1e-2  # bf16: ~1e-3


# -- rewards -------------------------------------------------------------------------------


def _rewards(name: str) -> pd.DataFrame:
    traj = _table(name, "trajectories", ["step", "data_source", "reward", "reward_status"])
    return traj.assign(error=traj["reward_status"] != "ok")


def test_reward_by_source_is_the_mean_of_scored_rewards(runs):
    run = runs["agentic-failing-reward"]
    fig = figures.reward_by_source({run.label: run.reward_steps})
    assert {t.name for t in fig.data} == {"swe-sandbox", "terminal-hard", "tool-math"}
    traj = _rewards(run.label)
    scored = traj[~traj["error"]]
    for trace in fig.data:
        expected = scored[scored["data_source"] == trace.name].groupby("step")["reward"].mean()
        np.testing.assert_allclose(trace.y, expected.loc[list(trace.x)].to_numpy())
    assert fig.layout.yaxis.title.text == "mean reward (scored samples)"


def test_zero_share_and_error_rate_tell_a_failing_service_from_a_hard_source(runs):
    run = runs["agentic-failing-reward"]
    fig = figures.zero_vs_error({run.label: run.reward_steps})
    traj = _rewards(run.label)
    sandbox = traj[traj["data_source"] == "swe-sandbox"]
    errors = sandbox.groupby("step")["error"].mean()
    (err,) = [t for t in fig.data if t.name == "swe-sandbox" and t.yaxis == "y2"]
    np.testing.assert_allclose(err.y, errors.loc[list(err.x)].to_numpy())
    failing = {int(s) for s, y in zip(err.x, err.y, strict=True) if y > 0}
    assert failing == set(range(7, 15))
    (zeros,) = [t for t in fig.data if t.name == "terminal-hard" and t.yaxis == "y"]
    hard = traj[(traj["data_source"] == "terminal-hard") & ~traj["error"]]
    np.testing.assert_allclose(zeros.y, (hard["reward"] == 0).groupby(hard["step"]).mean().to_numpy())
    assert fig.layout.yaxis.title.text == "zero share" and fig.layout.yaxis2.title.text == "error rate"


# -- gpu -----------------------------------------------------------------------------------


def test_gpu_timeline_draws_every_run_selected(runs):
    # six runs are twelve rows of subplots: plotly refused the spacing that suits two
    picked = {f"run {i}": runs["healthy-colocated"].gpu_window(3) for i in range(6)}
    fig = figures.gpu_timeline(picked)
    assert len(fig.layout.annotations) == 12  # a title per row, two rows a run


def test_gpu_timeline_aligns_nvml_samples_with_phase_spans(runs):
    run = runs["healthy-colocated"]
    gpu, spans = run.gpu_window(3)
    fig = figures.gpu_timeline({run.label: (gpu, spans)})
    lines, bars = _traces(fig, "scatter"), _traces(fig, "bar")
    all_spans = _table(run.label, "spans", ["step", "phase", "start", "end"])
    last3 = all_spans[all_spans["step"] >= all_spans["step"].max() - 2]
    t0, t1 = last3["start"].min(), last3["end"].max()
    samples = _table(run.label, "gpu", ["time", "host", "gpu", "util_pct"])
    samples = samples[(samples["time"] >= t0) & (samples["time"] <= t1)].sort_values("time")
    assert len(lines) == samples.groupby(["host", "gpu"]).ngroups == 3
    first = samples[(samples["host"] == "node-00") & (samples["gpu"] == 0)]
    assert lines[0].name == "node-00:0 (actor_rollout)"
    np.testing.assert_allclose(lines[0].x, first["time"] - t0)
    np.testing.assert_allclose(lines[0].y, first["util_pct"])
    # each stage named by the step anatomy's phase that sums it (update_weights: weight_sync)
    phase_of = {stage: phase for phase, stages in PHASES.items() for stage in stages}
    assert {t.name for t in bars} == {phase_of.get(p, p) for p in last3["phase"]} - {"step"}
    gen = [t for t in bars if t.name == "gen"]
    rows = last3[last3["phase"] == "gen"]
    np.testing.assert_allclose(np.concatenate([t.base for t in gen]).astype(float), rows["start"] - t0)
    np.testing.assert_allclose(np.concatenate([t.x for t in gen]).astype(float), rows["end"] - rows["start"])
    assert fig.layout.xaxis2.title.text == "seconds since the window began"


# -- advice --------------------------------------------------------------------------------


def test_split_curve_and_drift_find_domains_8b_balanced_split(runs):
    run = runs["longtail-8b"]
    t = run.analysis().topology
    fig = figures.split_curve(t.splits, t.n_rollout)
    names = [tr.name for tr in fig.data]
    assert {"separated sync", "one step overlap", "async streaming"} <= set(names)
    assert "best async streaming: 42:22" in names and "best one step overlap: 46:18" in names
    curve = _trace(fig, "async streaming")
    assert list(curve.x) == list(range(1, 64))
    drift = figures.split_drift({run.label: run.splits()})
    (line,) = drift.data
    assert list(line.x) == list(range(1, 11)) and all(40 <= y <= 44 for y in line.y)
    assert drift.layout.yaxis.title.text == "rollout GPUs of the best split"


def test_the_live_drift_predicts_what_diagnose_predicts_weight_sync_included(runs):
    run = runs["moe-mismatch"]  # one-step overlap with an 8 s weight sync a step
    whole = drift.analyze(SAMPLES / "moe-mismatch").per_step
    live = run.splits()
    n, r = 32, whole["best_rollout"]  # DOMAIN: max(T_thr n/n_r + T_tail, T_t n/n_t) + T_sync
    one_step = np.maximum(whole["t_thr_s"] * n / r + whole["t_tail_s"], whole["t_train_s"] * n / (n - r))
    np.testing.assert_allclose(whole["best_step_s"], one_step + whole["t_sync_s"])
    np.testing.assert_allclose(whole["t_sync_s"], 8, rtol=1e-6)
    assert len(live) == len(whole)
    np.testing.assert_allclose(live["best_step_s"].to_numpy(float), whole["best_step_s"].to_numpy(float))


# -- helpers, placeholders, escaping -------------------------------------------------------


def test_thin_bounds_the_points_a_refresh_sends():
    frame = pd.DataFrame({"s": np.arange(5000, dtype=float)}, index=pd.Index(np.arange(1, 5001), name="step"))
    shown = figures.thin(frame)
    assert len(shown) <= figures.MAX_POINTS and shown.index[-1] == 5000
    assert shown["s"].mean() == pytest.approx(frame["s"].mean(), rel=1e-3)
    assert figures.thin(frame.head(10)) is not None and len(figures.thin(frame.head(10))) == 10
    fig = figures.step_time_compare({"long": frame["s"]})
    assert len(fig.data[0].x) <= figures.MAX_POINTS


EMPTY = pd.DataFrame()


@pytest.mark.parametrize(
    "build",
    [
        lambda: figures.step_phases(EMPTY),
        lambda: figures.step_time_compare({}),
        lambda: figures.mfu_compare({}),
        lambda: figures.finish_cdf({"r": np.array([])}, None),
        lambda: figures.tail_shares({}),
        lambda: figures.response_lengths({"r": EMPTY}),
        lambda: figures.engine_load({"r": EMPTY}, 3),
        lambda: figures.staleness({"r": EMPTY}),
        lambda: figures.staleness_vs_length({"r": EMPTY}),
        lambda: figures.mismatch_heatmap(EMPTY),
        lambda: figures.mismatch_quantiles({"r": EMPTY}),
        lambda: figures.reward_by_source({"r": EMPTY}),
        lambda: figures.zero_vs_error({"r": EMPTY}),
        lambda: figures.gpu_timeline({"r": (EMPTY, EMPTY)}),
        lambda: figures.split_curve(EMPTY),
        lambda: figures.split_drift({"r": EMPTY}),
    ],
)
def test_empty_inputs_give_a_placeholder_not_an_error(build):
    assert _is_placeholder(build())


def test_the_empty_split_drift_asks_for_either_busy_time_of_an_async_pool():
    # an async run on separate pools is modelled from verl's occupancy share or else its rollouter idle
    # ratio (topology.unmodelled): the placeholder asks for either, not for the idle ratio alone
    message = figures.split_drift({"r": EMPTY}).layout.annotations[0].text
    assert "occupancy share" in message and "rollouter idle ratio" in message


def test_strings_from_the_data_are_escaped():
    series = pd.Series([1.0, 2.0], index=[1, 2])
    fig = figures.step_time_compare({"<b>run</b>": series})
    assert fig.data[0].name == "&lt;b&gt;run&lt;/b&gt;"
    fig = figures.placeholder("<img src=x onerror=alert(1)>")
    assert fig.layout.annotations[0].text == "&lt;img src=x onerror=alert(1)&gt;"


# -- live data layer -----------------------------------------------------------------------

META = {"model": {"active_params": 1e9}, "gpu": {"type": "H100-SXM-80GB", "count": 4}, "topology": "colocated"}


def _log_step(rec: Recorder, step: int) -> None:
    rec.log_step(step, {"timing_s/gen": 10.0 + step, "timing_s/update_actor": 5.0, "timing_s/step": 16.0 + step})
    rec.log_trajectories(
        step,
        [
            {
                "finish_time": float(i + step),
                "response_tokens": 100 * (i + 1),
                "engine": f"engine-{i % 2}",
                "data_source": "math",
                "reward": float(i % 2),
                "reward_status": "ok" if i % 5 else "error",
                "reward_error": None if i % 5 else "TIMEOUT",
                "policy_version_start": step - 1 - i % 2,
                "trainer_version": step - 1,
            }
            for i in range(16)
        ],
    )
    rec.log_span(step, "gen", 100.0 * step, 100.0 * step + 10, role="rollout")
    rec.log_gpu([{"time": 100.0 * step + k, "gpu": 0, "role": "rollout", "util_pct": 90.0} for k in range(5)])
    rec.log_logprob_delta(step, np.full(100, 1e-3 * step))


def _small_run(path: Path, steps: int, meta: dict | None = META) -> Path:
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        for step in range(1, steps + 1):
            _log_step(rec, step)
            rec.flush()
    return path


AGGREGATES = (
    "phases",
    "tails",
    "lengths",
    "engines",
    "lags",
    "reward_steps",
    "reward_errors",
    "logprob",
)


def test_incremental_refreshes_match_one_full_load(tmp_path):
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=4)
    rec = Recorder(path, meta=META, flush_interval=3600)
    try:
        for step in range(1, 9):
            _log_step(rec, step)
            rec.flush()
            assert live.refresh(force=True)
            assert live.last_step == step
    finally:
        rec.close()
    fresh = LiveRun(0, str(path), "run", window=4)
    fresh.refresh(force=True)
    for name in AGGREGATES:
        pd.testing.assert_frame_equal(getattr(live, name), getattr(fresh, name), check_dtype=False, obj=name)
    assert len(live.phases) == 8 and sorted(live._traj.index.unique()) == [5, 6, 7, 8]
    pd.testing.assert_frame_equal(live.splits(), fresh.splits(), check_dtype=False)


@pytest.mark.parametrize("chunked", [False, True])
def test_a_segment_whose_data_does_not_read_leaves_the_rest_of_the_run_shown(tmp_path, monkeypatch, chunked):
    from damage import damage_column

    from rlscope.dashboards import live as live_module

    if chunked:
        monkeypatch.setattr(live_module, "_BULK_ROWS", 40)  # a chunk a step

    path = tmp_path / "run"
    with Recorder(path, meta=META) as rec:
        for step in (1, 2, 3):
            _log_step(rec, step)
            rec.flush()  # a segment per step
    damage_column(sorted((path / "trajectories").glob("*.parquet"))[0], "engine")
    live = LiveRun(0, str(path), "run", window=3)
    assert live.refresh(force=True) and live.problem is None
    assert live.last_step == 3 and sorted(live._traj.index.unique()) == [2, 3]  # step 1's rows left out
    assert len(live.phases) == 3  # its step metrics still count


def test_a_first_load_that_fails_halfway_starts_again_from_nothing(tmp_path, monkeypatch):
    from rlscope.dashboards import live as live_module

    path = _small_run(tmp_path / "run", steps=6)
    whole = LiveRun(0, str(path), "run", window=3)
    whole.refresh(force=True)
    monkeypatch.setattr(live_module, "_BULK_ROWS", 40)  # chunks of one step
    original, calls = LiveRun._absorb, []

    def absorb(self, batch):
        calls.append(1)
        if len(calls) == 3:  # a segment compacted away between the listing and this chunk
            raise FileNotFoundError("compacted meanwhile")
        return original(self, batch)

    monkeypatch.setattr(LiveRun, "_absorb", absorb)
    live = LiveRun(0, str(path), "run", window=3)
    assert not live.refresh(force=True) and "compacted meanwhile" in live.problem
    assert live.refresh(force=True) and live.problem is None
    for name in AGGREGATES:  # nothing of the failed load counted twice
        pd.testing.assert_frame_equal(getattr(live, name), getattr(whole, name), check_dtype=False, obj=name)


def test_a_segment_left_out_of_a_first_load_is_read_by_a_dashboard_started_again(tmp_path):
    from damage import damage_column

    path = tmp_path / "run"
    with Recorder(path, meta=META) as rec:
        for step in (1, 2, 3):
            _log_step(rec, step)
            rec.flush()
    segment = sorted((path / "trajectories").glob("*.parquet"))[0]
    good = segment.read_bytes()
    damage_column(segment, "engine")  # a torn copy, restored later
    live = LiveRun(0, str(path), "run", window=3)
    assert live.refresh(force=True) and sorted(live._traj.index.unique()) == [2, 3]
    segment.write_bytes(good)
    # the first view counted it as read (an earlier chunk may have taken rows of it): this view
    # keeps it left out, and one started again reads it
    live.refresh(force=True)
    assert sorted(live._traj.index.unique()) == [2, 3]
    again = LiveRun(0, str(path), "run", window=3)
    assert again.refresh(force=True) and sorted(again._traj.index.unique()) == [1, 2, 3]


def test_a_merged_segment_failing_halfway_through_a_first_load_counts_no_row_twice(tmp_path, monkeypatch):
    from damage import damage_column

    from rlscope.dashboards import live as live_module

    path = _small_run(tmp_path / "run", steps=6)
    compact_run(str(path))  # one segment of six row groups, one per step
    whole = LiveRun(0, str(path), "run", window=10)
    whole.refresh(force=True)
    (merged,) = (path / "trajectories").glob("*.parquet")
    good = merged.read_bytes()
    damage_column(merged, "engine", row_group=3)  # step 4's rows: read after steps 1-3 were folded in
    monkeypatch.setattr(live_module, "_BULK_ROWS", 40)  # a chunk a step
    live = LiveRun(0, str(path), "run", window=10)
    assert live.refresh(force=True)
    merged.write_bytes(good)
    live.refresh(force=True)
    rows, expected = live._traj.index.value_counts(), whole._traj.index.value_counts()
    assert sorted(rows.index) == [1, 2, 3] and (rows == expected[rows.index]).all()  # each once, nothing late
    assert len(live.phases) == 6  # the other tables are whole


def test_a_first_load_in_chunks_of_steps_equals_one_pass(tmp_path, monkeypatch):
    from rlscope.dashboards import live as live_module

    path = _small_run(tmp_path / "run", steps=6)
    whole = LiveRun(0, str(path), "run", window=3)
    whole.refresh(force=True)
    monkeypatch.setattr(live_module, "_BULK_ROWS", 40)  # ~24 rows per step: chunks of one step
    assert len(live_module._chunks(pd.Series([24] * 6, index=range(1, 7)))) == 6
    chunked = LiveRun(0, str(path), "run", window=3)
    chunked.refresh(force=True)
    for name in AGGREGATES:
        pd.testing.assert_frame_equal(getattr(chunked, name), getattr(whole, name), check_dtype=False, obj=name)


def test_a_refresh_reads_only_new_segments(tmp_path, monkeypatch):
    path = tmp_path / "run"
    rec = Recorder(path, meta=META, flush_interval=3600)
    try:
        for step in (1, 2, 3):
            _log_step(rec, step)
        rec.flush()
        live = LiveRun(0, str(path), "run")
        live.refresh(force=True)
        returned: list[int] = []
        reader = live._reader
        original = reader.read_new

        def spy(table, cursor, columns=None):
            out = original(table, cursor, columns)
            returned.append(out.num_rows)
            return out

        monkeypatch.setattr(reader, "read_new", spy)
        version = live.version
        assert not live.refresh(force=True) and live.version == version and sum(returned) == 0
        _log_step(rec, 4)
        rec.flush()
        assert live.refresh(force=True) and live.version == version + 1
        assert sum(returned) == 3 + 16 + 1 + 5 + 1  # step metrics, trajectories, span, NVML samples, histogram
    finally:
        rec.close()


def test_early_and_partial_runs_say_what_is_missing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    run = LiveRun(0, str(empty), "empty")
    assert not run.refresh(force=True) and "waiting for data" in run.problem
    assert run.analysis() is None and run.splits().empty
    no_meta = _small_run(tmp_path / "no-meta", steps=2, meta=None)
    (no_meta / "meta.json").unlink()
    run = LiveRun(1, str(no_meta), "no-meta")
    assert run.refresh(force=True) and run.meta_missing and run.problem is None
    assert len(run.phases) == 2 and math.isnan(run.analysis().mfu.mfu)
    shutil.copy(SAMPLES / "healthy-colocated" / "meta.json", no_meta / "meta.json")
    run.refresh(force=True)
    assert not run.meta_missing and run.facts.n_gpus == 8
    gone = LiveRun(2, str(tmp_path / "not-yet"), "not-yet")
    assert not gone.refresh(force=True) and "waiting for data" in gone.problem


def test_a_run_without_a_logprob_table_is_analysed_as_diagnose_analyses_it(tmp_path):
    path = tmp_path / "run"
    shutil.copytree(SAMPLES / "healthy-colocated", path)  # 30 steps: the window holds the whole run
    shutil.rmtree(path / "logprob")
    run = LiveRun(0, str(path), "run")
    assert run.refresh(force=True) and run.n_steps == 30
    live = run.analysis()
    whole = analyze_run(RunReader(path))
    assert [(f.id, f.severity) for f in live.findings] == [(f.id, f.severity) for f in whole.findings]
    assert live.mfu.mfu == pytest.approx(whole.mfu.mfu)


def test_a_deleted_run_directory_is_said_on_the_page_and_once_in_the_log(tmp_path, caplog):
    from rlscope.dashboards.pages import _common as common

    path = _small_run(tmp_path / "run", steps=2)
    run = LiveRun(0, str(path), "run")
    assert run.refresh(force=True) and run.problem is None
    shutil.rmtree(path)
    with caplog.at_level("WARNING", logger="rlscope"):
        for _ in range(3):  # three ticks
            assert not run.refresh(force=True)
    assert run.problem.startswith("run directory no longer exists")
    assert "run: run directory no longer exists" in str(common.notices([run]))
    assert len([r for r in caplog.records if "no longer exists" in r.getMessage()]) == 1
    assert run.n_steps == 2  # what was read stays shown
    _small_run(path, steps=3)  # a run made again in its place: read from the start
    assert run.refresh(force=True) and run.problem is None and run.n_steps == 3


def test_only_listed_runs_can_be_selected():
    live = LiveRuns([SAMPLES / "healthy-colocated", SAMPLES / "async-drift"])
    assert [r.label for r in live.resolve([1, 0, 1])] == ["async-drift", "healthy-colocated"]
    assert live.resolve(0)[0].label == "healthy-colocated"
    for bad in ("/etc/passwd", ["../async-drift"], [str(SAMPLES / "moe-mismatch")], [2], [-1], [True], [1.0], None):
        with pytest.raises(UnknownRun):
            live.resolve(bad)


# -- pages served in-process ---------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One app per process (Dash Pages' global callbacks): a sample trace, an empty run and a run without meta."""
    from rlscope.dashboards.app import create_app

    root = tmp_path_factory.mktemp("apps")
    (root / "empty").mkdir()
    no_meta = _small_run(root / "no-meta", steps=3)
    (no_meta / "meta.json").unlink()
    app = create_app([SAMPLES / "agentic-failing-reward", root / "empty", no_meta], refresh_s=0)
    client = app.server.test_client()
    deps = client.get("/_dash-dependencies").get_json()
    return client, deps


def _post(client, deps, prefix: str, runs: object):
    dep = next(d for d in deps if d["output"].startswith(prefix))
    outputs = [
        dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in dep["output"].strip(".").split("...")
    ]
    payload = {
        "output": dep["output"],
        "outputs": outputs,
        "inputs": [{**i, "value": runs if i["id"] == "app-runs" else None} for i in dep["inputs"]],
        "state": [{**s, "value": None} for s in dep["state"]],
        "changedPropIds": ["app-runs.value"],
    }
    return client.post("/_dash-update-component", json=payload)


PAGE_CALLBACKS = ["..overview-", "..rollout-", "..async-", "..mismatch-", "..rewards-", "..gpu-", "..advice-"]


@pytest.mark.parametrize("prefix", PAGE_CALLBACKS)
def test_every_page_renders_full_early_and_partial_runs(client, prefix):
    client, deps = client
    for runs in ([0], [1], [2], [0, 2], []):
        answer = _post(client, deps, prefix, runs)
        assert answer.status_code == 200, (prefix, runs)
        body = answer.get_data(as_text=True)
        assert "could not" not in body, (prefix, runs)
        json.loads(body)
    empty = _post(client, deps, prefix, [1]).get_data(as_text=True)
    assert "waiting for data" in empty


def test_every_page_s_render_and_the_status_are_driven_by_the_held_back_tick(client):
    """The page holds the tick back while a request with app-refresh among its inputs is in flight, so
    every page's render and the header's status must take it as an input (the interval itself, never)."""
    _, deps = client
    driven = [d for d in deps if {"id": "app-refresh", "property": "data"} in d["inputs"]]
    pages = {prefix.strip(".-") for prefix in PAGE_CALLBACKS}
    assert sorted(d["output"].strip(".").split("-")[0] for d in driven) == sorted([*pages, "app"])  # and the status
    ticked = [d for d in deps if {"id": "app-tick", "property": "n_intervals"} in d["inputs"]]
    (gate,) = ticked
    assert gate["output"] == "app-refresh.data" and gate["clientside_function"]


def test_pages_refuse_a_run_that_is_not_on_the_command_line(client):
    client, deps = client
    for runs in (["/etc/passwd"], "../../etc", [7], [str(SAMPLES / "moe-mismatch")]):
        assert _post(client, deps, "..overview-", runs).status_code == 204
    assert client.get("/rollout").status_code == 200 and client.get("/no-such-page").status_code in (200, 404)
    for search, expected in (("?runs=2,0", [2, 0]), ("?runs=1,9,../etc,-1", [1])):
        payload = {
            "output": "app-runs.value",
            "outputs": {"id": "app-runs", "property": "value"},
            "inputs": [{"id": "app-url", "property": "search", "value": search}],
            "changedPropIds": ["app-url.search"],
        }
        answer = client.post("/_dash-update-component", json=payload).get_json()
        assert answer["response"]["app-runs"]["value"] == expected
    payload["inputs"][0]["value"] = "?runs=/etc/passwd"
    assert client.post("/_dash-update-component", json=payload).status_code == 204


def test_the_whole_run_is_analysed_only_when_asked(client):
    client, deps = client
    dep = next(d for d in deps if d["output"].startswith("..overview-"))
    outputs = [
        dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in dep["output"].strip(".").split("...")
    ]
    values = {"app-runs": [0], "overview-full": 1}
    payload = {
        "output": dep["output"],
        "outputs": outputs,
        "inputs": [{**i, "value": values.get(i["id"])} for i in dep["inputs"]],
        "state": [{**s, "value": None} for s in dep["state"]],
        "changedPropIds": ["overview-full.n_clicks"],
    }
    assert "whole run as of step" not in _post(client, deps, "..overview-", [0]).get_data(as_text=True)
    body = client.post("/_dash-update-component", json=payload).get_data(as_text=True)
    assert "agentic-failing-reward: whole run as of step 24" in body and "reward-source-failing" in body


def test_command_line_errors_are_one_line(tmp_path, capsys):
    from rlscope.cli import main

    assert main(["dashboard", str(tmp_path / "missing")]) == 1
    assert capsys.readouterr().err.strip() == f"rlscope: {tmp_path / 'missing'}: no such run directory"
    assert main(["dashboard", str(SAMPLES / "healthy-colocated"), "--port", "70000"]) == 2
    assert "--port must be 0-65535" in capsys.readouterr().err
    assert main(["dashboard", str(SAMPLES / "healthy-colocated"), "--refresh", "-1"]) == 2
    assert main(["dashboard", str(SAMPLES / "healthy-colocated"), "--refresh", "nan"]) == 2
    assert main(["export", str(SAMPLES / "healthy-colocated"), "--min-refresh", "nan"]) == 2
    capsys.readouterr()
    with socket.create_server(("127.0.0.1", 0)) as taken:  # werkzeug would print two lines and exit
        port = taken.getsockname()[1]
        assert main(["dashboard", str(SAMPLES / "healthy-colocated"), "--port", str(port)]) == 1
    assert capsys.readouterr().err == f"rlscope: cannot listen on 127.0.0.1:{port} (Address already in use)\n"
    assert main(["dashboard", str(SAMPLES / "healthy-colocated"), "--host", "192.0.2.1"]) == 1  # not this machine's
    err = capsys.readouterr().err  # the system's words, once, without the address repeated
    assert err == "rlscope: cannot listen on 192.0.2.1:8050 (Cannot assign requested address)\n"
    with pytest.raises(SystemExit) as done:
        main(["dashboard", "--help"])
    assert done.value.code == 0 and "rlscope dashboard RUN_DIR" in capsys.readouterr().out


def test_a_broken_histogram_row_does_not_stop_the_dashboard(tmp_path):
    from rlscope.trace.schema import LOGPROB
    from rlscope.trace.store import write_segment

    path = tmp_path / "run"
    with Recorder(path, meta=META) as rec:
        for step in (1, 2):
            _log_step(rec, step)
    write_segment(
        path,
        "logprob",
        pa.Table.from_pylist([{"step": 3, "abs_counts": [1, 2, 3]}], schema=LOGPROB),
        writer_id="x",
        seq=1,
    )
    live = LiveRun(0, str(path), "run")
    assert live.refresh(force=True) and live.problem is None
    assert sorted(live.logprob.index) == [1, 2]


def test_unreadable_segments_are_named_on_the_page(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import overview

    path = _small_run(tmp_path / "run", steps=2)
    for segment in (path / "steps").glob("*.parquet"):  # both steps' timers, torn
        segment.write_bytes(segment.read_bytes()[:-12])
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    notices, _, phases, *_ = overview._render([run], False)
    lines = [n.children for n in notices]
    assert len(lines) == 2 and all(line.startswith("run: ") and "unreadable segment skipped" in line for line in lines)
    assert sorted(line.split("/steps/")[1].split(":")[0] for line in lines) == sorted(
        p.name for p in (path / "steps").glob("*.parquet")
    )
    assert _is_placeholder(phases)
    assert phases.layout.annotations[0].text == "the step metrics could not be read (see the notices above)"


def test_headline_cards_name_the_steps_they_cover(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import overview

    path = _small_run(tmp_path / "run", steps=12)
    with Recorder(path, flush_interval=3600) as rec:  # verl's val_before_train: a validation logged alone
        rec.log_step(0, {"val-core/gsm8k/reward/mean@1": 0.4, "timing_s/testing": 30.0})
    run = LiveRun(0, str(path), "run", window=8)
    run.refresh(force=True)
    cards = overview._headline(run, run.analysis()).children
    shown = {c.children[0].children: c.children[1].children for c in cards}
    # the window is the last 8 steps; the numbers are means over its last quarter, steps 11-12
    assert shown["steps"] == "12 (latest step 12)"  # steps 1-12 trained; step 0 only validated
    assert shown["step time (last 2 steps)"] == "27.5 s"  # timing_s/step 27 and 28
    assert {"generation / step (last 2 steps)", "tail share (last 2 steps)", "MFU (last 2 steps)"} <= set(shown)
    assert "findings (last 8 steps)" in shown


def test_the_topology_card_is_unknown_without_meta(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import overview

    def cards(run: LiveRun) -> dict[str, str]:
        run.refresh(force=True)
        return {
            c.children[0].children: c.children[1].children for c in overview._headline(run, run.analysis()).children
        }

    (tmp_path / "empty").mkdir()
    no_meta = _small_run(tmp_path / "no-meta", steps=2)
    (no_meta / "meta.json").unlink()
    for run in (LiveRun(0, str(tmp_path / "empty"), "empty"), LiveRun(1, str(no_meta), "no-meta")):
        shown = cards(run)
        assert shown["topology"] == shown["GPUs"] == "?", run.label
    assert (
        cards(LiveRun(2, str(SAMPLES / "separated-8b"), "separated"))["topology"] == "separated sync 46:18"
    )  # DOMAIN: 46:18
    # verl's colocate_async is named as the reports name it, on the card and on the advice page
    from rlscope.dashboards.pages import advice

    shared = _small_run(
        tmp_path / "ca", steps=4, meta={"gpu": {"type": "H100", "count": 8}, "topology": "colocate_async"}
    )
    run = LiveRun(3, str(shared), "ca")
    assert cards(run)["topology"] == "colocate async"
    t = run.analysis().topology
    assert [r[1] for r in advice._rows("ca", t) if "current" in r[1]] == [
        "colocated (current: colocate async, taking turns)"
    ]


def test_the_advice_page_says_why_a_run_has_no_what_if_and_keeps_its_advice(tmp_path, client):
    from rlscope.dashboards.pages import advice

    idle = {"fully_async/rollouter/idle_ratio": 0.6, "fully_async/trainer/idle_ratio": 0.05}
    step = {"timing_s/gen": 5.0, "timing_s/update_actor": 80.0, "timing_s/step": 100.0, **idle}
    with Recorder(tmp_path / "nosplit", meta={"gpu": {"type": "H100", "count": 8}, "topology": "async"}) as rec:
        for s in range(8):  # no split: no model; verl's idle ratios still say to move GPUs to the trainer
            rec.log_step(s, step)
    run = LiveRun(0, str(tmp_path / "nosplit"), "nosplit")
    run.refresh(force=True)
    _, table, (note, found), curve, _ = advice._render([run])
    assert table == [] and note.children == (
        "nosplit: the what-if of an async run on separate pools needs its rollout:train split, meta.json's split."
    )
    assert "async-idle-imbalanced" in str(found) and _is_placeholder(curve)


def test_the_what_if_table_says_its_split_is_each_topologys_best_as_diagnose_does(client, capsys):
    from rlscope.cli import main
    from rlscope.dashboards.pages import advice

    sample = SAMPLES / "separated-8b"  # 46:18 now; separated sync is best at another split
    run = LiveRun(0, str(sample), "sep")
    run.refresh(force=True)
    _, table, *_ = advice._render([run])
    header = [th.children for th in table.children[0].children.children]
    assert header == ["run", "topology", "best rollout:train", "predicted step s", "vs current"]
    assert main(["diagnose", str(sample)]) == 0
    printed = capsys.readouterr().out.split("Topology what-if", 1)[1].splitlines()[1].split()
    assert printed == ["topology", "best", "split", "step", "speedup"]


def test_a_better_split_of_the_current_topology_is_told_as_a_rebalancing(tmp_path, client):
    from rlscope.dashboards.pages import advice

    # async 6:2, the rollout pool busy all 100 s (idle ratio 0), training 20 s on 2 GPUs. On 8 GPUs:
    # T_thr 75, T_t 5; async is max(T_thr 8/n_r, T_t 8/n_t): 6:2 gives 100 s, 7:1 max(85.7, 40) = 85.7 s.
    # A tail share of 0.5 (9 of 10 done at 10 s, the last at 20 s) keeps colocated slower: 75 + 75 + 5
    meta = {"gpu": {"type": "H100", "count": 8}, "topology": "async", "split": "6:2"}
    step = {"timing_s/update_actor": 20.0, "timing_s/step": 100.0, "fully_async/rollouter/idle_ratio": 0.0}
    with Recorder(tmp_path / "a", meta=meta) as rec:
        for s in range(4):
            rec.log_step(s, step)
            rec.log_trajectories(s, [{"finish_time": t} for t in [10.0] * 9 + [20.0]])
    t = analyze_run(str(tmp_path / "a")).topology
    assert advice._recommendation("a", t).startswith(
        "a: async streaming at 7:1 predicts 85.7 s per step against 100 s for the current async streaming at 6:2 (1.17x)"
    )
    # a separated run whose split meta.json does not give: its own step is not modelled, and no "nanx"
    with Recorder(tmp_path / "sep", meta={"gpu": {"type": "H100", "count": 8}, "topology": "separated"}) as rec:
        for s in range(4):
            rec.log_step(s, {"timing_s/gen": 50.0, "timing_s/update_actor": 40.0, "timing_s/step": 90.0})
    said = advice._recommendation("sep", analyze_run(str(tmp_path / "sep")).topology)
    assert said.endswith("the current separated sync is not modelled without its split.") and "nan" not in said
    # one GPU: nothing to split
    curve = figures.split_curve(pd.DataFrame(), None)
    assert curve.layout.annotations[0].text == "no split to predict: one GPU cannot be split into two pools"


def test_the_rollout_page_shows_each_run_at_its_own_latest_step(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import rollout

    runs = [LiveRun(i, str(_small_run(tmp_path / name, n)), name) for i, (name, n) in enumerate((("a", 3), ("b", 5)))]
    for run in runs:
        run.refresh(force=True)
    _, cdf, _, _, engines = rollout._render(runs, rollout._steps(None, runs))
    assert [t.name for t in cdf.data] == ["a (step 3)", "b (step 5)"]
    assert {t.name for t in engines.data} == {"a (step 3)", "b (step 5)"}
    # step 5 finishes at 5..20 s, step 3 at 3..18 s: each run's own rows
    assert [min(t.x) for t in cdf.data] == [3.0, 5.0]
    assert cdf.layout.title.text == "Trajectory finish times"
    _, cdf, _, _, _ = rollout._render(runs, rollout._steps(3, runs))  # a step typed in: the same for both
    assert [t.name for t in cdf.data] == ["a", "b"] and cdf.layout.title.text.endswith("step 3")


def test_the_rollout_page_draws_no_finish_times_of_a_clock(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import rollout

    # step 1 logged time.time() + i where seconds since the rollout began go: nothing to draw of it, the
    # notices say why; step 0's 1..10 s are drawn
    now = time.time()
    with Recorder(tmp_path / "run") as rec:
        for step, origin in ((0, 0.0), (1, now)):
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/step": 20.0})
            rec.log_trajectories(step, [{"traj_id": str(i), "finish_time": origin + i + 1} for i in range(10)])
    run = LiveRun(0, str(tmp_path / "run"), "run")
    run.refresh(force=True)
    notices, cdf, *_ = rollout._render([run], [1])
    assert not cdf.data and cdf.layout.annotations[0].text == "no trajectory finish times for this step"
    assert "finish_time was logged as a clock's time" in str(notices)
    _, cdf, *_ = rollout._render([run], [0])
    assert [(min(t.x), max(t.x)) for t in cdf.data] == [(1.0, 10.0)]


def test_a_first_load_that_fails_halfway_is_retried_from_nothing(tmp_path, monkeypatch):
    path = _small_run(tmp_path / "run", 3)
    live = LiveRun(0, str(path), "run")
    fresh = LiveRun(1, str(path), "run")
    fresh.refresh(force=True)
    original = LiveRun._recompute
    calls = []

    def fail_once(self, steps):
        calls.append(steps)
        if len(calls) == 1:
            raise RuntimeError("an unexpected row")
        return original(self, steps)

    monkeypatch.setattr(LiveRun, "_recompute", fail_once)
    assert live.refresh(force=True) is False and "an unexpected row" in live.problem
    assert live.refresh(force=True)
    for name in AGGREGATES:  # nothing folded in twice
        pd.testing.assert_frame_equal(getattr(live, name), getattr(fresh, name), check_dtype=False, obj=name)


def test_a_resumed_run_validating_its_checkpoint_step_keeps_that_steps_training_live(tmp_path):
    run_dir = tmp_path / "run"
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in (1, 2, 3):
            rec.log_step(step, {"timing_s/step": 10.0 * step, "timing_s/gen": 5.0})
            rec.log_span(step, "step", 100.0 * step, 100.0 * step + 10)
    live = LiveRun(0, str(run_dir), "run", window=8)
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # resumed from step 2: validates it, then trains step 3 again
        rec.log_step(2, {"val-core/acc": 0.5}, attempt=1)
        rec.log_step(3, {"timing_s/step": 33.0, "timing_s/gen": 5.0}, attempt=1)
        rec.log_span(3, "step", 1000.0, 1010.0, attempt=1)
        rec.log_gpu([{"time": t, "gpu": 0, "util_pct": 50.0} for t in (205.0, 305.0, 500.0, 1005.0)])
    live.refresh(force=True)
    assert live._wide.loc[2, "timing_s/step"] == 20.0 and live._wide.loc[2, "val-core/acc"] == 0.5
    assert live._wide.loc[3, "timing_s/step"] == 33.0
    gpu, spans = live.gpu_window(2)  # steps 2 and 3: step 3 as retrained, not from its first attempt
    assert sorted(spans["start"]) == [200.0, 1000.0] and sorted(gpu["time"]) == [205.0, 305.0, 500.0, 1005.0]
    with Recorder(str(run_dir)) as rec:  # validation records, later: one under an earlier attempt
        rec.log_step(3, {"val-core/acc": 0.9}, attempt=1)
        rec.log_step(1, {"val-core/acc": 0.4}, attempt=0)
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # one of the crashed attempt, read later: never over the latest
        rec.log_step(3, {"val-core/acc": 0.1}, attempt=0)
    live.refresh(force=True)
    fresh = LiveRun(0, str(run_dir), "run", window=8)
    fresh.refresh(force=True)
    for view in (live, fresh):  # live as a fresh read of the whole run sees it
        assert view._wide.loc[3, "val-core/acc"] == 0.9 and view._wide.loc[3, "timing_s/step"] == 33.0
        assert view._wide.loc[1, "val-core/acc"] == 0.4 and view._wide.loc[1, "timing_s/step"] == 10.0


def test_a_resumed_runs_timed_validation_keeps_its_steps_training_live_in_any_order(tmp_path):
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=8)
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:  # step 2's segment is flushed late
        rec.log_step(1, {"timing_s/step": 10.0, "timing_s/gen": 5.0})
        rec.log_step(
            3, {"timing_s/step": 30.0, "timing_s/gen": 15.0, "timing_s/update_actor": 5.0, "val-core/acc": 0.9}
        )
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # resumed from step 2: validates it, timing it; trains step 3 again
        rec.log_step(2, {"val-core/acc": 0.5, "timing_s/testing": 4.0}, attempt=1)
        rec.log_step(3, {"timing_s/step": 33.0, "timing_s/gen": 16.0}, attempt=1)
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # the crashed process's step 2, read after the resume's validation of it
        rec.log_step(2, {"timing_s/step": 20.0, "timing_s/gen": 10.0, "timing_s/save_checkpoint": 2.0})
        rec.log_step(2, {"actor/pg_loss": 0.25})
    live.refresh(force=True)
    fresh = LiveRun(0, str(run_dir), "run", window=8)
    fresh.refresh(force=True)
    for view in (live, fresh):  # step 2: attempt 0's training and checkpoint, attempt 1's validation and its timer
        assert view._wide.loc[2].dropna().to_dict() == {
            "timing_s/step": 20.0,
            "timing_s/gen": 10.0,
            "timing_s/save_checkpoint": 2.0,
            "actor/pg_loss": 0.25,
            "val-core/acc": 0.5,
            "timing_s/testing": 4.0,
        }
        # step 3 trained again: nothing of attempt 0's is left, its validation of the training redone neither
        assert view._wide.loc[3].dropna().to_dict() == {"timing_s/step": 33.0, "timing_s/gen": 16.0}


def test_a_late_validation_record_of_a_step_past_the_window_keeps_its_aggregates(tmp_path):
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=4)
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in range(1, 9):
            _log_step(rec, step)
            rec.flush()
            live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # a resumed run validates step 2, long out of the window
        rec.log_step(2, {"val-core/acc": 0.5})
    live.refresh(force=True)
    fresh = LiveRun(0, str(run_dir), "run", window=4)
    fresh.refresh(force=True)
    assert list(live.lengths.index) == list(range(1, 9))
    pd.testing.assert_frame_equal(live.lengths, fresh.lengths)


def test_an_attempt_of_nothing_but_nans_is_no_attempt_live(tmp_path):
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=8)
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        rec.log_step(1, {"timing_s/step": 10.0, "val-core/acc": 0.25})
        rec.log_step(1, {"timing_s/step": math.nan, "val-core/acc": math.nan}, attempt=2)  # says nothing
        rec.flush()
        live.refresh(force=True)
        rec.log_step(1, {"val-core/acc": 0.75})
    live.refresh(force=True)
    assert live._wide.loc[1, "val-core/acc"] == 0.75 and live._wide.loc[1, "timing_s/step"] == 10.0
    fresh = LiveRun(0, str(run_dir), "run", window=8)
    fresh.refresh(force=True)
    assert fresh._wide.loc[1, "val-core/acc"] == 0.75


def test_live_attempts_agree_with_a_fresh_read_of_the_run(tmp_path):
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=8)
    lengths = {"response_length/mean": 100.0, "response_length/max": 200.0}
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/step": 10.0, "actor/loss": 1.0, **lengths})
        rec.flush()
        live.refresh(force=True)
        rec.log_step(1, {"timing_s/step": 11.0}, attempt=1)  # retrained: its lengths were not logged again
        rec.log_step(2, {"actor/lr": 0.5})
        rec.log_step(2, {"timing_s/gen": -1.0}, attempt=1)  # a clock's fault alone: no attempt
    live.refresh(force=True)
    fresh = LiveRun(0, str(run_dir), "run", window=8)
    fresh.refresh(force=True)
    for view in (live, fresh):
        assert list(view.lengths.index) == [2] and view._wide.loc[1, "timing_s/step"] == 11.0
        assert view._wide.loc[2, "actor/loss"] == 1.0 and view._wide.loc[2, "actor/lr"] == 0.5
    pd.testing.assert_frame_equal(live._wide, fresh._wide, check_like=True)


def test_the_generation_card_of_a_run_without_a_gen_timer_is_unknown(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import overview

    # update_actor 30 s of 140 s steps and no timing_s/gen: generation is unmeasured, not 0% of the step
    path = tmp_path / "run"
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 5):
            rec.log_step(step, {"timing_s/update_actor": 30.0, "timing_s/step": 140.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    shown = {c.children[0].children: c.children[1].children for c in overview._headline(run, run.analysis()).children}
    assert shown["step time (last step)"] == "140 s"
    assert shown["generation / step (last step)"] == "-"


def test_a_step_generated_again_shows_its_last_attempts_trajectories_and_logprob_live(tmp_path):
    # as diagnose keeps them: a resumed run's redone step is its redo's samples and histograms alone
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=8)
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/step": 10.0})
            rec.log_trajectories(step, [{"traj_id": str(i), "finish_time": 1.0 + i} for i in range(3)])
            rec.log_logprob_delta(step, [0.1, 0.2, 0.3])
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:  # resumed from step 1: step 2 generated again
        rec.log_trajectories(2, [{"traj_id": "a", "finish_time": 5.0}, {"traj_id": "b", "finish_time": 6.0}], attempt=1)
        rec.log_logprob_delta(2, [0.5], attempt=1)
        rec.log_step(2, {"timing_s/step": 12.0}, attempt=1)
    live.refresh(force=True)
    fresh = LiveRun(0, str(run_dir), "run", window=8)
    fresh.refresh(force=True)
    for view in (live, fresh):
        assert view.tails["n"].to_dict() == {1: 3, 2: 2}
        assert sorted(view.trajectories(2)["traj_id"]) == ["a", "b"]
        assert view.logprob.sum(axis=1).to_dict() == {1: 3, 2: 1}
        assert view.analysis().longtail.per_step["n"].to_dict() == {1: 3, 2: 2}
    with Recorder(str(run_dir)) as rec:
        rec.log_step(3, {"timing_s/step": 10.0})
    narrow = LiveRun(0, str(run_dir), "run", window=1)  # step 2 out of the window: its rows read when asked
    narrow.refresh(force=True)
    assert sorted(narrow.trajectories(2)["traj_id"]) == ["a", "b"]


def test_the_live_analysis_of_a_run_with_logprob_histograms_judges_the_mismatch(tmp_path):
    # the mismatch analyzer reads the histograms' attempt: the window must hold that column
    run_dir = tmp_path / "run"
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in (1, 2):
            rec.log_step(step, {"timing_s/step": 10.0})
            rec.log_logprob_delta(step, [0.1, 0.2])
    live = LiveRun(0, str(run_dir), "run", window=8)
    live.refresh(force=True)
    mismatch = live.analysis().mismatch
    assert mismatch.source == "histogram" and list(mismatch.histogram.index) == [1, 2]


def test_a_run_keeps_its_colour_in_every_chart_even_where_an_earlier_run_has_no_data():
    steps = pd.Index([1, 2, 3], name="step")
    seconds = pd.Series([10.0, 11.0, 12.0], index=steps)
    compare = figures.step_time_compare({"a": seconds, "b": 2 * seconds})
    colour = {t.name: t.line.color for t in compare.data}
    assert colour["a"] != colour["b"]
    # run "a" has no idle ratios, tail shares or staleness: "b" must still be drawn in b's colour
    idle = pd.DataFrame({"trainer": [0.1, 0.2, 0.3], "rollouter": [0.3, 0.2, 0.1]}, index=steps)
    lags = pd.DataFrame({"lag": [0, 1, 1], "n": [4, 4, 4]}, index=steps)
    lengths = pd.DataFrame({"mean_tokens": [100.0, 200.0], "n": [4, 8]}, index=pd.Index([0, 1], name="lag"))
    drawn = [  # with "a" empty, every trace drawn is b's ("c" is there only for a mean-lag chart)
        figures.idle_ratios({"a": pd.DataFrame(), "b": idle}),
        figures.tail_shares({"a": pd.Series(dtype=float), "b": pd.Series([0.2, 0.3, 0.25], index=steps)}),
        figures.staleness({"a": pd.DataFrame(), "b": lags, "c": lags}),
        figures.step_time_compare({"a": pd.Series(dtype=float), "b": seconds}),
    ]
    for fig in drawn:
        b_traces = [t for t in fig.data if t.name != "c"]
        assert b_traces and {t.line.color for t in b_traces} == {colour["b"]}, fig.layout.title.text
    bars = figures.staleness_vs_length({"a": pd.DataFrame(), "b": lengths, "c": lengths})
    assert {t.marker.color for t in bars.data if t.name == "b"} == {colour["b"]}


def test_the_gpu_window_shows_an_earlier_steps_phases_that_ran_beside_its_steps(tmp_path):
    # one-step overlap: step s generates in [100 s, 100 s + 80] and trains in [100 (s + 1) + 10, + 60],
    # beside step s + 1's generation; the last two steps (3, 4) span [300, 560], where step 2 trains
    run_dir = tmp_path / "run"
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}, "topology": "one_step_overlap"}) as rec:
        for step in (1, 2, 3, 4):
            rec.log_step(step, {"timing_s/step": 100.0, "timing_s/gen": 80.0})
            rec.log_span(step, "gen", 100.0 * step, 100.0 * step + 80, role="rollout")
            rec.log_span(step, "update_actor", 100.0 * (step + 1) + 10, 100.0 * (step + 1) + 60)
    live = LiveRun(0, str(run_dir), "run", window=8)
    live.refresh(force=True)
    _, spans = live.gpu_window(2)
    shown = sorted(zip(spans["step"], spans["phase"], spans["start"], strict=True))
    assert shown == [
        (2, "update_actor", 310.0),
        (3, "gen", 300.0),
        (3, "update_actor", 410.0),
        (4, "gen", 400.0),
        (4, "update_actor", 510.0),
    ]


def test_the_gpu_timeline_names_and_colours_a_stage_by_its_phase_as_the_overview_does():
    # verl's fully async trainer times its weight sync as param_sync: the Overview's step anatomy
    # calls it weight_sync; the GPU page's bars say the same, in the same colour
    spans = pd.DataFrame(
        {
            "step": [1, 1, 1],
            "attempt": [0, 0, 0],
            "phase": ["gen", "param_sync", "my_stage"],
            "role": ["rollout", "trainer", "trainer"],
            "host": ["h", "h", "h"],
            "start": [0.0, 10.0, 12.0],
            "end": [10.0, 12.0, 13.0],
        }
    )
    gpu = pd.DataFrame({"time": [1.0], "host": ["h"], "gpu": [0], "role": ["trainer"], "util_pct": [50.0]})
    bars = {t.name: t for t in figures.gpu_timeline({"run": (gpu, spans)}).data if t.type == "bar"}
    assert set(bars) == {"gen", "weight_sync", "my_stage"}  # an unknown stage keeps its own name
    seconds = pd.DataFrame(
        {"gen": [10.0], "weight_sync": [2.0], "other": [1.0], "step": [13.0]}, index=pd.Index([1], name="step")
    )
    overview = {t.name: t for t in figures.step_phases(seconds).data}
    assert bars["weight_sync"].marker.color == overview["weight_sync"].marker.color
    assert bars["gen"].marker.color == overview["gen"].marker.color


def test_the_live_drift_leaves_out_an_async_run_s_pipeline_fill_step(tmp_path):
    # async on separate pools 16:16 of 32 GPUs; steady steps: T_thr = (1 - 0.5) * 300 * 16/32 = 75 s and
    # T_train = 150 * 16/32 = 75 s -> 16:16. Step 1 fills the pipeline (the pool busy 0.75 * 600 s: 225 s,
    # 24:8 if it counted); it is no step of the ledger, read in one load or step by step
    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=4)
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        for step in range(1, 7):
            first = step == 1
            rec.log_step(
                step,
                {
                    "timing_s/old_log_prob": 50.0,
                    "timing_s/update_actor": 100.0,
                    "timing_s/step": 600.0 if first else 300.0,
                    "fully_async/rollouter/idle_ratio": 0.25 if first else 0.5,
                },
            )
            rec.flush()
            live.refresh(force=True)
            assert list(live.splits().index) == list(range(2, step + 1))
    whole = LiveRun(0, str(path), "run")
    whole.refresh(force=True)
    for run in (live, whole):
        assert list(run.splits().index) == [2, 3, 4, 5, 6] and set(run.splits()["best_rollout"]) == {16}


def test_a_refresh_keeps_each_step_s_highest_attempt_judging_only_its_new_rows(tmp_path, monkeypatch):
    from rlscope.dashboards import live as live_module

    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=8)

    def refresh(attempt: int, traj: dict[int, list[str]], delta: dict[int, int]) -> None:
        with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
            for step, ids in traj.items():
                rec.log_step(step, {"timing_s/step": 10.0}, attempt=attempt)
                rec.log_trajectories(
                    step, [{"traj_id": i, "finish_time": 1.0 + k} for k, i in enumerate(ids)], attempt=attempt
                )
            for step, n in delta.items():
                rec.log_logprob_delta(step, [0.1] * n, attempt=attempt)
        live.refresh(force=True)

    refresh(0, {1: ["a", "b", "c"], 2: ["d", "e"], 3: ["f"]}, {1: 3, 2: 2})
    seen: list[int] = []  # rows each per-step attempt check looks at
    real = live_module.last_attempt_rows
    monkeypatch.setattr(live_module, "last_attempt_rows", lambda s, a: seen.append(len(s)) or real(s, a))
    refresh(1, {2: ["g"]}, {2: 4})  # a higher attempt of step 2 replaces its rows
    refresh(0, {2: ["h"], 3: ["i"]}, {2: 5})  # step 2's lower attempt, late, is left out; step 3's adds
    refresh(1, {2: ["j"]}, {})  # the same attempt adds
    assert seen and max(seen) <= 2  # each refresh's new rows only, never the window's
    ids = live._traj.groupby(level="step")["traj_id"].apply(sorted).to_dict()
    assert ids == {1: ["a", "b", "c"], 2: ["g", "j"], 3: ["f", "i"]}
    assert live._logprob_rows["n_tokens"].to_dict() == {1: 3, 2: 4}
    assert live.tails["n"].to_dict() == {1: 3, 2: 2, 3: 2}
    fresh = LiveRun(0, str(run_dir), "run", window=8)  # one load judges the same
    fresh.refresh(force=True)
    assert fresh._traj.groupby(level="step")["traj_id"].apply(sorted).to_dict() == ids


def test_a_crashed_attempts_late_row_of_a_step_past_the_window_changes_nothing(tmp_path):
    # the step is read whole again: its last attempt's 3 samples, as a fresh load counts them
    run_dir = tmp_path / "run"
    live = LiveRun(0, str(run_dir), "run", window=2)
    with Recorder(str(run_dir), meta={"gpu": {"count": 8}}) as rec:
        for step in (1, 2, 3):
            rec.log_step(step, {"timing_s/step": 10.0}, attempt=1)
            rec.log_trajectories(step, [{"traj_id": str(i), "finish_time": 1.0 + i} for i in range(3)], attempt=1)
    live.refresh(force=True)
    with Recorder(str(run_dir)) as rec:
        rec.log_trajectories(1, [{"traj_id": "late", "finish_time": 2.0}], attempt=0)
    live.refresh(force=True)
    assert live.tails["n"].to_dict() == {1: 3, 2: 3, 3: 3}
    fresh = LiveRun(0, str(run_dir), "run", window=2)
    fresh.refresh(force=True)
    pd.testing.assert_frame_equal(live.tails, fresh.tails, check_dtype=False)


@pytest.mark.parametrize("late", ["validation", "trajectories", "both"])
def test_late_rows_of_a_step_past_the_window_give_what_a_fresh_load_gives(tmp_path, monkeypatch, late):
    reads: list[str] = []  # whole-table reads beside read_new: only for a step behind the window
    original = RunReader.read
    monkeypatch.setattr(
        RunReader, "read", lambda self, table, *a, **k: reads.append(table) or original(self, table, *a, **k)
    )
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=3)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 7):
            _log_step(rec, step)
            rec.flush()
            live.refresh(force=True)
        assert sorted(live._traj.index.unique()) == [4, 5, 6] and reads == []  # step 1 left the window
        if late in ("validation", "both"):  # a late validation record of step 1, timed within its 17 s step timer
            rec.log_step(1, {"val-core/acc": 0.5, "timing_s/testing": 1.0})
        if late in ("trajectories", "both"):  # a worker's late samples of step 1: 2 more, slower, longer
            rec.log_trajectories(
                1,
                [
                    {"finish_time": 40.0 + i, "response_tokens": 5000, "engine": "engine-2", "data_source": "code"}
                    for i in range(2)
                ],
            )
        rec.flush()
    assert live.refresh(force=True)
    assert sorted(reads) == ["logprob", "spans", "steps", "trajectories"]  # step 1, read again once
    fresh = LiveRun(0, str(path), "run", window=3)
    fresh.refresh(force=True)
    for name in (*AGGREGATES, "idle", "verl_lags", "_models"):
        pd.testing.assert_frame_equal(getattr(live, name), getattr(fresh, name), check_dtype=False, obj=name)
    # step 1 as the data says: 10 + 1 s of generation, 5 s of actor update, the late 1 s of validation;
    # 18 samples when the late ones count
    assert live.phases.loc[1, "gen"] == 11.0 and live.phases.loc[1, "update_actor"] == 5.0
    assert live.phases.loc[1, "validation"] == (1.0 if late != "trajectories" else 0.0)
    n = 18 if late != "validation" else 16
    assert live.engines.loc[[1], "load"].sum() == sum(100 * (i + 1) for i in range(16)) + 5000 * (n - 16)
    assert sorted(live._traj.index.unique()) == [4, 5, 6]  # its rows did not come back into the window
    pd.testing.assert_frame_equal(live.splits(), fresh.splits(), check_dtype=False)


def test_the_mfu_card_of_a_run_whose_critic_is_not_counted_says_it_is_a_lower_bound(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import overview

    # PPO, critic timed but of unknown size: gen 2N + update_actor 6N = 8 * 1e9 * 1000 / (10 s * 1e13) = 8%, at least
    step = {"timing_s/gen": 4.0, "timing_s/values": 2.0, "timing_s/update_critic": 2.0, "timing_s/update_actor": 2.0}
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e13}}
    path = tmp_path / "run"
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        rec.log_step(1, step | {"timing_s/step": 10.0, "perf/total_num_tokens": 1000.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    shown = {c.children[0].children: c.children[1].children for c in overview._headline(run, run.analysis()).children}
    assert shown["MFU (last step)"] == ">= 8.0%"
    _, _, _, waterfall, *_ = overview._render([run], False)
    assert "lower bound" in waterfall.layout.title.text and "critic" in waterfall.layout.title.text


def test_the_live_drift_leaves_out_each_resumed_job_s_pipeline_fill_step(tmp_path):
    # the crashed and twice resumed async run of test_analyzers_drift (steady steps 16:16, a fill 24:8
    # were it a step): each job's first training step fills the pipeline, step 1, step 4 redone under
    # attempt 1 after job 2 validated step 3, and step 8 under attempt 0; read record by record and whole
    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=4)
    trained: dict[int, tuple[int, str]] = {}  # step -> (attempt, kind) of its latest training
    for job in RESUMED_JOBS:
        with Recorder(path, meta=meta, flush_interval=3600) as rec:
            rec.log_job_start()
            rec.flush()
            for step, attempt, kind in job:
                rec.log_step(step, resumed_record(kind), attempt=attempt)
                rec.flush()
                if kind != "validation" and attempt >= trained.get(step, (-1, ""))[0]:
                    trained[step] = (attempt, kind)
                live.refresh(force=True)
                assert list(live.splits().index) == sorted(s for s, (_, k) in trained.items() if k == "steady")
    whole = LiveRun(0, str(path), "run")
    whole.refresh(force=True)
    # the analysis of the recent window leaves job 3's fill out too: of steps 7-10, 7, 9 and 10 (7, the
    # window's first step, is a steady one: the run's first step is the fill, not the window's); the whole
    # run in a window of 50
    for run, in_window in ((live, [7, 9, 10]), (whole, [2, 3, 5, 6, 7, 9, 10])):
        assert list(run.splits().index) == [2, 3, 5, 6, 7, 9, 10] and set(run.splits()["best_rollout"]) == {16}
        window = run.analysis()
        assert window is not None and list(window.drift.per_step.index) == in_window


def test_the_live_drift_of_an_imported_console_log_leaves_out_each_resumed_job_s_fill(tmp_path):
    # the resumed async run as its console log tells it (no times: the importer names each resumed
    # job's first training record in meta.json): steps 1, 4 and 7 fill the pipeline, as diagnose says
    from rlscope.collectors.importers import import_verl_log

    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    lines = [
        " - ".join([f"step:{step}", *(f"{k}:{v!r}" for k, v in resumed_record(kind).items())])
        for job in LOGGED_JOBS
        for step, _, kind in job
    ]
    log = tmp_path / "console.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    import_verl_log([log], tmp_path / "run", strict=True, meta=meta)
    live = LiveRun(0, str(tmp_path / "run"), "run")
    live.refresh(force=True)
    assert list(live.splits().index) == [2, 3, 5, 6, 8, 9, 10] and set(live.splits()["best_rollout"]) == {16}
    assert list(drift.analyze(str(tmp_path / "run")).per_step.index) == [2, 3, 5, 6, 8, 9, 10]


def test_a_fill_step_whose_job_start_is_read_after_it_leaves_the_live_drift(tmp_path):
    # job 2's start reaches the run directory after its first step (another writer's late flush): the
    # step's split, computed meanwhile, leaves once the start is read
    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run")
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        rec.log_job_start()
        for step, attempt, kind in RESUMED_JOBS[0]:
            rec.log_step(step, resumed_record(kind), attempt=attempt)
    resumed = time.time()
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        rec.log_step(6, resumed_record("fill"))
        rec.flush()
        live.refresh(force=True)
        assert list(live.splits().index) == [2, 3, 4, 5, 6]
        rec.log_job_start(resumed)
        rec.flush()
        live.refresh(force=True)
        assert list(live.splits().index) == [2, 3, 4, 5]


def test_a_job_start_an_import_writes_to_meta_json_later_leaves_the_live_drift(tmp_path, monkeypatch):
    # a console log followed by `rlscope import --follow`: no times, so the importer names job 2's first
    # training record (step 4, attempt 1: a fill, 24:8 were it a step) in meta.json once it reads it, after
    # the dashboard opened the run. The fills are then steps 1 and 4, as diagnose says; a refresh while
    # meta.json is unchanged does not read it
    from rlscope.dashboards import live as live_module
    from rlscope.trace.store import read_meta

    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    path = tmp_path / "run"
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        for step, attempt, kind in [*RESUMED_JOBS[0], *RESUMED_JOBS[1]]:
            rec.log_step(step, resumed_record(kind), attempt=attempt)
    settled = time.time() - 10  # written long enough ago for any filesystem clock
    os.utime(path / "meta.json", (settled, settled))
    live = LiveRun(0, str(path), "run")
    live.refresh(force=True)
    assert list(live.splits().index) == [2, 3, 4, 5, 6, 7]
    reads: list[object] = []
    monkeypatch.setattr(live_module, "read_meta", lambda where: reads.append(where) or read_meta(where))
    assert not live.refresh(force=True) and reads == []
    version = live.version
    write_meta(path, {**read_meta(path), "importer": {"name": "verl-log", "job_first_steps": [[4, 1]]}})
    assert live.refresh(force=True) and reads and live.version > version
    assert list(live.splits().index) == [2, 3, 5, 6, 7] and set(live.splits()["best_rollout"]) == {16}
    assert list(live.analysis().drift.per_step.index) == [2, 3, 5, 6, 7]
    assert list(drift.analyze(str(path)).per_step.index) == [2, 3, 5, 6, 7]


def test_a_meta_json_whose_facts_change_rebuilds_the_live_run_with_them(tmp_path):
    # meta.json said 1 GPU (no split to balance), then 32 on separate pools 16:16: the steady steps'
    # balanced split is 16:16 (resumed_record), as a dashboard opened after the change computes it
    path = tmp_path / "run"
    with Recorder(path, meta={"gpu": {"count": 1}}, flush_interval=3600) as rec:
        for step, attempt, kind in RESUMED_JOBS[0]:
            rec.log_step(step, resumed_record(kind), attempt=attempt)
    live = LiveRun(0, str(path), "run")
    live.refresh(force=True)
    assert live.splits().empty
    write_meta(path, {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}})
    live.refresh(force=True)
    assert list(live.splits().index) == [2, 3, 4, 5] and set(live.splits()["best_rollout"]) == {16}
    assert live.facts.n_gpus == 32


def test_a_meta_json_rewritten_as_no_json_keeps_the_values_read_before_and_is_said_once(tmp_path, caplog):
    path = tmp_path / "run"
    with Recorder(path, meta={"gpu": {"count": 8}}, flush_interval=3600) as rec:
        rec.log_step(1, {"timing_s/step": 10.0})
    live = LiveRun(0, str(path), "run")
    live.refresh(force=True)
    (path / "meta.json").write_text('{"gpu": {"count": 16')  # a hand edit cut short
    with caplog.at_level("WARNING", logger="rlscope"):
        for _ in range(3):
            assert not live.refresh(force=True)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and f"{path / 'meta.json'}: not valid JSON" in said[0], said
    assert said[0].endswith("keeping the meta.json read before") and live.facts.n_gpus == 8 and live.n_steps == 1
    write_meta(path, {"gpu": {"count": 16}})
    assert live.refresh(force=True) and live.facts.n_gpus == 16 and live.n_steps == 1


def test_a_step_timer_logged_as_infinity_is_no_step_live_as_in_diagnose(tmp_path):
    # step 2's timing_s/step was inf: its length is unknown, not the 20 s its stages add up to; a restart
    # that logs step 3 again with a finite timer (attempt 1) makes it a step again, as unfinite_timers does
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run")
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 5):
            timer = math.inf if step in (2, 3) else 30.0
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/update_actor": 10.0, "timing_s/step": timer})
        rec.flush()
        live.refresh(force=True)
        assert list(live.analysis().anatomy.seconds.index) == [1, 4] and list(live.phases.index) == [1, 4]
        rec.log_step(3, {"timing_s/gen": 10.0, "timing_s/update_actor": 10.0, "timing_s/step": 25.0}, attempt=1)
    live.refresh(force=True)
    assert list(live.analysis().anatomy.seconds.index) == [1, 3, 4] and live.phases.loc[3, "step"] == 25.0


def test_a_first_step_whose_step_timer_was_infinity_is_still_the_live_drift_s_fill(tmp_path):
    # the async run's first training step (1) fills the pipeline though its timing_s/step was logged as inf
    # (no step of the anatomy); step 2 is steady and stays, as diagnose keeps it (RunFrames.fills)
    meta = {"gpu": {"count": 32}, "topology": "fully_async", "split": {"rollout": 16, "train": 16}}
    path = tmp_path / "run"
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        rec.log_step(1, resumed_record("fill") | {"timing_s/step": math.inf})
        for step in range(2, 6):
            rec.log_step(step, resumed_record("steady"))
    live = LiveRun(0, str(path), "run")
    live.refresh(force=True)
    window = live.analysis()
    assert window is not None and list(window.drift.per_step.index) == [2, 3, 4, 5]
    assert list(live.splits().index) == [2, 3, 4, 5]
    assert list(analyze_run(RunReader(path)).drift.per_step.index) == [2, 3, 4, 5]


def test_the_live_timer_finiteness_is_kept_for_the_window_s_steps_only(tmp_path):
    # window of 4: of steps 1-8, 5-8 stay; step 2's inf step timer, once evicted, is read again with
    # the step's other rows when a late row of it arrives, so it is still no step
    path = tmp_path / "run"
    live = LiveRun(0, str(path), "run", window=4)
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in range(1, 9):
            timer = math.inf if step == 2 else 30.0
            rec.log_step(step, {"timing_s/gen": 10.0, "timing_s/update_actor": 10.0, "timing_s/step": timer})
            rec.flush()
            live.refresh(force=True)
        assert set(live._finiteness["step"]) == {5, 6, 7, 8}
        rec.log_step(2, {"actor/entropy": 0.5})  # a late row of step 2, past the window
    live.refresh(force=True)
    assert list(live.phases.index) == [1, 3, 4, 5, 6, 7, 8]


def test_the_page_notices_list_what_diagnose_reads_with_warnings(tmp_path, client):  # client: the app exists
    from rlscope.dashboards.pages import overview

    # a step timer logged as inf in step 2, a stage timer as NaN in step 3, an import that dropped a record
    # and a meta.json GPU count the analyzers must ignore: each is a line diagnose prints, so the page says it too
    meta = {"gpu": {"count": -4}, "importer": {"name": "verl-log", "skipped": {"duplicate_key": 1}}}
    path = tmp_path / "run"
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        for step in (1, 2, 3):
            gen = math.nan if step == 3 else 20.0
            rec.log_step(step, {"timing_s/gen": gen, "timing_s/step": math.inf if step == 2 else 30.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    lines = [n.children for n in overview._render([run], False)[0]]
    assert all(line.startswith("run: ") for line in lines)
    assert any("timing_s/step was logged as inf or NaN in step 2:" in line for line in lines)
    assert any("timing_s/gen was logged as inf or NaN in step 3:" in line for line in lines)
    assert any("the import (verl-log) left out 1 duplicate_key" in line for line in lines)
    assert any(line.startswith("run: meta.json: ") and "gpu.count" in line for line in lines)


@pytest.mark.parametrize(
    ("lengths", "shown"),
    [
        # lengths exponential around the mean: f = 1 - mean ln 10 / max = 1 - 8000 * 2.3026 / 32000 = 42%
        ({"response_length/mean": 8000.0, "response_length/max": 32000.0}, "42% (estimated)"),
        # over 10% at the cap: the slowest 10% finish together, f = 0, but only if all decode in one wave
        ({"response_length/mean": 100.0, "response_length/max": 128.0, "response_length/clip_ratio": 0.2},
         "0% (estimated)"),
        # mean ln 10 reaches the max: no estimate, only the bound (256 - 239) / (0.9 * 256) = 7.4%
        ({"response_length/mean": 239.0, "response_length/max": 256.0}, "<= 7%"),
    ],
)  # fmt: skip
def test_the_tail_share_card_says_when_it_is_an_estimate_or_a_bound(tmp_path, client, lengths, shown):  # client: app
    from rlscope.dashboards.pages import overview

    path = tmp_path / "run"
    with Recorder(path, flush_interval=3600) as rec:
        rec.log_step(1, lengths | {"timing_s/gen": 40.0, "timing_s/update_actor": 10.0, "timing_s/step": 50.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    cards = {c.children[0].children: c.children[1].children for c in overview._headline(run, run.analysis()).children}
    assert cards["tail share (last step)"] == shown


def test_the_compared_mfu_names_each_run_and_says_which_is_a_lower_bound(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import overview

    # PPO with a timed critic of unknown size (MFU >= 8%, as in the single-run card above) beside a run
    # with no model size (no MFU at all): the one bar group left must still be named, and as a bound
    step = {"timing_s/gen": 4.0, "timing_s/values": 2.0, "timing_s/update_critic": 2.0, "timing_s/update_actor": 2.0}
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e13}}
    runs = []
    for name, run_meta in (("ppo", meta), ("sizeless", {"gpu": meta["gpu"]})):
        with Recorder(tmp_path / name, meta=run_meta, flush_interval=3600) as rec:
            rec.log_step(1, step | {"timing_s/step": 10.0, "perf/total_num_tokens": 1000.0})
        runs.append(LiveRun(len(runs), str(tmp_path / name), name))
        runs[-1].refresh(force=True)
    _, _, _, compared, *_ = overview._render(runs, False)
    assert [t.name for t in compared.data] == ["ppo (MFU a lower bound: the critic is not counted)"]
    assert compared.data[0].y[-1] == pytest.approx(8.0) and compared.layout.showlegend is True


def test_a_compared_step_time_line_breaks_at_a_step_of_unknown_length(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import overview

    # step 4's timing_s/step logged as inf: its time is unknown, so the line must not bridge 3 -> 5 as if timed
    runs = []
    for name in ("gap", "whole"):
        with Recorder(tmp_path / name, flush_interval=3600) as rec:
            for step in range(1, 8):
                timer = math.inf if name == "gap" and step == 4 else 30.0 + step
                rec.log_step(step, {"timing_s/gen": 20.0, "timing_s/step": timer})
        runs.append(LiveRun(len(runs), str(tmp_path / name), name))
        runs[-1].refresh(force=True)
    _, _, compared, *_ = overview._render(runs, False)
    gap, whole = compared.data
    assert list(gap.x) == [1, 2, 3, 4, 5, 6, 7] and math.isnan(gap.y[3])
    np.testing.assert_allclose(np.delete(np.asarray(gap.y, dtype=float), 3), [31, 32, 33, 35, 36, 37])
    assert list(whole.x) == [1, 2, 3, 4, 5, 6, 7] and not np.isnan(np.asarray(whole.y, dtype=float)).any()


def test_the_tail_share_chart_draws_the_bound_where_the_estimate_is_unknown(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import rollout

    # mean ln 10 reaches the max in every step: no estimate, but at most (256 - 239) / (0.9 * 256) = 7.4%
    path = tmp_path / "run"
    with Recorder(path, flush_interval=3600) as rec:
        for step in (1, 2, 3):
            lengths = {"response_length/mean": 239.0, "response_length/max": 256.0}
            rec.log_step(step, lengths | {"timing_s/gen": 40.0, "timing_s/step": 50.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    _, _, tails, _, _ = rollout._render([run], rollout._steps(None, [run]))
    assert [t.name for t in tails.data] == ["run: at most (no estimate)"] and tails.layout.showlegend is True
    assert list(tails.data[0].x) == [1, 2, 3]
    np.testing.assert_allclose(tails.data[0].y, [17 / (0.9 * 256)] * 3)


def test_the_tail_share_chart_draws_steps_at_the_length_cap_apart(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import rollout

    # steps 1-2: 30% of responses at the 256-token cap, whose estimate 0 is the cap's, not a missing tail;
    # steps 3-4 below it at 1 - mean ln 10 / 256. The line is the trend diagnose judges: steps 3-4 only
    path = tmp_path / "run"
    with Recorder(path, flush_interval=3600) as rec:
        for step, mean, clip in ((1, 180.0, 0.3), (2, 180.0, 0.3), (3, 80.0, 0.02), (4, 50.0, 0.0)):
            lengths = {"response_length/mean": mean, "response_length/max": 256.0, "response_length/clip_ratio": clip}
            rec.log_step(step, lengths | {"timing_s/gen": 40.0, "timing_s/step": 50.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    _, _, tails, _, _ = rollout._render([run], rollout._steps(None, [run]))
    line, capped = tails.data
    assert line.name == "run" and list(line.x) == [3, 4]
    np.testing.assert_allclose(line.y, [1 - 80 * math.log(10) / 256, 1 - 50 * math.log(10) / 256])
    assert capped.name == "run: 0 at the length cap (tail cut short)" and capped.mode == "markers"
    assert list(capped.x) == [1, 2] and list(capped.y) == [0, 0] and tails.layout.showlegend is True


def test_a_waterfall_whose_long_tail_is_unknown_draws_one_bar_for_decode_and_tail():
    # every step's tail unknown: decode and the long tail NaN, one bar holding both, every point still charged
    lost = pd.Series(
        {"decode": math.nan, "long_tail": math.nan, "decode_long_tail": 45.0, "training": 35.0, "idle_other": 0.0}
    )
    (w,) = figures.mfu_waterfall(lost, 0.2, tail_estimated=True).data
    assert list(w.x) == ["peak", "decode + long tail (split unknown)", "training", "idle / other", "MFU"]
    assert 100 + sum(w.y[1:-1]) == pytest.approx(20.0)
    known = pd.Series({"decode": 25.0, "long_tail": 20.0, "decode_long_tail": 0.0, "training": 35.0, "idle_other": 0.0})
    fig = figures.mfu_compare({"a": (lost, 0.2, True), "b": (known, 0.2, True)})
    assert [t.name for t in fig.data] == ["a (long tail unknown: in decode + long tail)", "b (long tail estimated)"]


def test_compared_waterfalls_of_a_mixed_window_share_one_axis_in_the_waterfall_s_order():
    # A: every tail known (no decode + long tail bar); B: its window mixed, its known steps' tail estimated
    a = pd.Series({"decode": 25.0, "long_tail": 20.0, "decode_long_tail": 0.0, "training": 35.0, "idle_other": 0.0})
    b = pd.Series({"decode": 10.0, "long_tail": 12.5, "decode_long_tail": 22.5, "training": 35.0, "idle_other": 0.0})
    fig = figures.mfu_compare({"A": (a, 0.2, False), "B": (b, 0.2, True)})
    axis = ["decode throughput", "long tail", "decode + long tail (split unknown)", "training", "idle / other", "MFU"]
    assert [list(t.x) for t in fig.data] == [axis, axis]  # the bar A lacks is a gap in its place, not after MFU
    assert math.isnan(fig.data[0].y[2]) and list(fig.data[1].y) == [10.0, 12.5, 22.5, 35.0, 0.0, 20.0]
    assert fig.data[1].name == "B (long tail unknown in some steps: in decode + long tail, estimated in the rest)"
    (w,) = figures.mfu_waterfall(b, 0.2).data
    assert list(w.x) == ["peak", *axis[:-1], "MFU"] and 100 + sum(w.y[1:-1]) == pytest.approx(20.0)


def test_steps_whose_estimated_tail_is_unknown_show_its_bound_not_a_gap(tmp_path, client):  # client: app
    from rlscope.dashboards.pages import overview, rollout

    # steps 1-2: mean 8000 of 32000, f = 1 - 8000 ln 10 / 32000; steps 3-4 bunched (mean 30000): no estimate, at
    # most (32000 - 30000) / (0.9 x 32000) = 2000 / 28800 of each rollout
    path = tmp_path / "run"
    with Recorder(path, flush_interval=3600) as rec:
        for step in range(1, 5):
            mean = 8000.0 if step < 3 else 30000.0
            rec.log_step(step, {"timing_s/gen": 600.0, "timing_s/update_actor": 100.0, "timing_s/step": 700.0})
            rec.log_step(step, {"response_length/mean": mean, "response_length/max": 32000.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    _, _, fig, *_ = rollout._render([run], [None])  # the Rollout page's figure
    known, most = fig.data
    assert list(known.x) == [1, 2] and list(known.y) == pytest.approx([1 - 8000 * math.log(10) / 32000] * 2)
    assert list(most.x) == [3, 4] and list(most.y) == pytest.approx([2000 / 28800] * 2) and "at most" in most.name
    # the card: the recent quarter (step 4) has no estimate, so its bound, not n/a
    shown = {c.children[0].children: c.children[1].children for c in overview._headline(run, run.analysis()).children}
    assert shown["tail share (last step)"] == f"<= {2000 / 28800:.0%}"


@pytest.mark.parametrize(
    ("mean", "said"),
    [
        # mean 232 of max 256: no estimate, at most (256 - 232) / (0.9 x 256) of the 20 s rollout in a 40 s step
        (232.0, f"long tail unknown, at most {100 * 24 / 230.4 * 20 / 40:.1f} of decode + long tail's points"),
        # a mean above the max: no estimate and no bound either, so no number
        (300.0, "long tail unknown, no bound either"),
    ],
)
def test_the_waterfall_title_gives_the_unknown_tail_s_bound_or_says_there_is_none(tmp_path, client, mean, said):
    from rlscope.dashboards.pages import overview

    # 1 GPU at a toy 1e12 peak, 1000 tokens a 40 s step: gen 2e12 FLOPs, update_actor 6e12, MFU 8 / 40 = 20%
    step = {"timing_s/gen": 20.0, "timing_s/update_actor": 20.0, "timing_s/step": 40.0, "perf/total_num_tokens": 1e3}
    meta = {"model": {"active_params": 1e9}, "gpu": {"type": "H100", "count": 1, "peak_bf16_flops": 1e12}}
    path = tmp_path / "run"
    with Recorder(path, meta=meta, flush_interval=3600) as rec:
        rec.log_step(1, step | {"response_length/mean": mean, "response_length/max": 256.0})
    run = LiveRun(0, str(path), "run")
    run.refresh(force=True)
    _, _, _, waterfall, *_ = overview._render([run], False)
    assert said in waterfall.layout.title.text and "nan" not in waterfall.layout.title.text
    assert "decode + long tail (split unknown)" in waterfall.data[0].x


def test_the_page_notices_read_one_view_of_the_run_while_a_refresh_replaces_it(tmp_path, monkeypatch):
    # a refresh on another thread swaps the timer-finiteness frame for one of other steps between two reads of it;
    # the warnings must come from one of the two, not fail on a mask of one frame laid over the other
    path = tmp_path / "run"
    with Recorder(path, meta=META, flush_interval=3600) as rec:
        for step in (1, 2, 3):
            rec.log_step(step, {"timing_s/gen": 20.0, "timing_s/step": math.inf if step == 2 else 30.0})
    live = LiveRun(0, str(path), "run")
    live.refresh(force=True)
    frames = [live._finiteness, live._finiteness[live._finiteness["step"] == 3]]
    reads = iter(range(10**6))
    monkeypatch.setattr(LiveRun, "_finiteness", property(lambda self: frames[next(reads) % 2]), raising=False)
    lines = live.warnings
    assert any("timing_s/step was logged as inf or NaN in step 2" in line for line in lines)


def test_one_broken_histogram_row_is_named_in_the_singular(tmp_path, caplog):
    from rlscope.trace.schema import LOGPROB
    from rlscope.trace.store import write_segment

    with Recorder(tmp_path / "run", meta={"precision": "bf16"}) as rec:
        for step in range(3):
            rec.log_logprob_delta(step, np.full(100, 1e-3))
    row = pa.Table.from_pylist([{"step": 9, "abs_counts": [1, 2, 3]}], schema=LOGPROB)  # another writer's bins
    write_segment(str(tmp_path / "run"), "logprob", row, writer_id="other", seq=0)
    run = LiveRun(0, str(tmp_path / "run"), "run")
    with caplog.at_level("WARNING", logger="rlscope"):
        run.refresh(force=True)
    assert "run: 1 log-prob histogram row without one count per bin; left out" in caplog.text


def test_the_live_window_reader_reads_nothing_in_the_background():
    from rlscope.analyzers._data import Trajectories
    from rlscope.dashboards.live import _WindowReader

    table = pa.table({"step": [1, 1, 2], "reward": [1.0, 0.0, 1.0], "data_source": ["a", "a", "b"]})
    window = _WindowReader({}, {"trajectories": table})
    window.prefetch("trajectories", ["step", "reward"])  # a no-op: the window is in memory
    assert window.prefetched_segments("trajectories") is None
    assert Trajectories(window).numbers("reward").tolist() == [1.0, 0.0, 1.0]
