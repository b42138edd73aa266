"""Caller-thread cost of the Recorder against verl's own file logger, in one process.

    python bench/bench_recorder.py [--steps 2000] [--keys 300] [--trajectories 8192]

Prints the median cost per call of ``Recorder.log_step`` with KEYS metrics next to what
verl's file logger does per step (serialise the same dict with orjson and write a line),
their ratio, the caller-thread cost of ``log_trajectories`` with 8,192 rows, and the
background writer's throughput in trajectory rows per second.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from rlscope import Recorder, RunReader


def _metrics(rng: np.random.Generator, keys: int) -> dict[str, float]:
    return {f"group{k % 12}/metric_{k}": float(v) for k, v in enumerate(rng.random(keys))}


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def bench_log_step(tmp: Path, steps: int, keys: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    payloads = [_metrics(rng, keys) for _ in range(64)]
    verl_costs, rec_costs = [], []
    with open(tmp / "verl.jsonl", "wb") as fp, Recorder(tmp / "run", flush_interval=1.0) as rec:
        for step in range(steps):
            data = payloads[step % len(payloads)]
            t0 = time.perf_counter()
            fp.write(orjson.dumps({"step": step, "data": data}) + b"\n")
            t1 = time.perf_counter()
            rec.log_step(step, data)
            t2 = time.perf_counter()
            verl_costs.append(t1 - t0)
            rec_costs.append(t2 - t1)
    return _median_us(verl_costs), _median_us(rec_costs)


def bench_trajectories(tmp: Path, rows: int, repeats: int = 20) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    batch = [
        {
            "traj_id": f"t{i}",
            "group": i // 16,
            "data_source": "math" if i % 3 else "code",
            "prompt_tokens": 512,
            "response_tokens": int(n),
            "gen_s": float(n) / 40.0,
            "submit_time": 0.0,
            "finish_time": float(n) / 40.0,
            "engine": f"engine-{i % 8}",
            "policy_version_start": 3,
            "policy_version_end": 3,
            "reward": float(i % 2),
            "reward_status": "ok",
        }
        for i, n in enumerate(rng.lognormal(8.5, 0.8, rows).astype(int))
    ]
    caller = []
    rec = Recorder(tmp / "traj", flush_interval=3600, flush_rows=10**9, max_queue_rows=10**9)
    for step in range(repeats):
        t0 = time.perf_counter()
        rec.log_trajectories(step, batch)
        caller.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    rec.close(timeout=600)
    write_s = time.perf_counter() - t0
    written = RunReader(tmp / "traj").row_count("trajectories")
    assert written == rows * repeats, (written, rows * repeats)
    return statistics.median(caller) * 1e3, written / write_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=300)
    parser.add_argument("--trajectories", type=int, default=8192)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        verl_us, rec_us = bench_log_step(Path(tmp), args.steps, args.keys)
        print(f"log_step, {args.keys} keys, median per call over {args.steps} steps:")
        print(f"  verl file logger (orjson + write line): {verl_us:8.1f} us")
        print(f"  rlscope Recorder.log_step:              {rec_us:8.1f} us")
        print(f"  ratio recorder / verl file logger:      {rec_us / verl_us:8.2f}  (target <= 1.0)")
        caller_ms, rows_per_s = bench_trajectories(Path(tmp), args.trajectories)
        print(
            f"log_trajectories, {args.trajectories} rows: {caller_ms:.2f} ms on the caller's thread (target <= 10 ms)"
        )
        print(f"background writer: {rows_per_s:,.0f} trajectory rows/s")


if __name__ == "__main__":
    main()
