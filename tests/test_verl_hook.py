"""The verl hook, loaded the way users load it (VERL_USE_EXTERNAL_MODULES), on verl's own code.

Four subprocesses run ``tests/verl_support/drive_verl.py`` side by side, each importing verl
once: ``main`` drives verl's Tracking, marked_timer, calculate_debug_metrics,
compute_data_metrics and agent-loop worker on tiny CPU batches; ``faults`` removes one
patch target, makes the hook's own code fail, and takes the run directory away; ``v1``
runs verl's v1 (TransferQueue) agent-loop worker after a Ray-style pickle round trip;
``onestep`` runs verl's one-step-off trainer loop over its agent-loop manager and workers. The
test compares what verl computed with what the hook wrote. Skipped where verl is not installed.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from fully_async_log import (
    HYBRID_GPUS,
    STANDALONE_GPUS,
    aggregated,
    fully_async_records,
    rollouter_window,
    update_metrics,
)

from rlscope import RunReader
from rlscope.analyzers import anatomy, gpu_idle, longtail, staleness
from rlscope.analyzers._data import RunFacts, wide_steps
from rlscope.collectors.verl import _agent_loop
from rlscope.collectors.verl import _hook as hook_state
from rlscope.collectors.verl._hook import CROSSCHECK_KEY, SOURCE, Hook
from rlscope.collectors.verl._patch import Target, install_targets
from rlscope.collectors.verl._timers import wrap_marked_timer
from rlscope.collectors.verl_config import meta_from_config

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "verl_support"
HOOK = "rlscope.collectors.verl"

# patched where the v1 trainer or the fully async trainer runs: modules the legacy trainer never imports
ASYNC_TRAINER_TARGETS = (
    "verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess",
    "verl.experimental.fully_async_policy.fully_async_trainer:FullyAsyncTrainer._collect_metrics_from_samples",
)

needs_verl = pytest.mark.skipif(importlib.util.find_spec("verl") is None, reason="verl is not installed")


def _env(run_dir: Path, modules: str) -> dict[str, str]:
    env = dict(os.environ, VERL_USE_EXTERNAL_MODULES=modules, RLSCOPE_RUN_DIR=str(run_dir))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SUPPORT), str(ROOT), os.environ.get("PYTHONPATH")]))
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Both scenarios, started together (each spends most of its time importing verl)."""
    if importlib.util.find_spec("verl") is None:
        pytest.skip("verl is not installed")
    base = tmp_path_factory.mktemp("verl")
    modules = {"main": HOOK, "faults": f"break_verl,{HOOK}", "v1": HOOK, "onestep": HOOK}
    envs = {name: _env(base / name, modules[name]) for name in modules}
    # main also starts the driver's services: NVML sampling (a stand-in pynvml) and the exporter
    envs["main"].update(RLSCOPE_GPU_INTERVAL="0.05", RLSCOPE_EXPORT_PORT=str(_free_port()))
    envs["main"]["PYTHONPATH"] = os.pathsep.join([str(SUPPORT / "fake_nvml"), envs["main"]["PYTHONPATH"]])
    procs = {
        name: (
            base / name,
            subprocess.Popen(
                [sys.executable, str(SUPPORT / "drive_verl.py"), name],
                cwd=ROOT,
                env=envs[name],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            ),
        )
        for name in modules
    }
    out = {}
    for name, (run_dir, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name} failed:\n{stderr[-4000:]}"
        line = next(ln for ln in stdout.splitlines() if ln.startswith("RESULT "))
        out[name] = {"result": json.loads(line[len("RESULT ") :]), "run_dir": run_dir, "stderr": stderr}
    return out


def _same(a: float | None, b: float) -> bool:
    return a is not None and ((math.isnan(b) and math.isnan(a)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12))


@needs_verl
def test_verl_loads_the_hook_and_every_target_of_this_version_is_patched(driven):
    patches = driven["main"]["result"]["status"]["patches"]
    # the v1 and async trainers' modules were never imported here; the v1 scenario imports them
    for key in ASYNC_TRAINER_TARGETS:
        assert patches.pop(key) == "pending"
    assert set(patches.values()) == {"patched"}, patches
    assert driven["main"]["result"]["status"]["faults"] == {}
    if "skipped" not in driven["v1"]["result"]:
        v1_patches = driven["v1"]["result"]["status"]["patches"]
        assert {key: v1_patches[key] for key in ASYNC_TRAINER_TARGETS} == dict.fromkeys(
            ASYNC_TRAINER_TARGETS, "patched"
        )


@needs_verl
def test_every_dict_passed_to_tracking_log_is_recorded_under_its_step(driven):
    main = driven["main"]
    steps = RunReader(main["run_dir"]).read("steps").to_pylist()
    got: dict[int, dict[str, float | None]] = {}
    for row in steps:
        got.setdefault(row["step"], {})[row["key"]] = row["value"]
    for step, seen in main["result"]["steps"].items():
        logged = dict(got[int(step)])
        logged.pop(CROSSCHECK_KEY)
        assert logged.keys() == seen["metrics"].keys()
        assert all(_same(logged[k], v) for k, v in seen["metrics"].items())
    assert got[4] == {"after": 1.0}


@needs_verl
def test_timer_phases_become_spans_with_start_end_and_the_trainer_step(driven):
    main = driven["main"]
    spans = RunReader(main["run_dir"]).read("spans").to_pylist()
    for step, seen in main["result"]["steps"].items():
        mine = {s["phase"]: s for s in spans if s["step"] == int(step)}
        assert mine.keys() == seen["timing_raw"].keys() == {"step", "gen", "old_log_prob", "adv"}
        for phase, seconds in seen["timing_raw"].items():
            span = mine[phase]
            assert -1e-3 < (span["end"] - span["start"]) - seconds < 0.25  # verl's own timer runs inside ours
        assert mine["step"]["start"] <= mine["gen"]["start"] < mine["gen"]["end"] <= mine["step"]["end"]
        assert mine["gen"]["role"] == "rollout" and mine["adv"]["role"] == "trainer"
    assert {s["step"] for s in spans} == {1, 2}
    # A block that raises: verl's behaviour kept (the error goes through, nothing timed), no span.
    assert "raised inside the timed block" in main["result"]["timer_exception"]
    assert main["result"]["broken_timed"] is False


@needs_verl
def test_logprob_deltas_are_taken_on_the_tokens_verl_uses(driven):
    main = driven["main"]
    reader = RunReader(main["run_dir"])
    rows = {r["step"]: r for r in reader.read("logprob").to_pylist()}
    steps = {(r["step"], r["key"]): r["value"] for r in reader.read("steps").to_pylist()}
    assert rows.keys() == {1, 2}
    for step, seen in main["result"]["steps"].items():
        row = rows[int(step)]
        assert row["source"] == SOURCE
        assert row["n_tokens"] == seen["n_tokens"]  # tool and padding tokens (delta 50) are left out
        assert row["abs_max"] == pytest.approx(seen["delta_abs_max"], rel=1e-6)
        assert row["mean"] == pytest.approx(seen["delta_mean"], rel=1e-5)
        # verl's diff is |exp(old) - exp(rollout)|; ours over the same tokens must agree with it.
        verl_max = seen["metrics"]["training/rollout_probs_diff_max"]
        assert steps[(int(step), CROSSCHECK_KEY)] == pytest.approx(verl_max, rel=1e-6)


@needs_verl
def test_each_agent_loop_sample_is_one_trajectory_row_that_verl_reduces(driven):
    main = driven["main"]
    result = main["result"]
    cases = result["cases"]
    rows = RunReader(main["run_dir"]).read("trajectories").to_pylist()
    assert {r["step"] for r in rows} == {1, 2}  # step 3 was validation
    for step, seen in result["steps"].items():
        mine = sorted((r for r in rows if r["step"] == int(step)), key=lambda r: int(r["traj_id"].split("_")[1]))
        assert [r["traj_id"] for r in mine] == [f"{c['uid']}_{i}" for i, c in enumerate(cases)]
        for row, case in zip(mine, cases, strict=True):
            assert row["data_source"] == case["source"]
            assert (row["prompt_tokens"], row["response_tokens"]) == (case["prompt"], case["response"])
            assert (row["gen_s"], row["tool_s"], row["preemptions"]) == (case["gen"], case["tool"], case["pre"])
            assert row["turns"] == (4 if case["tool_tokens"] else 2)
            assert row["reward"] == pytest.approx(case["response"] / 10) and row["reward_status"] == "ok"
            assert 0 <= row["submit_time"] < row["finish_time"]
            assert row["trainer_version"] == int(step) - 1  # the legacy trainer updates from version s - 1
        assert mine[0]["group"] == mine[1]["group"] != mine[2]["group"] == mine[3]["group"]
        metrics = seen["metrics"]
        gen = [r["gen_s"] for r in mine]
        assert max(gen) == metrics["agent_loop/generate_sequences/max"]
        assert sum(gen) / len(gen) == pytest.approx(metrics["agent_loop/generate_sequences/mean"])
        assert max(r["tool_s"] for r in mine) == metrics["agent_loop/tool_calls/max"]
        assert sum(r["preemptions"] for r in mine) / 4 == metrics["agent_loop/num_preempted/mean"]
        assert max(r["response_tokens"] for r in mine) == metrics["response_length/max"]
        assert sum(r["prompt_tokens"] for r in mine) / 4 == metrics["prompt_length/mean"]
        assert sum(r["turns"] for r in mine) / 4 == metrics["num_turns/mean"]
        assert sum(r["reward"] for r in mine) / 4 == pytest.approx(metrics["critic/score/mean"], rel=1e-6)


