"""Drive verl's own code on tiny CPU batches with the hook installed through VERL_USE_EXTERNAL_MODULES.

    VERL_USE_EXTERNAL_MODULES=rlscope.collectors.verl RLSCOPE_RUN_DIR=RUN python drive_verl.py main|faults|v1

Run by tests/test_verl_hook.py in a subprocess (one ``import verl`` each). What verl computed
(its metric dicts, timings, reductions) is printed as one ``RESULT {json}`` line for the
test to compare with what the hook wrote to the run directory. Only the LLM is faked: a
registered agent loop returns canned ``AgentLoopOutput``s (and, for the v1 worker, a stand-in
TransferQueue takes its output); everything else is verl's code.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from typing import Any

import numpy as np
import torch
import verl  # installs the hook: the test sets VERL_USE_EXTERNAL_MODULES

# One training sample per entry: what the fake LLM "generated" for it.
CASES = [
    {"uid": "p0", "source": "math", "prompt": 3, "response": 5, "tool_tokens": 0, "gen": 0.50, "tool": 0.0, "pre": 0},
    {"uid": "p0", "source": "math", "prompt": 3, "response": 7, "tool_tokens": 2, "gen": 0.90, "tool": 0.3, "pre": 1},
    {"uid": "p1", "source": "code", "prompt": 4, "response": 2, "tool_tokens": 0, "gen": 0.20, "tool": 0.0, "pre": 0},
    {"uid": "p1", "source": "code", "prompt": 4, "response": 8, "tool_tokens": 3, "gen": 1.70, "tool": 0.6, "pre": 2},
]
PROMPT_LEN, RESPONSE_LEN = 6, 10


def _tokenizer() -> Any:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, **{f"t{i}": i + 2 for i in range(200)}}
    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="<unk>")), pad_token="<pad>", unk_token="<unk>"
    )


def _agent_loop_worker(trainer: dict[str, Any] | None = None) -> Any:
    """A real AgentLoopWorker with just the attributes its rollout path reads (no LLM server);
    ``trainer`` adds top-level sections of the trainer's config (the worker gets all of it)."""
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    rollout = {
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "calculate_log_probs": True,
        "prompt_length": PROMPT_LEN,
        "response_length": RESPONSE_LEN,
        "val_kwargs": {"top_p": 1.0, "top_k": -1, "temperature": 0.0},
        "agent": {"default_agent_loop": "rlscope_echo"},
    }
    worker = object.__new__(AgentLoopWorker)
    worker.config = OmegaConf.create({"data": {}, "actor_rollout_ref": {"rollout": rollout}, **(trainer or {})})
    worker.rollout_config = worker.config.actor_rollout_ref.rollout
    worker.llm_client = worker.teacher_client = worker.reward_loop_worker_handles = None
    worker.tokenizer, worker.processor = _tokenizer(), None
    worker.dataset_cls, worker.hf_model_type, worker.tools = None, None, []
    worker.mm_processor_kwargs, worker.distillation_enabled = {}, False
    return worker


class EchoLoop:
    """Stands in for an LLM: answers each sample with the tokens and timings its case names."""

    def __init__(self, **kwargs: Any):
        pass

    async def run(self, sampling_params: dict, **kwargs: Any) -> Any:
        from verl.experimental.agent_loop.agent_loop import AgentLoopMetrics, AgentLoopOutput

        case = CASES[int(kwargs["index"])]
        await asyncio.sleep(0.01 * case["response"])
        n, tools = case["response"], case["tool_tokens"]
        return AgentLoopOutput(
            prompt_ids=list(range(2, 2 + case["prompt"])),
            response_ids=list(range(10, 10 + n)),
            response_mask=[1] * (n - tools) + [0] * tools,
            response_logprobs=[-0.1 * (k + 1) for k in range(n)],
            reward_score=float(case["response"]) / 10,
            num_turns=2 + (2 if tools else 0),
            metrics=AgentLoopMetrics(
                generate_sequences=case["gen"], tool_calls=case["tool"], num_preempted=case["pre"]
            ),
        )


def _register_echo_loop() -> None:
    from verl.experimental.agent_loop.agent_loop import register

    register("rlscope_echo")(EchoLoop)  # hydra instantiates it as __main__.EchoLoop


