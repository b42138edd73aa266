"""Dashboard refresh cost: one new step on a long run against the same on a short run.

    python bench/bench_dashboard_refresh.py [--long 5000] [--short 50] [--first-load 1000]
                                            [--repeats 5] [--layout compacted|per-step]

Writes three synthetic colocated runs (256 trajectories, 25 metrics, 8 spans, NVML samples
of 2 GPUs and a log-prob histogram per step) with the store's segment writer, builds the
dashboard app over them, and times the Overview page's callback through Flask's test
client: the request a browser's refresh tick sends, so it includes reading the new
segments, folding them in, the analyzers on the recent window, the figures and the JSON.
Before each timed refresh one new step is appended as one segment per table (what a
Recorder flush writes). Target: long / short <= 1.5. It also times the Overview's first
load of the --first-load run (a fresh view: the whole run read once).

--layout compacted (default) writes each run's history as one segment per table per 500
steps, as ``rlscope compact`` or a slow flush leaves it; per-step writes one segment per
table per step, as an uncompacted Recorder does, where listing the folders grows with the run.
Nothing but the local filesystem is touched; every loop is bounded by its arguments.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from rlscope.trace.recorder import logprob_histogram_row
from rlscope.trace.schema import LOGPROB
from rlscope.trace.store import write_meta, write_segment

TRAJ = 256
META = {
    "model": {"active_params": 8e9},
    "gpu": {"type": "H100-SXM-80GB", "count": 64},
    "topology": "colocated",
    "batch_size": 32,
    "group_size": 8,
}
T0 = 1.75e9
STEP_S = 810.0


def _tables(first: int, last: int, seed: int) -> dict[str, pa.Table]:
    """Every table's rows for steps first..last (inclusive), vectorised so 5,000 steps take seconds."""
    rng = np.random.default_rng(seed)
    steps = np.arange(first, last + 1)
    n = len(steps)
    gen = 600 + 10 * rng.standard_normal(n)
    timers = {"gen": gen, "old_log_prob": np.full(n, 36.0), "ref": np.full(n, 36.0), "update_actor": np.full(n, 136.0)}
    timers["step"] = sum(timers.values()) + 2.0
    metrics = {f"timing_s/{k}": v for k, v in timers.items()}
    metrics["perf/total_num_tokens"] = np.full(n, TRAJ * 8700.0)
    metrics.update({f"extra/metric_{i}": rng.random(n) for i in range(20)})
    keys = list(metrics)
    steps_table = pa.table(
        {
            "step": np.repeat(steps, len(keys)),
            "attempt": pa.array(np.zeros(n * len(keys), dtype=np.int32)),
            "time": np.repeat(T0 + steps * STEP_S, len(keys)),
            "key": np.tile(np.array(keys, dtype=object), n),
            "value": np.stack([metrics[k] for k in keys], axis=1).ravel(),
        }
    )
    finish = np.sort(rng.lognormal(5.5, 0.5, (n, TRAJ)), axis=1)
    finish = finish / finish[:, -1:] * gen[:, None]
    traj_steps = np.repeat(steps, TRAJ)
    traj = pa.table(
        {
            "step": traj_steps,
            "traj_id": np.arange(n * TRAJ).astype(str),
            "group": np.tile(np.arange(TRAJ) // 8, n),
            "data_source": np.where(np.arange(n * TRAJ) % 3 == 0, "math", "code"),
            "prompt_tokens": np.full(n * TRAJ, 500),
            "response_tokens": (finish.ravel() * 14).astype(np.int64),
            "finish_time": finish.ravel(),
            "submit_time": np.zeros(n * TRAJ),
            "engine": np.array([f"engine-{i % 8}" for i in range(TRAJ)] * n),
            "policy_version_start": traj_steps - 1,
            "trainer_version": traj_steps - 1,
            "aborted": np.zeros(n * TRAJ, dtype=bool),
            "reward": (rng.random(n * TRAJ) < 0.4).astype(float),
            "reward_status": np.full(n * TRAJ, "ok"),
        }
    )
    starts = T0 + steps * STEP_S
    phases = [
        ("gen", "rollout", 0.0, gen),
        ("old_log_prob", "trainer", gen, gen + 36),
        ("ref", "trainer", gen + 36, gen + 72),
    ]
    phases += [("update_actor", "trainer", gen + 72, gen + 208), ("step", "trainer", 0.0, timers["step"])]
    spans = pa.table(
        {
            "step": np.concatenate([steps] * len(phases)),
            "phase": np.concatenate([[p] * n for p, *_ in phases]),
            "role": np.concatenate([[r] * n for _, r, *_ in phases]),
            "host": np.full(n * len(phases), "node-0"),
            "start": np.concatenate([starts + lo for *_, lo, _ in phases]),
            "end": np.concatenate([starts + hi for *_, hi in phases]),
        }
    )
    times = (starts[:, None] + np.arange(0, STEP_S, 40.0)[None, :]).ravel()
    util = np.where((times - np.repeat(starts, int(STEP_S // 40) + 1)[: times.size]) % STEP_S < 600, 95.0, 30.0)
    gpu = pa.table(
        {
            "time": np.concatenate([times, times]),
            "host": np.full(2 * times.size, "node-0"),
            "gpu": pa.array(np.repeat(np.arange(2, dtype=np.int32), times.size)),
            "role": np.full(2 * times.size, "actor_rollout"),
            "util_pct": np.concatenate([util, util]),
        }
    )
    deltas = rng.normal(0, 1e-3, 2048)
    logprob = pa.Table.from_pylist(
        [logprob_histogram_row(int(s), deltas, when=T0 + s * STEP_S) for s in steps], schema=LOGPROB
    )
    return {"steps": steps_table, "trajectories": traj, "spans": spans, "gpu": gpu, "logprob": logprob}


def write_run(path: Path, steps: int, per_segment: int) -> None:
    write_meta(path, META)
    seq = 0
    for first in range(1, steps + 1, per_segment):
        seq += 1
        for table, data in _tables(first, min(steps, first + per_segment - 1), seed=first).items():
            write_segment(path, table, data, writer_id="bench", seq=seq)


def append_step(path: Path, step: int) -> None:
    """One step as one segment per table: what a Recorder flush at the end of a step writes."""
    for table, data in _tables(step, step, seed=step).items():
        write_segment(path, table, data, writer_id="live", seq=step)


def _overview_request(client, deps: list[dict], run: int, tick: int) -> float:
    dep = next(d for d in deps if d["output"].startswith("..overview-"))
    outputs = [
        dict(zip(("id", "property"), o.rsplit(".", 1), strict=True)) for o in dep["output"].strip(".").split("...")
    ]
    values = {"app-runs": [run], "app-refresh": tick}
    payload = {
        "output": dep["output"],
        "outputs": outputs,
        "inputs": [{**i, "value": values.get(i["id"])} for i in dep["inputs"]],
        "state": [{**s, "value": None} for s in dep["state"]],
        "changedPropIds": ["app-refresh.data"],
    }
    started = time.perf_counter()
    answer = client.post("/_dash-update-component", json=payload)
    elapsed = time.perf_counter() - started
    if answer.status_code != 200 or b"could not" in answer.data:
        raise SystemExit(f"overview refresh of run {run} failed: {answer.status_code}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--long", type=int, default=5000)
    parser.add_argument("--short", type=int, default=50)
    parser.add_argument("--first-load", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--layout", choices=["compacted", "per-step"], default="compacted")
    args = parser.parse_args(argv)
    from rlscope.dashboards.app import create_app

    per_segment = 500 if args.layout == "compacted" else 1
    with tempfile.TemporaryDirectory(prefix="rlscope-bench-") as tmp:
        root = Path(tmp)
        runs = {
            "short": (root / "short", args.short),
            "long": (root / "long", args.long),
            "first": (root / "first", args.first_load),
        }
        for name, (path, steps) in runs.items():
            started = time.perf_counter()
            write_run(path, steps, per_segment)
            print(
                f"wrote {name:<5} run: {steps:>5} steps, {args.layout} layout, {time.perf_counter() - started:.1f} s",
                flush=True,
            )
        app = create_app([p for p, _ in runs.values()], refresh_s=0)
        client = app.server.test_client()
        deps = client.get("/_dash-dependencies").get_json()

        first_load = _overview_request(client, deps, 2, 0)
        print(f"first load of the Overview, {args.first_load}-step run: {first_load:.2f} s", flush=True)

        loads = {name: _overview_request(client, deps, index, 0) for index, name in ((0, "short"), (1, "long"))}
        times: dict[str, list[float]] = {"short": [], "long": []}
        for k in range(1, args.repeats + 1):  # interleaved, so drift on a shared machine hits both alike
            for index, name in ((0, "short"), (1, "long")):
                path, steps = runs[name]
                append_step(path, steps + k)
                time.sleep(0.6)  # past the refresh throttle, as a real tick would be
                times[name].append(_overview_request(client, deps, index, k))
        results = {name: statistics.median(t) for name, t in times.items()}
        for name in ("short", "long"):
            print(
                f"{name:<5} run ({runs[name][1]} steps): first load {loads[name]:.2f} s; refresh after one new step: "
                f"median {results[name] * 1000:.0f} ms of {', '.join(f'{t * 1000:.0f}' for t in times[name])} ms",
                flush=True,
            )
        ratio = results["long"] / results["short"]
        print(f"ratio long / short: {ratio:.2f} (target <= 1.5)")
        return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