@needs_verl
def test_v1_worker_shipped_by_ray_records_its_samples_under_their_global_step(driven):
    v1 = driven["v1"]
    if "skipped" in v1["result"]:
        pytest.skip(v1["result"]["skipped"])
    status = v1["result"]["status"]
    assert status["patches"]["verl.trainer.ppo.v1.agent_loop_tq:AgentLoopWorkerTQ._agent_loop_postprocess"] == "patched"
    assert status["faults"] == {}
    rows = RunReader(v1["run_dir"]).read("trajectories").to_pylist()
    cases = v1["result"]["cases"]
    assert len(rows) == len(cases)  # the validation sample is not recorded
    by_id = {r["traj_id"]: r for r in rows}
    for i, case in enumerate(cases):
        row = by_id[f"{case['uid']}_{i % 2}"]  # verl's own key: uid, session
        assert row["step"] == 7
        assert (row["response_tokens"], row["gen_s"], row["preemptions"]) == (
            case["response"],
            case["gen"],
            case["pre"],
        )
        assert row["reward"] == pytest.approx(case["response"] / 10)


@needs_verl
def test_the_driver_samples_its_gpus_and_serves_metrics_in_process(driven):
    main = driven["main"]
    services = main["result"]["status"]["services"]
    assert services["gpu_sampler"]["samples"] > 0 and services["gpu_sampler"]["errors"] == 0
    gpu = RunReader(str(main["run_dir"])).read("gpu", ["gpu", "util_pct", "power_w"]).to_pylist()
    assert {(r["gpu"], r["util_pct"], r["power_w"]) for r in gpu} == {(0, 37.0, 300.0), (1, 81.0, 300.0)}
    text = main["result"]["metrics_text"]
    (last,) = [ln for ln in text.splitlines() if ln.startswith("rlscope_last_step{")]
    assert float(last.rsplit(" ", 1)[1]) == 4  # the last step the trainer logged
    assert services["exporter"].startswith("http://127.0.0.1:")


@needs_verl
def test_the_driver_logs_one_job_start_per_tracking_and_a_worker_none(driven):
    # main: one Tracking; its job started when the process did (it imported verl), before the Tracking
    reader = RunReader(str(driven["main"]["run_dir"]))
    (job,) = reader.read("jobs").to_pylist()
    steps = reader.read("steps", ["step", "time"]).to_pylist()
    assert job["time"] < driven["main"]["result"]["before_tracking"] < min(r["time"] for r in steps)
    assert job["pid"] > 0 and job["host"]
    # onestep: fit twice in one process (a run, then its resume): one start each, the second
    # between the first run's last step and the resumed run's first
    reader = RunReader(str(driven["onestep"]["run_dir"]))
    first, second = sorted(reader.read("jobs", ["time"]).column("time").to_pylist())
    steps = reader.read("steps", ["step", "time"]).to_pylist()
    before = [r["time"] for r in steps if r["step"] <= 3]
    after = [r["time"] for r in steps if r["step"] > 3]
    assert first < min(before) and max(before) < second < min(after)
    # v1: a worker process (it sets up no Tracking) records no job
    if "skipped" not in driven["v1"]["result"]:
        assert "jobs" not in RunReader(str(driven["v1"]["run_dir"])).tables()


@needs_verl
def test_meta_says_verl_and_what_the_config_states(driven):
    meta = json.loads((driven["main"]["run_dir"] / "meta.json").read_text())
    assert meta["framework"] == "verl" and meta["framework_version"] == driven["main"]["result"]["verl_version"]
    assert (meta["batch_size"], meta["group_size"], meta["max_response_length"]) == (2, 2, 10)
    assert meta["gpu"] == {"count": 8} and meta["model"] == {"name": "Qwen/Qwen2.5-0.5B"}
    assert "topology" not in meta  # not stated by the config: left absent


def _v1_config(*overrides: str) -> dict[str, Any]:
    """verl's own ppo_trainer config with ``overrides``, resolved as the v1 trainer hands it to Tracking."""
    import verl
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


@needs_verl
def test_meta_counts_the_v1_async_trainers_gpus_and_topology():
    # trainer_separate_async.py: the standalone rollout pool is actor_rollout_ref.rollout.nnodes x
    # n_gpus_per_node (the latter defaults to the trainer's), beside the trainer's 1 x 4 GPUs
    pools = ["trainer.nnodes=1", "trainer.n_gpus_per_node=4", "actor_rollout_ref.rollout.nnodes=2"]
    meta = meta_from_config(_v1_config("trainer.v1.trainer_mode=separate_async", *pools))
    assert (meta["gpu"], meta["split"]) == ({"count": 12}, {"rollout": 8, "train": 4})
    facts = RunFacts.from_meta(meta)
    assert facts.kind == "async_streaming" and facts.is_pooled
    # trainer_colocate_async.py: generation and training take turns on the trainer's 4 GPUs
    meta = meta_from_config(_v1_config("trainer.v1.trainer_mode=colocate_async", *pools))
    assert (meta["gpu"], meta["split"]) == ({"count": 4}, {"rollout": 4, "train": 4})
    facts = RunFacts.from_meta(meta)
    # ...and its gen timer holds the generation, inside the step: not overlapped
    assert facts.kind == "async_streaming" and facts.shares_gpus and not facts.overlapped and not facts.is_pooled
    meta = meta_from_config(_v1_config("trainer.v1.trainer_mode=sync", *pools))  # colocated, as verl defaults
    assert meta["gpu"] == {"count": 4} and "topology" not in meta and "split" not in meta


@needs_verl
def test_a_timer_named_after_its_metric_is_weight_sync_in_steps_and_spans(tmp_path):
    # fully_async_trainer.py times ``marked_timer("timing_s/param_sync", timing_raw)`` and
    # compute_timing_metrics logs every timer as f"timing_s/{name}"
    from verl.utils.profiler import marked_timer

    run = tmp_path / "run"
    hook = Hook(str(run))
    timer = wrap_marked_timer(hook, marked_timer)
    timing: dict[str, float] = {}
    with timer("step", timing):
        with timer("timing_s/param_sync", timing):
            time.sleep(0.05)
    hook.on_log(1, {f"timing_s/{name}": seconds for name, seconds in timing.items()})
    hook.flush()
    seconds = anatomy.analyze(str(run)).seconds.loc[1]
    assert seconds["weight_sync"] == timing["timing_s/param_sync"]
    assert seconds["other"] == pytest.approx(timing["step"] - timing["timing_s/param_sync"])
    assert sorted(s["phase"] for s in RunReader(str(run)).read("spans").to_pylist()) == ["param_sync", "step"]


def test_a_sample_without_a_training_step_is_a_counted_fault(tmp_path, caplog):
    # a batch with no meta_info["global_steps"] outside verl's async trainers (a script driving
    # the agent loop itself): verl's agent loop passes -1 as the sample's step
    hook = Hook(str(tmp_path / "run"))
    with caplog.at_level("WARNING", logger="rlscope"):
        for _ in range(3):  # one _run_agent_loop per sample
            token = _agent_loop._enter_sample(hook, (0, {"step": -1, "validate": False}), {})
            _agent_loop._after_postprocess(hook, None, (), {"output": {"response_ids": [1, 2]}, "validate": False})
            _agent_loop._leave_sample(token)
    status = hook.status()
    assert status["faults"] == {"trajectories": 3} and status["recorder"] is None  # nothing written
    assert caplog.text.count("carries no training step") == 1