def _gen_batch(step: int, validate: bool = False) -> Any:
    from verl import DataProto

    n = len(CASES)
    raw_prompt = np.empty(n, dtype=object)
    raw_prompt[:] = [[{"role": "user", "content": "q"}] for _ in range(n)]
    return DataProto.from_dict(
        tensors={"dummy": torch.zeros(n, 1)},
        non_tensors={
            "uid": np.array([c["uid"] for c in CASES], dtype=object),
            "data_source": np.array([c["source"] for c in CASES], dtype=object),
            "index": np.arange(n),
            "priority": np.arange(n),
            "raw_prompt": raw_prompt,
        },
        meta_info={"global_steps": step, "validate": validate},
    )


def _rollout(worker: Any, step: int, validate: bool = False) -> tuple[Any, dict[str, float]]:
    """verl's generate_sequences on one worker, then the manager's reduction of its per-sample metrics."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    output = asyncio.run(worker.generate_sequences(_gen_batch(step, validate)))
    reduced = AgentLoopManager._performance_metrics(
        object.__new__(AgentLoopManager), [output.meta_info.pop("metrics")], output
    )
    return output, {k: float(v) for k, v in reduced.items()}


def _with_old_log_probs(batch: Any) -> np.ndarray:
    """Give the batch trainer logprobs: rollout + a known delta on valid tokens, garbage elsewhere."""
    rollout = batch.batch["rollout_log_probs"]
    mask = batch.batch["response_mask"].bool()
    rng = np.random.default_rng(0)
    delta = torch.tensor(rng.normal(0.0, 0.05, rollout.shape), dtype=torch.float32)
    delta[~mask] = 50.0  # padding and tool tokens must not count
    batch.batch["old_log_probs"] = rollout + delta
    return delta[mask].numpy()


def scenario_main(run_dir: str) -> dict[str, Any]:
    from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_timing_metrics
    from verl.utils.debug import marked_timer  # the name and module ray_trainer imports it from
    from verl.utils.debug.metrics import calculate_debug_metrics
    from verl.utils.tracking import Tracking

    import rlscope.collectors.verl as hook

    config = {
        "data": {"train_batch_size": 2, "max_response_length": RESPONSE_LEN},
        "actor_rollout_ref": {"rollout": {"n": 2, "name": "vllm"}, "model": {"path": "Qwen/Qwen2.5-0.5B"}},
        "trainer": {"nnodes": 1, "n_gpus_per_node": 8, "project_name": "p", "experiment_name": "e"},
    }
    before_tracking = time.time()
    logger = Tracking(project_name="p", experiment_name="e", default_backend=["console"], config=config)
    _register_echo_loop()
    worker = _agent_loop_worker()
    out: dict[str, Any] = {"steps": {}, "before_tracking": before_tracking}

    for step in (1, 2):
        metrics: dict[str, Any] = {}
        timing_raw: dict[str, float] = {}
        with marked_timer("step", timing_raw):
            with marked_timer("gen", timing_raw, color="red"):
                batch, reduced = _rollout(worker, step)
            with marked_timer("old_log_prob", timing_raw, color="blue"):
                deltas = _with_old_log_probs(batch)
                metrics.update(calculate_debug_metrics(batch))
            with marked_timer("adv", timing_raw, color="brown"):
                scores = batch.batch["rm_scores"]
                for key in ("token_level_scores", "token_level_rewards", "advantages", "returns"):
                    batch.batch[key] = scores.clone()
        metrics.update(reduced)
        metrics.update(compute_data_metrics(batch=batch, use_critic=False))
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        logger.log(data=metrics, step=step)
        out["steps"][step] = {
            "metrics": {k: float(v) for k, v in metrics.items()},
            "timing_raw": timing_raw,
            "delta_abs_max": float(np.abs(deltas).max()),
            "delta_mean": float(deltas.mean()),
            "n_tokens": int(deltas.size),
        }

    _rollout(worker, 3, validate=True)  # validation samples are not training trajectories

    timing_raw = {}
    try:
        with marked_timer("broken", timing_raw):
            raise KeyError("raised inside the timed block")
    except KeyError as exc:
        out["timer_exception"] = str(exc)
    out["broken_timed"] = "broken" in timing_raw
    logger.log(data={"after": 1.0}, step=4)

    hook.flush()
    out["cases"] = CASES
    out["status"] = hook.status()
    url = out["status"]["services"]["exporter"]
    if url:  # the driver serves the run's metrics in-process when RLSCOPE_EXPORT_PORT is set
        import urllib.request

        with urllib.request.urlopen(url, timeout=10) as response:
            out["metrics_text"] = response.read().decode()
    return out


def scenario_faults(run_dir: str) -> dict[str, Any]:
    """calculate_debug_metrics removed (by break_verl.py, imported first), wrapper faults, lost run dir."""
    from verl.utils.debug import marked_timer
    from verl.utils.tracking import Tracking

    import rlscope.collectors.verl as hook

    out: dict[str, Any] = {}
    logger = Tracking(project_name="p", experiment_name="e", default_backend=["console"])
    timing_raw: dict[str, float] = {}
    with marked_timer("gen", timing_raw):
        pass
    logger.log(data={"ok": 1.0}, step=1)
    logger.log(data={"bad_step": 2.0}, step="not-a-step")  # console prints it; the hook cannot int() it

    real_add_span = hook._installed.add_span

    def broken_add_span(*args: Any) -> None:
        raise RuntimeError("injected")

    hook._installed.add_span = broken_add_span
    with marked_timer("update_actor", timing_raw):
        pass
    hook._installed.add_span = real_add_span
    out["timed_despite_fault"] = "update_actor" in timing_raw
    logger.log(data={"ok": 3.0}, step=3)
    hook.flush()
    shutil.copytree(run_dir, run_dir + "-snapshot")

    # The run directory vanishes and a file takes its place: nothing can be written any more.
    shutil.rmtree(run_dir)
    with open(run_dir, "w") as fh:
        fh.write("not a directory")
    for step in range(4, 7):
        with marked_timer("gen", timing_raw):
            pass
        logger.log(data={"ok": float(step)}, step=step)
    hook.flush()
    out["logged_after_loss"] = 3
    out["status"] = hook.status()
    return out


def scenario_v1(run_dir: str) -> dict[str, Any]:
    """verl's v1 (TransferQueue) worker: a @ray.remote class, shipped by value the way Ray ships it."""
    import ray.cloudpickle

    import rlscope.collectors.verl as hook

    try:
        import verl.trainer.ppo.v1.agent_loop_tq as agent_loop_tq
    except ImportError as exc:  # the v1 trainer also needs TransferQueue, torchdata, peft
        return {"skipped": f"verl's v1 trainer is not importable here ({exc})"}

    class FakeTransferQueue:
        async def async_kv_batch_put(self, **kwargs: Any) -> None:
            pass

    agent_loop_tq.tq = FakeTransferQueue()  # the one service this path writes to
    shipped = ray.cloudpickle.loads(
        ray.cloudpickle.dumps(agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class)
    )
    worker = object.__new__(shipped)
    worker.__dict__.update(_agent_loop_worker().__dict__)
    _register_echo_loop()

    async def run_all() -> None:
        calls = []
        for i, case in enumerate([*CASES, CASES[0]]):
            validate = i == len(CASES)
            calls.append(
                worker._run_agent_loop(
                    {},
                    trajectory={"step": 7, "validate": validate, "sample_index": i, "rollout_n": 0},
                    agent_name="rlscope_echo",
                    trace=False,
                    index=i % len(CASES),
                    uid=case["uid"],
                    session_id=i % 2,
                    global_steps=7,
                    data_source=case["source"],
                    raw_prompt=[],
                )
            )
        await asyncio.gather(*calls)

    asyncio.run(run_all())
    # the fully async trainer's module, imported as its entry point imports it: patched on import
    import verl.experimental.fully_async_policy.fully_async_trainer  # noqa: F401

    hook.flush()
    return {"cases": CASES, "status": hook.status()}


