"""The simulator: determinism, DOMAIN's 8B ledger, each scenario's tables and ground truth,
faults, staleness, split drift, CLI errors, and the shipped sample traces.

Golden numbers come from /work/shared/DOMAIN.md ("8B reasoning", 64 x H100), never from the
simulator's own output; they are measured here from the written tables via RunReader.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rlscope import RunReader
from rlscope.cli import main
from rlscope.trace.schema import LOGPROB_BIN_EDGES, TABLES
from rlscope.trace.simulator import SCENARIOS, Lengths, get_scenario, simulate

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "sample_traces"

# DOMAIN.md, "Three topologies on one ledger": colocated 8B reasoning on 64 x H100
LEDGER = {"gen": 602.0, "thr": 406.0, "tail": 196.0, "forward": 72.0, "train": 136.0, "step": 810.0}
LEDGER_SPLIT = {"async": (42, 22), "one_step": (46, 18)}

VERL_KEYS = {
    "timing_s/gen",
    "timing_s/reward",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/adv",
    "timing_s/update_actor",
    "timing_s/step",
    "response_length/mean",
    "response_length/max",
    "response_length/clip_ratio",
    "perf/throughput",
    "perf/mfu/actor",
    "critic/score/mean",
    "critic/rewards/mean",
    "training/rollout_probs_diff_max",
    "training/rollout_probs_diff_mean",
    "training/rollout_probs_diff_std",
}
ASYNC_KEYS = {
    "fully_async/trainer/idle_ratio",
    "fully_async/rollouter/idle_ratio",
    "fully_async/rollouter/active_time",
    "fully_async/rollouter/version_time",
    "dynamic_resource/rollout_resource_utilization",
    "fully_async/count/stale_samples_processed",
    "timing_s/param_sync",
}
TRUTH_KEYS = {"T_thr_s", "T_tail_s", "tail_share", "forward_s", "train_s"}


def regenerate_lines() -> list[tuple[str, int, int]]:
    """(scenario, steps, seed) of each ``gen`` line in sample_traces/regenerate.sh."""
    text = (SAMPLES / "regenerate.sh").read_text()
    return [(m[1], int(m[2]), int(m[3])) for m in re.finditer(r"^gen (\S+) (\d+) (\d+)\s*$", text, re.M)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """simulate(scenario, steps, seed) into a temporary directory, once per module."""
    cache: dict[tuple[str, int, int], Path] = {}

    def get(scenario: str, steps: int, seed: int = 0) -> Path:
        key = (scenario, steps, seed)
        if key not in cache:
            out = tmp_path_factory.mktemp(scenario) / "run"
            simulate(scenario, steps, out, seed=seed)
            cache[key] = out
        return cache[key]

    return get


def pivot_steps(reader: RunReader) -> dict[str, dict[int, float]]:
    steps = reader.read("steps", ["step", "key", "value"]).to_pylist()
    out: dict[str, dict[int, float]] = {}
    for row in steps:
        out.setdefault(row["key"], {})[row["step"]] = row["value"]
    return out


def per_step_rollout(reader: RunReader) -> dict[int, tuple[float, float]]:
    """(t90, max finish) per step, by the documented convention, from the trajectories table."""
    traj = reader.read("trajectories", ["step", "finish_time"])
    step = traj.column("step").to_numpy()
    finish = traj.column("finish_time").to_numpy()
    out = {}
    for s in np.unique(step):
        f = np.sort(finish[step == s])
        out[int(s)] = (float(f[math.ceil(0.9 * f.size) - 1]), float(f[-1]))
    return out


def assert_same_table(a: pa.Table, b: pa.Table, *, exact: bool) -> None:
    assert a.schema == b.schema and a.num_rows == b.num_rows
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        if pa.types.is_floating(x.type) or pa.types.is_list(x.type):
            if pa.types.is_list(x.type):
                x, y = (
                    pa.chunked_array([c.flatten() for c in x.chunks]),
                    pa.chunked_array([c.flatten() for c in y.chunks]),
                )
            xs, ys = x.to_numpy(zero_copy_only=False), y.to_numpy(zero_copy_only=False)
            if exact:
                np.testing.assert_array_equal(xs, ys, err_msg=name)
            else:
                np.testing.assert_allclose(xs, ys, rtol=1e-9, atol=1e-9, err_msg=name)
        else:
            assert x.equals(y), name


# -- determinism ------------------------------------------------------------------------------


def test_same_seed_same_tables_other_seed_differs(tmp_path):
    for name in ("a", "b", "c"):
        simulate("healthy-colocated", 3, tmp_path / name, seed=2 if name == "c" else 1)
    a, b, c = (RunReader(tmp_path / n) for n in "abc")
    assert a.meta == b.meta
    for table in TABLES:
        assert_same_table(a.read(table), b.read(table), exact=True)
    assert a.meta["ground_truth"] != c.meta["ground_truth"]
    assert not a.read("trajectories").equals(c.read("trajectories"))


# -- DOMAIN's 8B ledger ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_8b_colocated_reproduces_domain_ledger(run, seed):
    reader = RunReader(run("longtail-8b", 10, seed))
    rollout = per_step_rollout(reader)
    metrics = pivot_steps(reader)
    steps = sorted(rollout)
    measured = {
        "gen": np.mean([rollout[s][1] for s in steps]),
        "thr": np.mean([rollout[s][0] for s in steps]),
        "tail": np.mean([rollout[s][1] - rollout[s][0] for s in steps]),
        "forward": np.mean([metrics["timing_s/old_log_prob"][s] + metrics["timing_s/ref"][s] for s in steps]),
        "train": np.mean([metrics["timing_s/update_actor"][s] for s in steps]),
        "step": np.mean([metrics["timing_s/step"][s] for s in steps]),
    }
    for key, expected in LEDGER.items():
        assert measured[key] == pytest.approx(expected, rel=0.05), (key, measured[key])
    # the ground truth states what the tables show
    mean = reader.meta["ground_truth"]["mean"]
    assert mean["T_thr_s"] == pytest.approx(measured["thr"], rel=1e-6)
    assert mean["T_tail_s"] == pytest.approx(measured["tail"], rel=1e-6)
    share = np.mean([(rollout[s][1] - rollout[s][0]) / rollout[s][1] for s in steps])
    assert mean["tail_share"] == pytest.approx(share, rel=1e-5)
    # DOMAIN: async balances at 42:22, one-step overlap at 46:18
    split = reader.meta["ground_truth"]["balanced_split"]
    for kind, (r, t) in LEDGER_SPLIT.items():
        assert split[kind]["first"] == {"rollout": r, "train": t}
        assert split[kind]["last"] == {"rollout": r, "train": t}


# -- every scenario -------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_writes_readable_tables_and_truth(run, scenario):
    steps = 3
    sc = SCENARIOS[scenario]
    reader = RunReader(run(scenario, steps))
    meta = reader.meta
    assert reader.tables() == [t for t in TABLES if t != "jobs"]  # a finished run: no job to time
    assert not reader.warnings
    assert meta["framework"] == "simulator" and meta["scenario"] == scenario and meta["seed"] == 0
    assert meta["topology"] == sc.topology
    n = meta["gpu"]["count"]
    assert meta["split"] == (
        {"rollout": n, "train": n} if sc.topology == "colocated" else {"rollout": sc.split[0], "train": sc.split[1]}
    )
    for key in ("model", "model_type", "gpu", "split", "batch_size", "group_size", "max_response_length", "precision"):
        assert key in meta, key
    truth = meta["ground_truth"]
    assert TRUTH_KEYS <= set(truth["per_step"]) and TRUTH_KEYS <= set(truth["mean"])
    assert all(len(v) == steps for v in truth["per_step"].values())
    for kind in ("async", "one_step"):
        for when in ("first", "last"):
            split = truth["balanced_split"][kind][when]
            assert split["rollout"] + split["train"] == meta["gpu"]["count"]
    assert isinstance(truth["faults"], list)

    traj = reader.read("trajectories")
    assert traj.num_rows == steps * sc.batch_size * sc.group_size
    assert len(set(traj.column("traj_id").to_pylist())) == traj.num_rows
    engines = set(traj.column("engine").to_pylist())
    assert engines <= {f"engine-{i}" for i in range(sc.n_engines)}
    assert set(traj.column("data_source").to_pylist()) <= {s.name for s in sc.sources}
    finish, submit = traj.column("finish_time").to_numpy(), traj.column("submit_time").to_numpy()
    assert (finish > submit).all() and (submit >= 0).all()
    staleness = traj.column("trainer_version").to_numpy() - traj.column("policy_version_start").to_numpy()
    assert (staleness >= 0).all()

    keys = set(reader.read("steps", ["key"]).column("key").to_pylist())
    assert VERL_KEYS <= keys
    assert (ASYNC_KEYS <= keys) == (sc.topology == "async")
    assert ("timing_s/update_weights" in keys) == (sc.topology != "async")
    times = reader.read("steps", ["step", "time"]).to_pandas().groupby("step")["time"].first()
    assert times.is_monotonic_increasing and times.iloc[0] > 1.7e9

    phases = set(reader.read("spans", ["phase"]).column("phase").to_pylist())
    assert {"gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "step"} <= phases
    gpu = reader.read("gpu", ["host", "gpu", "role", "util_pct"])
    sampled = {(g["host"], g["gpu"], g["role"]) for g in meta["gpu_sampling"]["sampled"]}
    assert set(zip(*(gpu.column(c).to_pylist() for c in ("host", "gpu", "role")), strict=True)) == sampled
    util = gpu.column("util_pct").to_numpy()
    assert util.max() > 90 and util.min() < 5  # busy phases and idle waits both appear
    logprob = reader.read("logprob")
    assert logprob.column("step").to_pylist() == [1, 2, 3]


def test_precision_and_moe_set_the_logprob_mismatch(run):
    def abs_mean(scenario: str) -> float:
        return float(np.mean(RunReader(run(scenario, 3)).read("logprob").column("abs_mean").to_numpy()))

    def over_one(scenario: str) -> int:
        table = RunReader(run(scenario, 3)).read("logprob")
        counts = np.array(table.column("abs_counts").to_pylist())
        return int(counts[:, LOGPROB_BIN_EDGES[:-1] >= 1.0].sum())

    # DOMAIN: dense bf16 ~1e-3, FP8 ~1e-2, MoE routing flips exceed 1 for single tokens
    assert 5e-4 < abs_mean("healthy-colocated") < 2e-3
    assert 5e-3 < abs_mean("moe-mismatch") < 2e-2
    assert over_one("moe-mismatch") > 0 and over_one("healthy-colocated") == 0
    keys = pivot_steps(RunReader(run("moe-mismatch", 3)))
    assert max(keys["training/rollout_probs_diff_max"].values()) > max(
        pivot_steps(RunReader(run("healthy-colocated", 3)))["training/rollout_probs_diff_max"].values()
    )


# -- rewards --------------------------------------------------------------------------------


def test_one_step_overlap_steps_follow_each_other_and_wait_for_their_batch(run):
    reader = RunReader(run("moe-mismatch", 6))
    spans = reader.read("spans").to_pandas()
    step = spans[spans.phase == "step"].set_index("step").sort_index()
    gen = spans[spans.phase == "gen"].set_index("step").sort_index()
    keys = {k: pd.Series(v).sort_index() for k, v in pivot_steps(reader).items()}
    # each step opens when the previous one ends (verl's step timer runs from one to the next)
    assert (step["start"].iloc[1:].to_numpy() == step["end"].iloc[:-1].to_numpy()).all()
    # and first waits for its batch, generated beside the step before
    waited = (gen["end"] - step["start"]).clip(lower=0)
    np.testing.assert_allclose(keys["timing_s/wait_prev_gen"].to_numpy(), waited.to_numpy(), atol=2e-3)
    # every stage of the step is inside it: the timers add up to the step, none runs past it
    inside = ["wait_prev_gen", "reward", "old_log_prob", "ref", "adv", "update_actor", "update_weights"]
    total = sum(keys[f"timing_s/{k}"] for k in inside)
    np.testing.assert_allclose(total.to_numpy(), keys["timing_s/step"].to_numpy(), rtol=0.02)


def test_failing_reward_source_has_errors_and_zero_source_has_legit_zeros(run):
    reader = RunReader(run("agentic-failing-reward", 10))
    fault = next(f for f in reader.meta["ground_truth"]["faults"] if f["kind"] == "reward_error")
    traj = reader.read(
        "trajectories", ["step", "data_source", "reward", "reward_status", "reward_error", "turns", "tool_s"]
    ).to_pandas()
    errors = traj[traj.reward_status == "error"]
    assert len(errors) == fault["errors_written"] > 0
    assert set(errors.data_source) == {fault["source"]}
    assert errors.reward.isna().all()
    assert set(errors.reward_error) == set(fault["error_codes"]) == {"TIMEOUT", "HTTP_503"}
    assert errors.step.between(*fault["steps"]).all()
    ok = traj[traj.reward_status == "ok"]
    assert ok.reward.notna().all() and ok.reward_error.isna().all()
    # a source whose rewards are mostly a legitimate 0.0, with no errors
    zero = ok.groupby("data_source").reward.apply(lambda r: float((r == 0.0).mean())).idxmax()
    assert zero != fault["source"]
    zeros = traj[traj.data_source == zero]
    assert (zeros.reward_status == "ok").all() and (zeros.reward == 0.0).mean() > 0.8
    # the trainer saw failures as 0: the score dips while the service fails, reward time grows
    metrics = pivot_steps(reader)
    inside = [s for s in range(1, 11) if fault["steps"][0] <= s <= fault["steps"][1]]
    outside = [s for s in range(1, 11) if s not in inside]
    assert min(metrics["timing_s/reward"][s] for s in inside) > 2 * max(metrics["timing_s/reward"][s] for s in outside)
    # agentic: multi-turn with environment waits
    assert traj.turns.max() > 5 and (traj.tool_s[traj.turns > 1] > 0).all()


def test_imbalanced_engine_gets_more_work(run):
    reader = RunReader(run("agentic-failing-reward", 10))
    fault = next(f for f in reader.meta["ground_truth"]["faults"] if f["kind"] == "engine_imbalance")
    traj = reader.read("trajectories", ["engine", "gen_s"]).to_pandas()
    share = (traj.engine == fault["engine"]).mean()
    assert share == pytest.approx(fault["share"], abs=1e-6) and share > 1.5 * fault["fair_share"]
    gen = traj.groupby("engine").gen_s.mean()
    assert gen.idxmax() == fault["engine"]


# -- async ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def async_drift(run):
    """The async-drift run exactly as sample_traces/regenerate.sh makes it."""
    scenario, steps, seed = next(line for line in regenerate_lines() if line[0] == "async-drift")
    return RunReader(run(scenario, steps, seed))


def _in_flight_at_syncs(reader: RunReader) -> set[int]:
    """Steps k whose closing weight sync (policy version k - 1 -> k) found a trajectory still
    generating: admitted at version k - 1 or before and finished at version k or after."""
    traj = reader.read("trajectories", ["policy_version_start", "policy_version_end"]).to_pandas()
    return {
        k
        for k in range(1, int(traj.policy_version_end.max()) + 1)
        if ((traj.policy_version_start <= k - 1) & (traj.policy_version_end >= k)).any()
    }


@pytest.mark.parametrize("answers", ["long", "short"])
def test_async_rollouter_idle_ratio_is_verl_s_time_based_one(tmp_path, async_drift, answers):
    # verl 0.9.1 (fully_async_rollouter.reset_staleness): the rollouter is active from the version's
    # start until, stopped by the staleness limit, it has drained every sample in flight; idle_ratio =
    # 1 - active_time / version_time. Its occupancy share weighs time by the slots in use, so it is at
    # most the active share (nothing decodes once drained). async-drift's long answers span every
    # sync: the pool never drains, idle 0 however empty it runs. Short answers (1,000 tokens, rollout
    # faster than training) drain it before each sync
    if answers == "long":
        reader = async_drift
    else:
        short = Lengths(mean=1000, cap=4096, sigma=0.3, group_sigma=0.1)
        scenario = dataclasses.replace(get_scenario("async-drift"), staleness_threshold=0.5, lengths=short)
        simulate(scenario, 6, tmp_path / "short")
        reader = RunReader(tmp_path / "short")
    metrics = pivot_steps(reader)
    steps = sorted(metrics["timing_s/step"])
    active, version = metrics["fully_async/rollouter/active_time"], metrics["fully_async/rollouter/version_time"]
    idle, occupancy = (
        metrics["fully_async/rollouter/idle_ratio"],
        metrics["dynamic_resource/rollout_resource_utilization"],
    )
    spanned = _in_flight_at_syncs(reader)
    for k in steps[:-2]:  # the last steps' samples in flight are never trained on, so not written
        assert version[k] == pytest.approx(metrics["timing_s/step"][k])
        assert idle[k] == pytest.approx(1 - active[k] / version[k])
        assert 0 < occupancy[k] <= active[k] / version[k] + 1e-9
        assert (idle[k] == 0) == (k in spanned), k
    if answers == "long":
        assert not any(idle.values()) and min(occupancy.values()) < 0.5
    else:
        assert all(idle[k] > 0.5 for k in steps[1:]) and not spanned & set(steps[1:-2])


def test_async_staleness_grows_with_response_length(async_drift):
    traj = async_drift.read(
        "trajectories", ["step", "response_tokens", "trainer_version", "policy_version_start"]
    ).to_pandas()
    traj["staleness"] = traj.trainer_version - traj.policy_version_start
    assert traj.staleness.max() >= 2
    # within each step (lengths also grow over the run), longer answers are staler
    centred = traj.groupby("step")[["staleness", "response_tokens"]].transform(lambda c: c - c.mean())
    assert np.corrcoef(centred.staleness, centred.response_tokens)[0, 1] > 0.05
    later = traj[traj.step > 2]
    staler = later.staleness > later.groupby("step").staleness.transform("median")
    assert later.response_tokens[staler].mean() > 1.2 * later.response_tokens[~staler].mean()


def test_async_split_drifts_toward_rollout_and_idle_ratios_agree(async_drift):
    truth = async_drift.meta["ground_truth"]
    split = truth["balanced_split"]["async"]
    assert split["last"]["rollout"] > split["first"]["rollout"]
    lengths = truth["per_step"]["response_length_mean"]
    assert lengths[-1] > 1.5 * lengths[0]
    metrics = pivot_steps(async_drift)
    steps = sorted(metrics["fully_async/trainer/idle_ratio"])[1:]  # step 1 waits for the first batch
    third = len(steps) // 3
    early, late = steps[:third], steps[-third:]

    def mean(key: str, which: list[int]) -> float:
        return float(np.mean([metrics[key][s] for s in which]))

    # early: rollout outpaces training (the pool decodes part-empty, held by the staleness limit);
    # late: training waits for rollout. verl's time-based rollouter idle ratio cannot say so here:
    # long answers span every weight sync, so the pool never drains (see the test below)
    occupancy = "dynamic_resource/rollout_resource_utilization"
    assert mean(occupancy, late) > mean(occupancy, early) + 0.2
    assert mean("fully_async/trainer/idle_ratio", late) > mean("fully_async/trainer/idle_ratio", early) + 0.05
    stale = [metrics["fully_async/count/stale_samples_processed"][s] for s in sorted(metrics["timing_s/step"])]
    assert stale == sorted(stale) and stale[-1] > 0  # a running total, as verl logs it


# -- CLI ------------------------------------------------------------------------------------


def test_cli_list(capsys):
    assert main(["simulate", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(SCENARIOS)


def test_cli_writes_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", "--scenario", "healthy-colocated", "--steps", "2", "--out", str(out), "--seed", "3"]) == 0
    assert "wrote 2 steps" in capsys.readouterr().out
    assert RunReader(out).meta["seed"] == 3
    one = tmp_path / "one"
    assert main(["simulate", "--scenario", "healthy-colocated", "--steps", "1", "--out", str(one)]) == 0
    assert "wrote 1 step of healthy-colocated" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "out_is"),
    [
        (["--scenario", "no-such-scenario", "--steps", "2"], "new"),
        (["--scenario", "healthy-colocated", "--steps", "0"], "new"),
        (["--scenario", "healthy-colocated", "--steps", "-4"], "new"),
        (["--scenario", "healthy-colocated", "--steps", "two"], "new"),
        (["--scenario", "healthy-colocated", "--steps", "2", "--seed", "-1"], "new"),
        (["--scenario", "healthy-colocated", "--steps", "2"], "file"),
        (["--scenario", "healthy-colocated", "--steps", "2"], "non-empty"),
        (["--scenario", "healthy-colocated", "--steps", "2"], "missing"),
    ],
)
def test_cli_bad_input_is_one_line_and_nonzero(tmp_path, capsys, args, out_is):
    out = tmp_path / "out"
    if out_is == "file":
        out.write_text("not a run")
    elif out_is == "non-empty":
        out.mkdir()
        (out / "something").write_text("x")
    code = main(["simulate", *args, *([] if out_is == "missing" else ["--out", str(out)])])
    err = capsys.readouterr().err
    assert code != 0
    assert len(err.strip().splitlines()) == 1 and err.startswith("rlscope: ")
    assert "Traceback" not in err
    if out_is == "new":
        assert not out.exists()  # nothing left behind
    if out_is == "non-empty":
        assert [p.name for p in out.iterdir()] == ["something"]


# -- shipped sample traces ------------------------------------------------------------------


def test_regenerate_script_covers_every_scenario_within_size():
    lines = regenerate_lines()
    assert sorted(name for name, _, _ in lines) == sorted(SCENARIOS)
    for name, steps, seed in lines:
        folder = SAMPLES / name
        meta = json.loads((folder / "meta.json").read_text())
        assert (meta["scenario"], meta["steps"], meta["seed"]) == (name, steps, seed)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        assert size < 3 * 2**20, (name, size)
    readme = (SAMPLES / "README.md").read_text()
    assert all(f"`{name}`" in readme for name in SCENARIOS)


@pytest.mark.parametrize("scenario", ["healthy-colocated", "async-drift"])
def test_shipped_sample_matches_regeneration(run, scenario):
    _, steps, seed = next(line for line in regenerate_lines() if line[0] == scenario)
    fresh, shipped = RunReader(run(scenario, steps, seed)), RunReader(SAMPLES / scenario)
    assert fresh.meta.keys() == shipped.meta.keys()
    assert fresh.meta["ground_truth"]["balanced_split"] == shipped.meta["ground_truth"]["balanced_split"]
    for key, values in fresh.meta["ground_truth"]["per_step"].items():
        np.testing.assert_allclose(values, shipped.meta["ground_truth"]["per_step"][key], rtol=1e-6, err_msg=key)
    for table in TABLES:
        assert_same_table(fresh.read(table), shipped.read(table), exact=False)


def test_docs_scenario_table_matches_the_shipped_runs():
    # docs/simulator.md's table of scenarios against each sample trace's meta.json
    doc = (REPO / "docs" / "simulator.md").read_text()
    section = doc.split("## Scenarios\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells[1:5]
    assert sorted(rows) == sorted(SCENARIOS)
    for name, (topology, gpus, model, shape) in rows.items():
        meta = json.loads((SAMPLES / name / "meta.json").read_text())
        assert topology == meta["topology"], name
        if ":" in gpus:
            assert gpus == f"{meta['split']['rollout']}:{meta['split']['train']}", name
        else:
            assert int(gpus.split()[0]) == meta["gpu"]["count"], name
        kind, size = model.split()
        assert kind.lower() == meta["model_type"], name
        if kind == "dense":
            assert float(size.rstrip("B")) * 1e9 == meta["model"]["active_params"], name
        assert shape == f"{meta['batch_size']} x {meta['group_size']}", name
        # "All use H100 SXM 80 GB (989e12 dense bf16 FLOP/s)"
        assert (meta["gpu"]["type"], meta["gpu"]["peak_flops"]) == ("H100-SXM-80GB", 989e12), name


@pytest.mark.parametrize("steps", ["0", "-4", "10001", "100000000000"])
def test_cli_names_the_steps_option_it_refuses(tmp_path, capsys, steps):
    # the error names the option to change, as --seed's does; a count of steps no run has (a typo of
    # a few zeros) is refused before anything is written, not simulated until the disk is full
    out = tmp_path / "out"
    code = main(["simulate", "--scenario", "healthy-colocated", "--steps", steps, "--out", str(out)])
    assert code == 2
    assert (
        capsys.readouterr().err == f"rlscope: simulate: --steps must be a whole number from 1 to 10,000, got {steps}\n"
    )
    assert not out.exists()