def test_the_fully_async_rollouters_agent_loop_writes_nothing_and_counts_no_fault(tmp_path):
    # fully_async_rollouter.py feeds prepare_single_generation_data's batches (no global_steps: -1);
    # the trainer writes these samples' rows when it takes them (one row per sample)
    hook = Hook(str(tmp_path / "run"))
    config = {"async_training": {"trigger_parameter_sync_step": 1}, "rollout": {"nnodes": 1}}
    worker = type("Worker", (), {"config": config})()
    token = _agent_loop._enter_sample(hook, (0, {"step": -1, "validate": False}), {})
    _agent_loop._after_postprocess(hook, worker, (), {"output": {"response_ids": [1, 2]}, "validate": False})
    _agent_loop._leave_sample(token)
    assert hook.status()["faults"] == {} and hook.status()["recorder"] is None


def _one_step_off_batch(hook: Hook, worker: Any, tag: int, validate: bool = False) -> None:
    """One batch through a one-step-off worker as verl runs it: generate_sequences around its
    samples' _run_agent_loop, each ending in _agent_loop_postprocess (two samples here)."""
    from types import SimpleNamespace

    batch = _agent_loop._enter_batch(
        hook, worker, (SimpleNamespace(meta_info={"global_steps": tag, "validate": validate}),), {}
    )
    for i in range(2):
        token = _agent_loop._enter_sample(hook, (0, {"step": tag, "validate": validate}), {})
        output = {"response_ids": [1] * (tag + i), "extra_fields": {"min_global_steps": 2, "max_global_steps": 2}}
        _agent_loop._after_postprocess(hook, worker, (), {"output": output, "validate": validate, "uid": f"t{tag}"})
        _agent_loop._leave_sample(token)
    _agent_loop._leave_batch(batch)


def test_the_one_step_off_worker_files_its_first_batch_under_its_tag_and_later_ones_one_step_on(tmp_path):
    # one_step_off_policy/ray_trainer.py: a worker's training batches carry the tags k, k, k + 1, ...
    # (fit starts the first at :317, _fit_generate the next at :403 before global_steps advances),
    # trained by steps k, k + 1, k + 2; validation batches (meta_info validate) come in between
    run = tmp_path / "run"
    hook = Hook(str(run))
    worker = type("Worker", (), {"config": {"rollout": {"nnodes": 1}}})()
    for tag, validate in [(4, False), (4, True), (4, False), (5, False)]:
        _one_step_off_batch(hook, worker, tag, validate)
    hook.flush()
    rows = RunReader(str(run)).read("trajectories", ["step", "group", "trainer_version", "response_tokens"])
    got = sorted((r["step"], r["group"], r["response_tokens"], r["trainer_version"]) for r in rows.to_pylist())
    # tokens tag + i; the two tag-4 batches apart; no trainer_version (its weights are labelled one ahead)
    g4, g5 = _agent_loop.group_of("t4"), _agent_loop.group_of("t5")
    assert got == [
        (4, g4, 4, None),
        (4, g4, 5, None),
        (5, g4, 4, None),
        (5, g4, 5, None),
        (6, g5, 5, None),
        (6, g5, 6, None),
    ]
    assert hook.faults == {}


def test_a_one_step_off_sample_outside_a_batch_the_hook_saw_is_a_counted_fault(tmp_path, caplog):
    # a worker subclass whose generate_sequences does not call verl's: the sample's tag is not its
    # step, and which step trains it is unknown
    hook = Hook(str(tmp_path / "run"))
    worker = type("Worker", (), {"config": {"rollout": {"nnodes": 1}}})()
    with caplog.at_level("WARNING", logger="rlscope"):
        token = _agent_loop._enter_sample(hook, (0, {"step": 3, "validate": False}), {})
        _agent_loop._after_postprocess(hook, worker, (), {"output": {"response_ids": [1, 2]}, "validate": False})
        _agent_loop._leave_sample(token)
    assert hook.status()["faults"] == {"trajectories": 1} and hook.status()["recorder"] is None
    assert "did not come through AgentLoopWorker.generate_sequences" in caplog.text


@needs_verl
def test_the_one_step_off_trainer_files_each_batch_under_the_step_that_trains_it(driven):
    result = driven["onestep"]["result"]
    # verl's fit starts step 1's generation with global_steps 1 (ray_trainer.py:302, :317); each
    # _fit_generate starts the next step's (:403) before _fit_postprocess_step advances global_steps,
    # so the batches of steps 1, 2, 3 carry 1, 1, 2, and those of a run resumed after step 3, 4 and 4
    assert [b["tag"] for b in result["batches"]] == [1, 1, 2, 4, 4]
    trained = {int(step): set(uids) for step, uids in result["trained"].items()}  # what each update took
    assert sorted(trained) == [1, 2, 3, 4, 5]
    rows = RunReader(str(driven["onestep"]["run_dir"])).read("trajectories").to_pylist()
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_step.setdefault(row["step"], []).append(row)
    # each step holds its own update's batch and nothing else: 2 prompts x rollout.n 2, once each
    assert {step: len(rs) for step, rs in by_step.items()} == dict.fromkeys(trained, 4)
    assert {step: {r["traj_id"].rsplit("_", 1)[0] for r in rs} for step, rs in by_step.items()} == trained
    assert len({r["traj_id"] for r in rows}) == len(rows)
    # times count from the first sample of the step's own batch, so they fit in its generation window
    window = {frozenset(b["uids"]): b["end"] - b["start"] for b in result["batches"]}
    for step, rs in by_step.items():
        assert min(r["submit_time"] for r in rs) == 0.0
        assert max(r["finish_time"] for r in rs) <= window[frozenset(trained[step])]
    assert {r["trainer_version"] for r in rows} == {None} and result["status"]["faults"] == {}


@pytest.mark.parametrize(
    ("config", "versions", "lags"),
    [
        # v1 sync (trainer_sync.py) and the legacy trainer (ray_trainer.py) sync weights version s at
        # the end of step s, so step 7 generates on version 6 and its update starts from version 6
        ({"trainer": {"v1": {"trainer_mode": "sync"}}}, [6, 6], [0, 0]),
        ({"trainer": {"v1": {"trainer_mode": "sync"}}}, [4, 6], [2, 0]),
        # async modes train on samples of earlier steps: which update consumes one is not known here
        ({"trainer": {"v1": {"trainer_mode": "separate_async"}}}, [6, 6], []),
        ({"trainer": {"v1": {"trainer_mode": "colocate_async"}}}, [6, 6], []),
    ],
)
def test_a_synchronous_trainers_samples_carry_the_version_their_update_starts_from(tmp_path, config, versions, lags):
    run = tmp_path / "run"
    hook = Hook(str(run))
    worker = type("Worker", (), {"config": config})()
    for i, version in enumerate(versions):
        output = {"response_ids": [1] * 10, "extra_fields": {"min_global_steps": version, "max_global_steps": 6}}
        kwargs = {"output": output, "validate": False, "global_steps": 7, "uid": f"u{i}", "session_id": 0}
        _agent_loop._after_postprocess(hook, worker, (), kwargs)
    hook.flush()
    rows = RunReader(str(run)).read("trajectories", ["trainer_version"]).to_pylist()
    assert [r["trainer_version"] for r in rows] == [6 if lags else None] * 2
    per_step = staleness.analyze(str(run)).per_step
    assert (per_step["max"].tolist(), per_step["n"].tolist()) == (([max(lags)], [2]) if lags else ([], []))


def _target(attr: str) -> Any:
    """The hook's target for a verl ``Class.method``, and verl 0.9.1's own method it wraps."""
    import importlib

    from rlscope.collectors.verl import TARGETS

    (target,) = [t for t in TARGETS if t.attr == attr]
    owner = importlib.import_module(target.module)
    for part in attr.split("."):
        owner = getattr(owner, part)
        # a @ray.remote class: the user's class, whose methods Ray's subclass runs
        owner = getattr(getattr(owner, "__ray_metadata__", None), "modified_class", owner)
        owner = getattr(owner, "__ray_actor_class__", owner)
    return target, owner


