"""Wide step tables: every reader of a run that logs ~300 metric keys a step, as real verl runs do.

    python bench/bench_wide_steps.py [--steps 2000] [--repeats 5] [--out bench/out/wide-2000] [--regenerate]

bench_diagnose.py's run logs 25 keys a step, so per-row work on the long ``steps`` table (one
row per step and key) hides there. The first call writes the run (about a minute; later calls
reuse it): ``healthy-colocated`` simulated for --steps steps with 32 trajectories a step, plus
289 more keys a step under verl's own names (the real logs' ``actor/``, ``critic/``, ``perf/``,
``timing_s/``, ... and per data source validation metrics every step, two sources' every tenth)
written as extra ``steps`` segments at each step's time. Then each reader runs --repeats times,
each in a fresh process with imports excluded: ``rlscope diagnose --format json``,
``rlscope compare RUN RUN``, the exporter's first scrape, and the dashboard's first load of the
run (``LiveRun.refresh``). Prints each one's median. Only the local filesystem is touched.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

_STATS = ("max", "mean", "min")
_TRAIN_KEYS = [
    *(f"actor/{k}" for k in ("entropy", "grad_norm", "kl_coef", "kl_loss", "lr", "pg_clipfrac", "pg_clipfrac_lower")),
    *(f"actor/{k}" for k in ("pg_loss", "ppo_kl", "entropy_loss", "reward_kl_penalty", "reward_kl_penalty_coeff")),
    *(f"critic/{m}/{s}" for m in ("advantages", "returns", "rewards", "score", "values") for s in _STATS),
    *(f"critic/{k}" for k in ("grad_norm", "lr", "vf_clipfrac", "vf_explained_var", "vf_loss", "vpred_mean")),
    *(f"global_seqlen/{k}" for k in ("balanced_max", "balanced_min", "max", "mean", "min", "minmax_diff")),
    *(f"perf/{k}" for k in ("cpu_memory_used_gb", "max_memory_allocated_gb", "max_memory_reserved_gb")),
    *(f"perf/rank_{r}/max_memory_{m}_gb" for r in range(8) for m in ("allocated", "reserved")),
    *(f"{p}/{k}" for p in ("prompt_length", "response_length_non_aborted") for k in ("clip_ratio", *_STATS)),
    *(f"{p}/{s}" for p in ("num_turns", "tool_call_counts") for s in _STATS),
    *(f"timing_s/agent_loop/{p}/{s}" for p in ("generate_sequences", "tool_calls") for s in _STATS),
    *(f"timing_per_token_ms/{k}" for k in ("adv", "gen", "ref", "update_actor", "values", "old_log_prob", "reward")),
    *(f"timing_s/{k}" for k in ("reshard", "values", "update_critic", "start_profile", "stop_profile")),
    *(f"training/{k}" for k in ("epoch", "global_step", "rollout_probs_diff_max", "rollout_probs_diff_mean")),
    "response/aborted_ratio",
    "batch/solve_all",
    "batch/solve_none",
]
_VAL_KEYS = [
    f"val-aux/{src}/reward/{k}@{n}"
    for src in ("gsm8k", "math-lighteval", "aime24", "amc23", "olympiad", "minerva")
    for n in (1, 4, 8, 16)
    for k in ("best_mean", "best_std", "worst_mean", "worst_std", "maj_mean", "maj_std", "std", "mean")
]
_SPARSE_KEYS = [f"val-core/{src}/acc/mean@{n}" for src in ("gpqa", "mmlu-pro") for n in (1, 4, 8, 16)]


def write_run(out: Path, steps: int) -> None:
    """The simulated run plus the extra keys, one segment of them per 100 steps."""
    from rlscope.trace.simulator import get_scenario, simulate
    from rlscope.trace.store import new_writer_id, write_segment

    simulate(dataclasses.replace(get_scenario("healthy-colocated"), batch_size=8, group_size=4), steps, out)
    times = ds.dataset(out / "steps").to_table(columns=["step", "time"]).to_pandas().groupby("step")["time"].max()
    rng = np.random.default_rng(0)
    scale = {k: 10 ** rng.uniform(-3, 3) for k in _TRAIN_KEYS + _VAL_KEYS + _SPARSE_KEYS}
    scale.update({k: rng.uniform(0.05, 2.0) for k in _TRAIN_KEYS if k.startswith("timing_s/")})
    writer, seq = new_writer_id(), 0
    for first in range(0, len(times), 100):
        cols: dict[str, list] = {"step": [], "time": [], "key": [], "value": []}
        for step, when in times.iloc[first : first + 100].items():
            keys = _TRAIN_KEYS + _VAL_KEYS + (_SPARSE_KEYS if step % 10 == 0 else [])
            cols["step"] += [step] * len(keys)
            cols["time"] += [float(when)] * len(keys)
            cols["key"] += keys
            cols["value"] += [scale[k] * rng.uniform(0.8, 1.2) for k in keys]
        table = pa.table(cols).append_column("attempt", pa.array(np.zeros(len(cols["step"]), np.int32)))
        write_segment(out, "steps", table, writer_id=writer, seq=seq)
        seq += 1


def time_reader(run: str, reader: str) -> float:
    """Seconds one reader takes over ``run`` in this process, imports excluded."""
    if reader == "diagnose":
        from rlscope.cli import diagnose

        start = time.perf_counter()
        diagnose.main([run, "--format", "json", "--output", os.devnull])
    elif reader == "compare":
        from rlscope.cli import compare

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            start = time.perf_counter()
            compare.main([run, run])
    elif reader == "exporter first scrape":
        from prometheus_client import CollectorRegistry

        from rlscope.exporter.collector import RLScopeCollector

        collector = RLScopeCollector([run], registry=CollectorRegistry(), min_refresh_s=0)
        start = time.perf_counter()
        list(collector.collect())
    else:
        from rlscope.dashboards.live import LiveRun

        live = LiveRun(0, run, "wide")
        start = time.perf_counter()
        live.refresh(force=True)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--regenerate", action="store_true")
    ap.add_argument("--child", nargs=2, metavar=("RUN", "READER"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(time_reader(*args.child)))
        return 0
    out = args.out or Path(__file__).parent / "out" / f"wide-{args.steps}"
    if args.regenerate and (out / "meta.json").exists():  # a run this script wrote; nothing else is removed
        shutil.rmtree(out)
    if not (out / "meta.json").exists():
        write_run(out, args.steps)  # the simulator refuses a folder that is not empty
    table = ds.dataset(out / "steps").to_table(columns=["step", "key"])
    steps, keys = len(np.unique(table["step"].to_numpy())), len(np.unique(table["key"].to_numpy(zero_copy_only=False)))
    print(f"{out}: {table.num_rows:,} step rows, {keys} keys, {steps:,} steps")
    for reader in ("diagnose", "compare", "exporter first scrape", "dashboard first load"):
        times = []
        for _ in range(args.repeats):
            cmd = [sys.executable, __file__, "--child", str(out), reader]
            times.append(json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout))
        print(f"{reader:24s} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, max {max(times):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