def scenario_onestep(run_dir: str) -> dict[str, Any]:
    """verl's one-step-off trainer (fit, fit_step, _fit_generate, _async_gen_next_batch, the agent
    loop manager's dispatch, two agent-loop workers): a run of 3 steps, then a run resumed from the
    checkpoint of step 3 with fresh workers (new processes) for steps 4-5. Only the LLM, the model
    workers and the step's compute phases are stand-ins; what each update trains on is recorded."""
    import time
    from types import SimpleNamespace

    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager
    from verl.experimental.one_step_off_policy.ray_trainer import OneStepOffRayTrainer

    import rlscope.collectors.verl as hook

    _register_echo_loop()
    pool = {"nnodes": 1, "n_gpus_per_node": 1}  # the rollout's own pool: what marks the one-step-off config
    config = OmegaConf.create(
        {
            "data": {"train_batch_size": 2, "max_response_length": RESPONSE_LEN},
            "actor_rollout_ref": {"rollout": {"n": 2, "name": "vllm", "temperature": 1.0}},
            "rollout": pool,
            "trainer": {
                "project_name": "p",
                "experiment_name": "e",
                "logger": [],
                "val_before_train": False,
                "total_epochs": 1,
                "balance_batch": False,
                "critic_warmup": 0,
                "test_freq": -1,
                "save_freq": -1,
                "esi_redundant_time": 0,
                "nnodes": 1,
                "n_gpus_per_node": 1,
            },
            "global_profiler": {"steps": None, "profile_continuous_steps": False},
        }
    )
    out: dict[str, Any] = {"trained": {}, "batches": [], "synced": []}

    def _prompts(index: list[int]) -> dict[str, Any]:
        """One batch as verl's dataloader yields it (the echo loop answers each sample as CASES[index])."""
        raw_prompt = np.empty(len(index), dtype=object)
        raw_prompt[:] = [[{"role": "user", "content": "q"}] for _ in index]
        sources = np.array([CASES[i]["source"] for i in index], dtype=object)
        return {
            "dummy": torch.zeros(len(index), 1),
            "index": np.array(index),
            "raw_prompt": raw_prompt,
            "data_source": sources,
        }

    class Trainer(OneStepOffRayTrainer):
        """verl's trainer with the model workers' phases stubbed: each records what it was given."""

        def _load_checkpoint(self) -> None:
            self.global_steps = self.resume_from

        def _fit_compute_reward(self, batch: Any) -> Any:
            out["trained"][self.global_steps] = sorted(set(batch.non_tensor_batch["uid"].tolist()))
            return batch

        def _fit_update_actor(self, batch: Any) -> Any:
            time.sleep(0.2)  # the update blocks the event loop, as verl's blocking worker calls do
            return batch

        def _fit_collect_metrics(self, batch: Any) -> None:
            pass

    for name in ("_fit_compute_log_prob", "_fit_compute_ref_log_prob", "_fit_compute_critic"):
        setattr(Trainer, name, lambda self, batch: batch)
    for name in ("_fit_compute_advantage", "_fit_update_critic"):
        setattr(Trainer, name, lambda self, batch: batch)

    class Manager(AgentLoopManager):
        """verl's manager: chunks each batch over its workers; records each batch's window and step tag."""

        async def generate_sequences(self, prompts: Any) -> Any:
            start = time.time()
            tag = prompts.meta_info["global_steps"]
            result = await super().generate_sequences(prompts)
            out["batches"].append({"tag": tag, "uids": sorted(set(result.non_tensor_batch["uid"].tolist()))})
            out["batches"][-1].update(start=start, end=time.time())
            return result

    class Sync:
        def update_weights(self, global_steps: int) -> None:
            out["synced"].append(global_steps)

    def run(resume_from: int, total: int) -> None:
        workers = [_agent_loop_worker({"rollout": pool}) for _ in range(2)]  # one per Ray actor process
        manager = object.__new__(Manager)
        # a Ray actor handle's method.remote(...) is awaited by the manager; here it is the coroutine
        manager.agent_loop_workers = [
            SimpleNamespace(generate_sequences=SimpleNamespace(remote=w.generate_sequences)) for w in workers
        ]
        trainer = object.__new__(Trainer)
        trainer.__dict__.update(
            config=config,
            resume_from=resume_from,
            total_training_steps=total,
            async_rollout_manager=manager,
            checkpoint_manager=Sync(),
            actor_rollout_wg=None,
            train_dataset=None,
            # one dict per training batch: 2 prompts whose samples the echo loop answers as CASES
            train_dataloader=[_prompts([2 * (k % 2), 2 * (k % 2) + 1]) for k in range(total - resume_from)],
            global_steps=0,
            epoch=0,
            metrics={},
            timing_raw={},
            is_last_step=False,
        )
        asyncio.run(trainer.fit())

    run(0, 3)
    run(3, 5)
    hook.flush()
    out["status"] = hook.status()
    return out


def main() -> int:
    scenario, run_dir = sys.argv[1], os.environ["RLSCOPE_RUN_DIR"]
    assert "rlscope.collectors.verl" in sys.modules, "VERL_USE_EXTERNAL_MODULES did not load the hook"
    scenarios = {"main": scenario_main, "faults": scenario_faults, "v1": scenario_v1, "onestep": scenario_onestep}
    result = scenarios[scenario](run_dir)
    result["verl_version"] = verl.__version__
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