def _agent_loop_batch(samples: list[dict[str, Any]], uid: str | None = None) -> Any:
    """verl's legacy agent-loop output (AgentLoopWorker._postprocess over padded per-sample
    outputs), as its AgentLoopWorker.generate_sequences returns it to the manager."""
    import numpy as np
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopWorker, _InternalAgentLoopOutput

    width_p, width_r = 6, 10
    outputs = []
    for s in samples:
        prompt, response = torch.zeros(1, width_p, dtype=torch.long), torch.zeros(1, width_r, dtype=torch.long)
        mask_p, mask_r = torch.zeros_like(prompt), torch.zeros_like(response)
        prompt[0, width_p - s["prompt"] :], mask_p[0, width_p - s["prompt"] :] = 7, 1  # left-padded
        response[0, : s["response"]], mask_r[0, : s["response"]] = 9, 1  # right-padded
        mask = torch.cat([mask_p, mask_r], 1)
        outputs.append(
            _InternalAgentLoopOutput(
                prompt_ids=prompt,
                response_ids=response,
                input_ids=torch.cat([prompt, response], 1),
                position_ids=torch.cumsum(mask, 1),
                response_mask=mask_r.clone(),
                attention_mask=mask,
                reward_score=s["reward"],
                num_turns=s["turns"],
                metrics=AgentLoopMetrics(generate_sequences=s["gen"], tool_calls=s["tool"], num_preempted=1),
                extra_fields={"min_global_steps": s["start"], "max_global_steps": s["end"]},
            )
        )
    worker = type("Worker", (), {"reward_loop_worker_handles": None})()
    sources = np.array([s["source"] for s in samples], dtype=object)
    uids = np.array([uid or s["uid"] for s in samples], dtype=object)
    return AgentLoopWorker._postprocess(worker, outputs, input_non_tensor_batch={"data_source": sources, "uid": uids})


def _sample(uid: str, start: int, end: int, response: int, gen: float = 0.5) -> dict[str, Any]:
    return {
        "uid": uid,
        "start": start,
        "end": end,
        "prompt": 3,
        "response": response,
        "reward": response / 10,
        "turns": 2,
        "gen": gen,
        "tool": 0.25,
        "source": "math",
    }


@needs_verl
def test_the_fully_async_trainer_records_each_sample_it_takes_with_the_version_its_update_starts_from(tmp_path):
    # fully_async_rollouter.py: one RolloutSample per prompt (its rollout.n samples), pickled into the
    # message queue; fully_async_trainer.py: _get_samples_from_queue assembles a batch of them, and
    # _fit_generate hands it to _collect_metrics_from_samples with current_param_version
    import ray.cloudpickle
    from verl.experimental.fully_async_policy.detach_utils import RolloutSample, assemble_batch_from_rollout_samples

    target, original = _target("FullyAsyncTrainer._collect_metrics_from_samples")
    from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer  # a Ray actor class

    trainer_cls = FullyAsyncTrainer.__ray_metadata__.modified_class.__ray_actor_class__
    run = tmp_path / "run"
    hook = Hook(str(run))
    collect = target.wrap(hook, original)
    trainer = object.__new__(trainer_cls)
    trainer.stale_trajectory_processed = 0
    cycles = {  # current_param_version -> prompts: their samples' (min, max) weight versions
        2: {"uid_sample_0_10": [(0, 1), (1, 2)], "uid_sample_0_11": [(2, 2), (2, 2)]},
        3: {"uid_sample_0_12": [(1, 3), (3, 3)]},
    }
    verl_stale = {}
    for version, prompts in cycles.items():
        queue = []
        for uid, versions in prompts.items():
            batch = _agent_loop_batch([_sample(uid, a, b, 4 + a + b, gen=0.1 * (a + b)) for a, b in versions])
            queue.append(ray.cloudpickle.dumps(RolloutSample(batch, uid, 0, {"total_generated_samples": 1})))
        batch = assemble_batch_from_rollout_samples([ray.cloudpickle.loads(x) for x in queue], None, None, None)
        trainer.current_param_version = version
        metrics: dict[str, Any] = {}
        assert collect(trainer, batch, metrics) is None  # verl's return value, unchanged
        verl_stale[version] = metrics["fully_async/count/stale_trajectory_processed"]
    hook.flush()
    assert hook.faults == {}
    rows = RunReader(str(run)).read("trajectories").to_pylist()
    # the cycle at version v ends by syncing version v + 1 and logging under it
    assert sorted({(r["step"], r["trainer_version"]) for r in rows}) == [(3, 2), (4, 3)]
    expected = {
        (f"{uid}_{j}", v + 1, a, b)
        for v, prompts in cycles.items()
        for uid, vs in prompts.items()
        for j, (a, b) in enumerate(vs)
    }
    assert {(r["traj_id"], r["step"], r["policy_version_start"], r["policy_version_end"]) for r in rows} == expected
    for r in rows:
        a, b = r["policy_version_start"], r["policy_version_end"]
        assert (r["prompt_tokens"], r["response_tokens"], r["turns"]) == (3, 4 + a + b, 2)
        assert r["gen_s"] == pytest.approx(0.1 * (a + b)) and r["tool_s"] == 0.25
        assert r["reward"] == pytest.approx(r["response_tokens"] / 10) and r["reward_status"] == "ok"
        assert r["data_source"] == "math"
        assert r["submit_time"] is None and r["finish_time"] is None and r["preemptions"] is None  # not in the batch
    # verl counts a sample stale when current_param_version - max_global_steps >= 1 (cumulative)
    assert verl_stale[3] == sum(r["trainer_version"] - r["policy_version_end"] >= 1 for r in rows)
    per_step = staleness.analyze(str(run)).per_step
    assert per_step["max"].to_dict() == {3: 2.0, 4: 2.0} and per_step["n"].to_dict() == {3: 4, 4: 2}
    assert per_step["mean"].to_dict() == pytest.approx({3: (2 + 1 + 0 + 0) / 4, 4: (2 + 0) / 2})


def test_a_resumed_process_logs_the_steps_it_repeats_as_a_later_attempt(tmp_path):
    # a crash after step 3, then verl resumes from the step-1 checkpoint in a new process: steps 2
    # and 3 again (docs/run-directory.md: attempt = earlier runs that logged the step; step 4 is new)
    run = tmp_path / "run"
    for first, last, t0 in ((1, 3, 0.0), (2, 4, 100.0)):
        hook = Hook(str(run))  # a new process
        for step in range(first, last + 1):
            start = t0 + 10 * step
            hook.add_span("step", start, start + 1)
            hook.on_log(step, {"timing_s/step": 1.0})
        hook.flush()
    hook.recorder().log_gpu([{"time": t, "gpu": 0, "util_pct": 50.0} for t in (10.5, 20.5, 30.5, 60, 120.5, 130.5)])
    hook.flush()
    reader = RunReader(str(run))
    steps = sorted((r["step"], r["attempt"]) for r in reader.read("steps", ["step", "attempt"]).to_pylist())
    assert steps == [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1), (4, 0)]
    spans = sorted((r["step"], r["attempt"]) for r in reader.read("spans", ["step", "attempt"]).to_pylist())
    assert spans == steps
    by_step = gpu_idle.analyze(str(run)).by_step.set_index("step")["samples"]
    assert by_step.to_dict() == {1: 1, 2: 1, 3: 1}  # step 2 is [120, 121], not stretched over the downtime


@needs_verl
def test_the_fully_async_record_the_tests_build_is_what_verls_metrics_aggregator_makes():
    from verl.experimental.fully_async_policy.detach_utils import MetricsAggregator

    micro = [update_metrics(2, 1), update_metrics(3, 2)]
    gpus = {"hybrid_gpus": HYBRID_GPUS, "standalone_gpus": STANDALONE_GPUS}  # as FullyAsyncTrainer makes it
    verl = MetricsAggregator(total_gpus=HYBRID_GPUS + STANDALONE_GPUS, **gpus)
    for metrics in micro:
        verl.add_step_metrics(metrics, sample_count=64)
    made = verl.get_aggregated_metrics(rollout_resource_utilization=0.7)
    assert made == pytest.approx(aggregated(micro, 0.7))
    assert "dynamic_resource/rollout_resource_utilization" in made  # the window's, repeated in the record


@pytest.mark.parametrize(
    ("updates", "sync_every", "trained", "windows"),
    [
        # validated last (test_freq 2): verl never logs update 4's own record
        (4, 1, {1: [1], 2: [2], 3: [3]}, [1, 2, 3, 4]),
        # the queue ends after a version not validated: verl syncs once more and logs update 3 then,
        # with a second rollouter window of step 3 (after the last update): dropped, step 3 keeps its own
        (3, 1, {1: [1], 2: [2], 3: [3]}, [1, 2, 3]),
        # a sync every 2 updates: the record under step 2 aggregates updates 2 and 3, the last of
        # version 1's and the first of version 2's (verl adds an update after logging)
        (4, 2, {1: [1], 2: [2, 3]}, [1, 2]),
    ],
    ids=["sync-each-update", "last-sync-at-the-end", "sync-every-2"],
)
def test_the_fully_async_trainers_records_join_the_rollouters_window_of_the_same_update(
    tmp_path, updates, sync_every, trained, windows
):
    # verl logs an update's training record after the next sync's rollouter window (fully_async_log)
    run = tmp_path / "run"
    hook = Hook(str(run))
    for step, data in fully_async_records(updates, sync_every=sync_every):
        hook.add_span("save_checkpoint", 1.0, 2.0)  # held till the next log: the step logged keeps it
        hook.on_log(step, data)
    hook.flush()
    wide = wide_steps(RunReader(str(run)).read("steps"))
    for step, own in trained.items():
        micro = [update_metrics(u, 0) for u in own]
        seconds = sum(m["timing_s/step"] for m in micro)
        assert wide.loc[step, "timing_s/step"] == seconds
        assert wide.loc[step, "training/global_step"] == own[-1]
        assert wide.loc[step, "fully_async/trainer/idle_ratio"] == sum(m["timing_s/gen"] for m in micro) / seconds
    # the rollouter's window up to the sync that made version k ran beside update k
    for step in windows:
        idle = rollouter_window(step)["fully_async/rollouter/idle_ratio"]
        assert wide.loc[step, "fully_async/rollouter/idle_ratio"] == idle
    assert wide.loc[2, "val-core/acc"] == 0.02
    assert set(wide.index) == set(trained) | set(windows)
    logged = {step for step, _ in fully_async_records(updates, sync_every=sync_every)}
    assert {s["step"] for s in RunReader(str(run)).read("spans", ["step"]).to_pylist()} == logged
    # fit() syncs once more when the queue ends right after a sync to a version not due for validation
    final = updates % sync_every == 0 and updates // sync_every % 2 != 0
    assert hook.status()["skipped"] == ({"fully_async_final_window": 1} if final else {})
    assert {r["attempt"] for r in RunReader(str(run)).read("steps", ["attempt"]).to_pylist()} == {0}


@pytest.mark.parametrize("sync_every", [1, 2])
def test_the_fully_async_final_window_after_the_last_update_never_replaces_that_steps_own(tmp_path, sync_every):
    # the queue ends after version 1 (not due for validation): fit() syncs once more, logging a
    # second window of step 1 (from that sync to the end) and the last update's record
    records = fully_async_records(sync_every, sync_every=sync_every, test_freq=2)
    assert [step for step, _ in records][-2:] == [1, 1] and records[-2][1] == rollouter_window(1, last=True)
    run = tmp_path / "run"
    hook = Hook(str(run))
    for step, data in records:
        hook.on_log(step, data)
    hook.flush()
    wide = wide_steps(RunReader(str(run)).read("steps").to_pandas())
    assert list(wide.index) == [1]
    own = rollouter_window(1)
    assert wide.loc[1, "fully_async/rollouter/idle_ratio"] == own["fully_async/rollouter/idle_ratio"]
    # the last update's record repeats the final window's utilization: left out with it
    assert (
        records[-1][1]["dynamic_resource/rollout_resource_utilization"]
        != own["dynamic_resource/rollout_resource_utilization"]
    )
    assert (
        wide.loc[1, "dynamic_resource/rollout_resource_utilization"]
        == own["dynamic_resource/rollout_resource_utilization"]
    )
    assert wide.loc[1, "training/global_step"] == sync_every  # the last update's record, logged after it
    assert hook.status()["skipped"] == {"fully_async_final_window": 1}


def test_a_resumed_process_logging_the_fully_async_window_of_its_last_step_again_is_a_restart(tmp_path):
    # the first process dies after the sync that made version 2; the resumed one (from version 1)
    # syncs to version 2 again: its window is a second attempt of step 2, not a final window
    run = tmp_path / "run"
    for idle in (0.2, 0.7):
        hook = Hook(str(run))  # a new process
        hook.on_log(2, {**rollouter_window(2), "fully_async/rollouter/idle_ratio": idle})
        hook.flush()
    rows = RunReader(str(run)).read("steps").to_pandas()
    idle = rows[rows.key == "fully_async/rollouter/idle_ratio"]
    assert sorted(idle[["attempt", "value"]].itertuples(index=False, name=None)) == [(0, 0.2), (1, 0.7)]
    assert wide_steps(rows).loc[2, "fully_async/rollouter/idle_ratio"] == 0.7
    assert hook.status()["skipped"] == {}


@pytest.mark.parametrize(
    "validation",
    [
        {"val-core/acc": 0.25},
        {"rollouter/validate_time": 7.0, "val-core/acc": 0.25},  # the fully async one timed
        {"val-core/acc": 0.25, "timing_s/testing": 4.0},  # a trainer that times its validation
        {"val-core/acc": "0.25", "timing/testing": 4.0},  # verl's older timer name; a value as text
    ],
    ids=["trainer", "fully-async-rollouter", "timed", "timed-old-names"],
)
def test_a_resumed_process_validating_its_checkpoint_step_keeps_that_steps_training(tmp_path, validation):
    # verl's val_before_train: a resumed process first logs validation alone at the checkpoint step
    run = tmp_path / "run"
    hook = Hook(str(run))
    for step in (1, 2):
        hook.on_log(step, {"timing_s/step": 10.0 * step, "val-core/acc": 0.1 * step})
    hook.flush()
    hook = Hook(str(run))  # resumed from the step-2 checkpoint
    hook.add_span("testing", 100.0, 101.0)
    hook.on_log(2, validation)
    hook.on_log(3, {"timing_s/step": 30.0})
    hook.flush()
    reader = RunReader(str(run))
    rows = sorted(
        (r["step"], r["attempt"], r["key"]) for r in reader.read("steps", ["step", "attempt", "key"]).to_pylist()
    )
    assert (2, 0, "val-core/acc") in rows and (2, 1, "val-core/acc") not in rows  # joined the step's attempt
    assert [r["attempt"] for r in reader.read("spans", ["attempt"]).to_pylist()] == [0]
    wide = wide_steps(reader.read("steps"))
    assert wide.loc[2, "timing_s/step"] == 20.0 and wide.loc[3, "timing_s/step"] == 30.0


def test_a_retrained_steps_own_validation_record_joins_the_retrained_attempt(tmp_path):
    # the fully async trainer logs a step's validation as a record of its own, after its training
    run = tmp_path / "run"
    hook = Hook(str(run))
    for step in (1, 2):
        hook.on_log(step, {"timing_s/step": 10.0 * step})
        hook.on_log(step, {"val-core/acc": 0.1 * step})
    hook.flush()
    hook = Hook(str(run))  # resumed from step 1: step 2 is trained again, then validated
    hook.on_log(2, {"timing_s/step": 22.0})
    hook.on_log(2, {"val-core/acc": 0.9})
    hook.flush()
    rows = RunReader(str(run)).read("steps", ["step", "attempt", "key", "value"]).to_pylist()
    assert {(r["attempt"], r["key"], r["value"]) for r in rows if r["step"] == 2} == {
        (0, "timing_s/step", 20.0),
        (0, "val-core/acc", 0.2),
        (1, "timing_s/step", 22.0),
        (1, "val-core/acc", 0.9),
    }


def test_the_config_merges_into_a_meta_json_the_user_completed(tmp_path):
    # docs/verl-hook.md: fields the config does not state are set by editing meta.json; a
    # restarted job's config must not wipe them
    run = tmp_path / "run"
    hook = Hook(str(run))
    hook.update_meta({"gpu": {"count": 8}, "model": {"name": "Qwen/Qwen2.5-7B"}})
    hook.flush()  # meta.json is written by the Recorder's writer thread, off the trainer's
    meta = json.loads((run / "meta.json").read_text())
    meta["gpu"]["type"], meta["model"]["active_params"] = "H100", 7.6e9
    (run / "meta.json").write_text(json.dumps(meta))
    hook = Hook(str(run))
    hook.update_meta({"gpu": {"count": 16}, "model": {"name": "Qwen/Qwen2.5-7B"}, "batch_size": 64})
    hook.flush()
    meta = json.loads((run / "meta.json").read_text())
    assert meta["gpu"] == {"type": "H100", "count": 16} and meta["batch_size"] == 64
    assert meta["model"] == {"name": "Qwen/Qwen2.5-7B", "active_params": 7.6e9}


@needs_verl
def test_missing_target_is_logged_once_and_the_other_patches_still_record(driven):
    faults = driven["faults"]
    status = faults["result"]["status"]
    assert status["patches"]["verl.utils.debug.metrics:calculate_debug_metrics"] == "missing"
    assert faults["stderr"].count("has no verl.utils.debug.metrics:calculate_debug_metrics") == 1
    snapshot = RunReader(str(faults["run_dir"]) + "-snapshot")
    steps = {(r["step"], r["key"]): r["value"] for r in snapshot.read("steps").to_pylist()}
    assert steps == {(1, "ok"): 1.0, (3, "ok"): 3.0}  # the unusable step "not-a-step" is a counted fault
    assert [(s["step"], s["phase"]) for s in snapshot.read("spans").to_pylist()] == [(1, "gen")]


@needs_verl
def test_hook_failures_and_a_lost_run_dir_are_counted_while_training_goes_on(driven):
    result = driven["faults"]["result"]
    # a "resume" fault too, where the read of the steps on disk outlasts RESUME_WAIT on a loaded machine
    faults = {k: v for k, v in result["status"]["faults"].items() if k != "resume"}
    assert faults == {"metrics": 1, "spans": 1}
    assert result["timed_despite_fault"] is True  # verl's timer still filled timing_raw
    assert result["logged_after_loss"] == 3  # the driver ran to its end: nothing raised into it
    recorder = result["status"]["recorder"]
    assert recorder["write_errors"] >= 1 and recorder["dropped_rows"] >= 3


def test_without_run_dir_nothing_is_installed_and_it_is_said_once():
    code = "import json, sys, rlscope.collectors.verl as h; print(json.dumps([h.status(), repr(sys.meta_path)]))"
    env = {k: v for k, v in os.environ.items() if k != "RLSCOPE_RUN_DIR"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    status, meta_path = json.loads(proc.stdout)
    assert status == {"installed": False, "run_dir": None}
    assert "_Watcher" not in meta_path
    assert proc.stderr.count("RLSCOPE_RUN_DIR is not set") == 1


def test_a_ray_actor_class_is_patched_where_ray_runs_it_and_pickles_by_value(tmp_path, monkeypatch):
    actor = pytest.importorskip("ray.actor")
    cloudpickle = pytest.importorskip("ray.cloudpickle")

    (tmp_path / "rlscope_fake_actor.py").write_text(
        textwrap.dedent(
            """
            import ray

            @ray.remote
            class Worker:
                async def step(self, x):
                    return x + 1
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, "rlscope_fake_actor", raising=False)
    hook = Hook(str(tmp_path / "run"))
    monkeypatch.setattr(hook_state, "_process", hook)

    def wrap(hook: Hook, original: Any) -> Any:
        async def step(self: Any, x: int) -> int:
            hook.add_span("step", 0.0, 1.0)
            return await original(self, x)

        return step

    install_targets(hook, [Target("f", "rlscope_fake_actor", "Worker.step", wrap)])
    module = importlib.import_module("rlscope_fake_actor")
    assert hook.patches == {"rlscope_fake_actor:Worker.step": "patched"}
    assert isinstance(module.Worker, actor.ActorClass)
    shipped = cloudpickle.loads(cloudpickle.dumps(module.Worker.__ray_metadata__.modified_class))
    assert asyncio.run(object.__new__(shipped).step(1)) == 2
    assert hook.status()["pending"] == 1  # the closure's Hook came back as this process's hook, not a copy


def test_a_module_imported_later_is_patched_on_import_and_keeps_its_loader(tmp_path, monkeypatch):
    pkg = tmp_path / "rlscope_fake_target"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            class Tracker:
                def log(self, x):
                    return x * 2
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, "rlscope_fake_target", raising=False)
    calls: list[int] = []

    def wrap(hook: Hook, original: Any) -> Any:
        def log(self: Any, x: int) -> int:
            calls.append(x)
            return original(self, x)

        return log

    hook = Hook(str(tmp_path / "run"))
    targets = [
        Target("f", "rlscope_fake_target", "Tracker.log", wrap),
        Target("g", "rlscope_fake_target", "Gone.log", wrap),
    ]
    install_targets(hook, targets)
    assert set(hook.patches.values()) == {"pending"}
    module = importlib.import_module("rlscope_fake_target")
    assert module.Tracker().log(3) == 6 and calls == [3]
    assert hook.patches == {"rlscope_fake_target:Tracker.log": "patched", "rlscope_fake_target:Gone.log": "missing"}
    assert type(module.__loader__).__name__ == "SourceFileLoader"
    assert not any(type(f).__name__ == "_Watcher" for f in sys.meta_path)  # done watching
    install_targets(hook, targets[:1])  # installing again never wraps twice
    assert module.Tracker().log(1) == 2 and calls == [3, 1]


def test_a_module_only_looked_up_before_its_import_is_still_patched(tmp_path, monkeypatch):
    # importlib.util.find_spec (pkgutil, "is X installed" checks) finds a spec it never executes
    (tmp_path / "rlscope_fake_probed.py").write_text("def f():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delitem(sys.modules, "rlscope_fake_probed", raising=False)
    hook = Hook(str(tmp_path / "run"))
    install_targets(hook, [Target("f", "rlscope_fake_probed", "f", lambda hook, original: lambda: original() + 1)])
    assert importlib.util.find_spec("rlscope_fake_probed") is not None
    assert hook.patches == {"rlscope_fake_probed:f": "pending"}
    module = importlib.import_module("rlscope_fake_probed")
    assert hook.patches == {"rlscope_fake_probed:f": "patched"} and module.f() == 2
    assert not any(type(f).__name__ == "_Watcher" for f in sys.meta_path)


def test_a_bad_gpu_interval_turns_off_sampling_only(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("RLSCOPE_GPU_INTERVAL", "abc")
    monkeypatch.setenv("RLSCOPE_EXPORT_PORT", str(_free_port()))
    hook = Hook(str(tmp_path / "run"))
    with caplog.at_level("WARNING", logger="rlscope"):
        hook.start_services()
    server = hook.status()["services"]["exporter"]
    try:
        assert "RLSCOPE_GPU_INTERVAL='abc' is not a number of seconds; no GPU sampling" in caplog.text
        assert server is not None and server.startswith("http://127.0.0.1:")
        assert hook.status()["services"]["gpu_sampler"] is None
    finally:
        hook._services["exporter"].stop()


def test_a_slow_read_of_the_steps_on_disk_is_a_fault_that_says_so(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(hook_state, "RESUME_WAIT", 0.05)
    monkeypatch.setattr(hook_state, "_attempts_on_disk", lambda *_: time.sleep(0.5) or {})
    hook = Hook(str(tmp_path / "run"))
    hook.on_log(1, {"timing_s/step": 1.0})
    hook.flush()
    assert hook.faults == {"resume": 1}
    assert "steps on disk not read within 0.05 s; logged as attempt 0" in caplog.text


def test_a_failing_read_of_the_steps_on_disk_is_a_fault_naming_its_error(tmp_path, monkeypatch, caplog):
    def unreachable(*_):
        raise TimeoutError("connect to s3 timed out after 60 s")

    monkeypatch.setattr(hook_state, "_attempts_on_disk", unreachable)
    hook = Hook(str(tmp_path / "run"))
    hook.on_log(1, {"timing_s/step": 1.0})
    hook.flush()
    assert hook.faults == {"resume": 1} and "connect to s3 timed out after 60 s" in caplog.text
    assert RunReader(str(tmp_path / "run")).read("steps").num_rows == 1  # logged as attempt 0


def test_a_read_that_ends_as_the_wait_times_out_is_judged_by_how_it_ended(tmp_path, caplog):
    from concurrent.futures import Future

    class EndsJustLate(Future):
        def __init__(self, outcome: BaseException | dict) -> None:
            super().__init__()
            self.outcome = outcome

        def result(self, timeout=None):
            if not self.done():  # the read ends just after the wait gave up
                if isinstance(self.outcome, BaseException):
                    self.set_exception(self.outcome)
                else:
                    self.set_result(self.outcome)
                raise TimeoutError
            return super().result()

    failed = Hook(str(tmp_path / "failed"))
    failed._on_disk = EndsJustLate(OSError(5, "Input/output error"))
    failed.on_log(1, {"timing_s/step": 1.0})
    assert failed.faults == {"resume": 1} and "Input/output error" in caplog.text
    read = Hook(str(tmp_path / "read"))
    read._on_disk = EndsJustLate({1: 0})  # step 1 is on disk: this process's step 1 is attempt 1
    read.on_log(1, {"timing_s/step": 1.0})
    read.flush()
    assert read.faults == {} and RunReader(str(tmp_path / "read")).read("steps", ["attempt"]).to_pylist() == [
        {"attempt": 1}
    ]


def test_a_read_that_fails_between_two_looks_is_a_resume_fault(tmp_path):
    from concurrent.futures import Future

    class FailsWhileLookedAt(Future):
        looks = 0

        def result(self, timeout=None):
            if timeout is not None:
                raise TimeoutError
            return super().result()

        def done(self):  # not done at the first look, failed by the next
            self.looks += 1
            if self.looks == 2 and not super().done():
                self.set_exception(OSError(5, "Input/output error"))
            return super().done()

    hook = Hook(str(tmp_path / "run"))
    hook._on_disk = FailsWhileLookedAt()
    hook.on_log(1, {"timing_s/step": 1.0})
    hook.flush()
    assert hook.faults == {"resume": 1} and RunReader(str(tmp_path / "run")).read("steps").num_rows == 1


def _finished(times):
    return [{"traj_id": str(i), "finish_time": t} for i, t in enumerate(times)]


def test_a_resumed_process_files_the_trajectories_it_generates_again_under_a_later_attempt(tmp_path):
    # a crash in step 3, after its samples were written and before its Tracking.log; verl resumes
    # from step 1's checkpoint in a new process: steps 2 and 3 are generated again, step 4 is new
    run = tmp_path / "run"
    crashed = Hook(str(run))
    for step in (1, 2, 3):
        crashed.log_trajectories(step, _finished([1.0, 2.0, 3.0]))
        if step < 3:
            crashed.on_log(step, {"timing_s/step": 1.0})
    crashed.flush()
    resumed = Hook(str(run))  # a new process
    resumed.read_prior_steps()
    resumed._on_disk.result(10)  # the samples come once the steps on disk are read (held till then: below)
    for step in (2, 3, 4):
        resumed.log_trajectories(step, _finished([5.0, 6.0]))
        resumed.on_log(step, {"timing_s/step": 1.0})
    resumed.flush()
    reader = RunReader(str(run))
    traj = reader.read("trajectories", ["step", "attempt"]).to_pylist()
    assert (
        sorted((r["step"], r["attempt"]) for r in traj)
        == [(1, 0)] * 3 + [(2, 0)] * 3 + [(2, 1)] * 2 + [(3, 0)] * 3 + [(3, 1)] * 2 + [(4, 0)] * 2
    )
    steps = sorted({(r["step"], r["attempt"]) for r in reader.read("steps", ["step", "attempt"]).to_pylist()})
    assert steps == [(1, 0), (2, 0), (2, 1), (3, 1), (4, 0)]  # step 3's crashed attempt was its samples' alone
    per_step = longtail.analyze(str(run)).per_step
    assert per_step["n"].to_dict() == {1: 3, 2: 2, 3: 2, 4: 2}
    assert per_step["rollout_s"].to_dict() == {1: 3.0, 2: 6.0, 3: 6.0, 4: 6.0}


def test_trajectories_seen_before_the_steps_on_disk_are_read_wait_for_them_without_blocking(tmp_path, monkeypatch):
    import threading

    run = tmp_path / "run"
    first = Hook(str(run))
    first.on_log(7, {"timing_s/step": 1.0})
    first.flush()
    gate = threading.Event()
    real = hook_state._attempts_on_disk
    monkeypatch.setattr(hook_state, "_attempts_on_disk", lambda *a: gate.wait(10) and real(*a))
    resumed = Hook(str(run))
    t0 = time.monotonic()
    resumed.log_trajectories(7, _finished([1.0]))  # step 7 again: attempt 1, once that is known
    resumed.log_trajectories(8, _finished([2.0, 3.0]))
    assert time.monotonic() - t0 < 1.0
    assert resumed.status()["pending"] == 2
    gate.set()
    deadline = time.monotonic() + 10
    while resumed.status()["pending"] and time.monotonic() < deadline:
        time.sleep(0.01)
    resumed.flush()
    traj = RunReader(str(run)).read("trajectories", ["step", "attempt"]).to_pylist()
    assert sorted((r["step"], r["attempt"]) for r in traj) == [(7, 1), (8, 0), (8, 0)]


def test_held_trajectories_are_bounded(tmp_path, monkeypatch):
    import threading

    gate = threading.Event()
    monkeypatch.setattr(hook_state, "_attempts_on_disk", lambda *a: gate.wait(10) and {})
    monkeypatch.setattr(hook_state, "MAX_PENDING_TRAJECTORIES", 4)
    hook = Hook(str(tmp_path / "run"))
    for step in range(5):
        hook.log_trajectories(step, _finished([1.0, 2.0]))
    assert hook.status()["pending"] == 2 and hook.status()["pending_dropped"] == 3
    gate.set()


def test_the_read_of_the_steps_on_disk_releases_held_trajectories_once(tmp_path, monkeypatch):
    # a worker logs each sample alone: the read's end must not pile up one release per sample
    import threading

    gate = threading.Event()
    monkeypatch.setattr(hook_state, "_attempts_on_disk", lambda *a: gate.wait(10) and {})
    releases = []
    release = Hook._release_held
    monkeypatch.setattr(Hook, "_release_held", lambda self, f: releases.append(1) or release(self, f))
    hook = Hook(str(tmp_path / "run"))
    for i in range(50):
        hook.log_trajectory(1, {"traj_id": str(i), "finish_time": 1.0})
    assert hook.status()["pending"] == 50
    gate.set()
    deadline = time.monotonic() + 10
    while hook.status()["pending"] and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # any further release runs meanwhile
    assert len(releases) == 1
    hook.flush()
    traj = RunReader(str(tmp_path / "run")).read("trajectories", ["step", "attempt"]).to_pylist()
    assert traj == [{"step": 1, "attempt": 0}] * 50


def test_a_crashed_steps_samples_compacted_after_the_resumed_process_started_still_count(tmp_path):
    # compaction renames segments with its own time: the rows' own writes were before the resume
    from rlscope.trace.compact import compact_run

    run = tmp_path / "run"
    crashed = Hook(str(run))
    crashed.log_trajectories(1, _finished([1.0, 2.0]))
    crashed.on_log(1, {"timing_s/step": 1.0})
    crashed.flush()
    crashed.log_trajectories(2, _finished([1.0, 2.0, 3.0]))  # the crash: step 2 never logged
    crashed.flush()
    resumed = Hook(str(run))  # a new process, then `rlscope compact` before its first sample
    time.sleep(0.01)
    assert len(RunReader(str(run)).segments("trajectories")) == 2
    compact_run(str(run))
    assert len(RunReader(str(run)).segments("trajectories")) == 1
    resumed.read_prior_steps()
    resumed._on_disk.result(10)
    resumed.log_trajectories(2, _finished([5.0]))
    resumed.flush()
    traj = RunReader(str(run)).read("trajectories", ["step", "attempt"]).to_pylist()
    assert sorted((r["step"], r["attempt"]) for r in traj) == [(1, 0)] * 2 + [(2, 0)] * 3 + [(2, 1)]


@pytest.fixture
def segment_clock(monkeypatch):
    """The clock segments are named with (store.segment_name), set by the test: its segments are
    then written where it says, before or after a process's start or a job's, whatever the real
    clock does. Starts an hour ago, so that job starts at its times are in the past."""
    from types import SimpleNamespace

    from rlscope.trace import store

    clock = {"now": time.time() - 3600}
    monkeypatch.setattr(store, "time", SimpleNamespace(time=time.time, time_ns=lambda: int(clock["now"] * 1e9)))
    return clock


def _job_started(run: Path, when: float) -> None:
    """A job's driver records its start, at ``when``, on disk."""
    from rlscope.trace.recorder import Recorder

    with Recorder(str(run)) as rec:
        rec.log_job_start(when)


def _process(run: Path, started: float) -> Hook:
    """A process of the run that started at ``started``."""
    hook = Hook(str(run))
    hook._started = hook._job_from = started
    return hook


def _read(hook: Hook, *, starts_job: bool = False, restarted: bool = False, monkeypatch) -> None:
    """The process reads the steps on disk now; ``restarted``: as a Ray actor Ray restarted."""
    with monkeypatch.context() as patch:
        patch.setattr(hook_state, "_restarted_by_ray", lambda: restarted)
        hook.read_prior_steps(starts_job=starts_job)
        hook._on_disk.result(10)


def _attempts(run: Path, table: str = "trajectories") -> list[tuple[int, int]]:
    return sorted((r["step"], r["attempt"]) for r in RunReader(str(run)).read(table, ["step", "attempt"]).to_pylist())


def test_a_worker_ray_restarts_mid_step_files_the_step_as_its_siblings_do(tmp_path, segment_clock, monkeypatch):
    # one job, started at t: its driver logs step 1; in step 2 an agent-loop worker dies after its
    # siblings wrote their step-2 samples, and Ray restarts it: its samples are the same attempt's (0)
    run, t = tmp_path / "run", segment_clock["now"]
    _job_started(run, t)
    driver, sibling = _process(run, t), _process(run, t + 1)
    segment_clock["now"] = t + 10
    sibling.log_trajectories(1, _finished([1.0, 2.0]))
    sibling.flush()
    driver.on_log(1, {"timing_s/step": 1.0})
    driver.flush()
    segment_clock["now"] = t + 20
    sibling.log_trajectories(2, _finished([1.0, 2.0]))
    sibling.flush()
    restarted = _process(run, t + 30)  # Ray's new process for the worker
    _read(restarted, restarted=True, monkeypatch=monkeypatch)
    segment_clock["now"] = t + 40
    restarted.log_trajectories(2, _finished([3.0]))
    restarted.flush()
    assert _attempts(run) == [(1, 0)] * 2 + [(2, 0)] * 3
    assert longtail.analyze(str(run)).per_step["n"].to_dict() == {1: 2, 2: 3}  # none of step 2's dropped


def test_a_resumed_job_redoes_its_crashed_step_as_the_next_attempt_in_every_process(
    tmp_path, segment_clock, monkeypatch
):
    # job 1 (at t) logs step 1 and crashes in step 2, its samples written; job 2 (at t + 100)
    # resumes from step 1's checkpoint and redoes step 2: attempt 1 in its driver (even one Ray
    # restarted: it reads before it logs its job's start), in a worker that started with it, and
    # in a worker Ray restarts after that worker wrote its step-2 samples
    run, t = tmp_path / "run", segment_clock["now"]
    _job_started(run, t)
    crashed = _process(run, t)
    segment_clock["now"] = t + 10
    crashed.log_trajectories(1, _finished([1.0, 2.0]))
    crashed.on_log(1, {"timing_s/step": 1.0})
    crashed.flush()
    segment_clock["now"] = t + 20
    crashed.log_trajectories(2, _finished([1.0, 2.0, 3.0]))  # the crash: step 2 never logged
    crashed.flush()
    driver, worker = _process(run, t + 100), _process(run, t + 101)
    _read(driver, starts_job=True, restarted=True, monkeypatch=monkeypatch)
    segment_clock["now"] = t + 110
    driver.log_job_start()
    driver.flush()
    _read(worker, monkeypatch=monkeypatch)
    segment_clock["now"] = t + 120
    worker.log_trajectories(2, _finished([5.0, 6.0]))
    worker.flush()
    restarted = _process(run, t + 130)
    _read(restarted, restarted=True, monkeypatch=monkeypatch)
    segment_clock["now"] = t + 140
    restarted.log_trajectories(2, _finished([7.0]))
    restarted.flush()
    driver.on_log(2, {"timing_s/step": 1.0})
    driver.flush()
    assert _attempts(run) == [(1, 0)] * 2 + [(2, 0)] * 3 + [(2, 1)] * 3
    assert sorted(set(_attempts(run, "steps"))) == [(1, 0), (2, 1)]
    assert longtail.analyze(str(run)).per_step["n"].to_dict() == {1: 2, 2: 3}  # the redo's own three


def test_a_new_jobs_worker_reading_before_its_jobs_start_is_on_disk_counts_the_crashed_step(
    tmp_path, segment_clock, monkeypatch
):
    # job 1 (at t) crashed in step 2 after writing its samples; job 2's worker, started at t + 100,
    # reads before job 2's driver has written its start: the crashed step's samples still count
    run, t = tmp_path / "run", segment_clock["now"]
    _job_started(run, t)
    crashed = _process(run, t)
    segment_clock["now"] = t + 20
    crashed.log_trajectories(2, _finished([1.0, 2.0]))
    crashed.flush()
    worker = _process(run, t + 100)
    _read(worker, monkeypatch=monkeypatch)
    segment_clock["now"] = t + 120
    worker.log_trajectories(2, _finished([5.0]))
    worker.flush()
    assert _attempts(run) == [(2, 0)] * 2 + [(2, 1)]


def test_a_worker_ray_cannot_say_was_restarted_is_judged_by_its_own_start(tmp_path, segment_clock, monkeypatch):
    run, t = tmp_path / "run", segment_clock["now"]
    _job_started(run, t)
    crashed = _process(run, t)
    segment_clock["now"] = t + 20
    crashed.log_trajectories(2, _finished([1.0]))
    crashed.flush()
    _job_started(run, t + 100)

    def unreachable() -> bool:
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(hook_state, "_restarted_by_ray", unreachable)
    worker = _process(run, t + 101)
    worker.read_prior_steps()
    worker._on_disk.result(10)
    worker.log_trajectories(2, _finished([5.0]))
    worker.flush()
    assert worker.faults == {"resume": 1} and _attempts(run) == [(2, 0), (2, 1)]


def test_outside_a_ray_actor_no_process_is_restarted_by_ray():
    assert hook_state._restarted_by_ray() is False


def test_the_driver_writes_its_jobs_start_without_waiting_for_the_next_flush(tmp_path):
    # a worker Ray restarts in the job's first step judges its siblings' samples by it
    from rlscope.trace.recorder import Recorder

    hook = Hook(str(tmp_path / "run"))
    hook._recorder = Recorder(str(tmp_path / "run"), flush_interval=3600)
    hook.log_job_start()
    deadline = time.monotonic() + 10
    while not list((tmp_path / "run" / "jobs").glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert RunReader(str(tmp_path / "run")).read("jobs").num_rows == 1
    finally:
        hook._recorder.close()


def _with_step_7(tmp_path: Path) -> Path:
    """A run an earlier process logged step 7 of (attempt 0): a resumed process redoes it as attempt 1."""
    run = tmp_path / "run"
    first = Hook(str(run))
    first.on_log(7, {"timing_s/step": 1.0})
    first.flush()
    return run


@pytest.mark.parametrize("read_s", [1.0, 60.0])
def test_trajectories_held_for_a_slow_read_are_written_as_the_process_exits(tmp_path, read_s):
    # a resumed process logs samples of step 7 (on disk: attempt 1) and 8 while the steps on disk are
    # still being read, and exits without a flush: they are written at exit, under the attempts read
    # if the read ends within EXIT_WAIT (5 s), else as attempt 0 (a "resume" fault) without waiting longer
    run = _with_step_7(tmp_path)
    code = textwrap.dedent(
        f"""
        import time
        from rlscope.collectors.verl import _hook as hook_state
        real = hook_state._attempts_on_disk
        hook_state._attempts_on_disk = lambda *a: time.sleep({read_s}) or real(*a)
        hook_state.EXIT_WAIT = 5.0
        hook = hook_state.Hook({str(run)!r})
        hook.log_trajectories(7, [{{"traj_id": "a", "finish_time": 1.0}}])
        hook.log_trajectories(8, [{{"traj_id": "b", "finish_time": 1.0}}, {{"traj_id": "c", "finish_time": 2.0}}])
        assert hook.status()["pending"] == 2
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RLSCOPE_RUN_DIR"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    traj = RunReader(str(run)).read("trajectories", ["step", "attempt"]).to_pylist()
    if read_s < 5.0:
        assert sorted((r["step"], r["attempt"]) for r in traj) == [(7, 1), (8, 0), (8, 0)]
    else:
        assert sorted((r["step"], r["attempt"]) for r in traj) == [(7, 0), (8, 0), (8, 0)]
        assert "steps on disk not read within 5 s; logged as attempt 0" in proc.stderr
        assert took < 40  # the bounded wait, not the 60 s read


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_process_forked_while_trajectories_are_held_does_not_wait_for_them_at_its_exit(tmp_path):
    # a process holds samples for the read of the steps on disk (2 s) and forks: the child has no
    # such read (its thread stayed in the parent) and no Recorder of its own, so its exit neither
    # waits EXIT_WAIT for it nor counts a fault; the parent writes them at its exit
    run = _with_step_7(tmp_path)
    code = textwrap.dedent(
        f"""
        import os, sys, time
        from rlscope.collectors.verl import _hook as hook_state
        real = hook_state._attempts_on_disk
        hook_state._attempts_on_disk = lambda *a: time.sleep(2.0) or real(*a)
        hook = hook_state.Hook({str(run)!r})
        hook.log_trajectories(7, [{{"traj_id": "a", "finish_time": 1.0}}])
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        print(f"child exited in {{time.monotonic() - t0:.1f}} s")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "RLSCOPE_RUN_DIR"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    took = float(proc.stdout.split("child exited in ")[1].split()[0])
    assert took < 2.0  # not the EXIT_WAIT of 5 s
    assert "resume capture failed" not in proc.stderr
    traj = RunReader(str(run)).read("trajectories", ["step", "attempt"]).to_pylist()
    assert [(r["step"], r["attempt"]) for r in traj] == [(7, 1)]
