"""`rlscope diagnose` on a 1,000-step run against DuckDB computing the core aggregations.

    python bench/bench_diagnose.py [--steps 1000] [--repeat 5] [--regenerate]

Simulates ``longtail-8b`` (8,192 trajectories a step on 64 GPUs, with NVML samples) once
into ``bench/out/diag-<steps>`` and reuses it. Then runs, alternately and each in its own
process, ``rlscope diagnose RUN --format json --output FILE`` and a DuckDB script over the
same Parquet that computes per-step stage-timer sums (``steps``), per-step t90 and max
finish time (``trajectories``) and reward by (step, data source): mean reward, zero share,
error rate. Wall time is measured around each child and peak RSS is the child's own
(``os.wait4``), so both pay their interpreter start and imports; rlscope's bytecode is
written first, as installing it does. Prints the medians, the ratio diagnose / DuckDB and
whether the two agree on the numbers they share.

Three more children, alternated with those: two only start the interpreter and import, one
what diagnose imports (pyarrow, pandas, the analyzers and the report), the other duckdb;
the third reads the columns diagnose reads into Arrow with pyarrow alone and does nothing
else (no pandas, no analysis, no report). The first is the floor under any diagnose that
keeps this stack; the third is what the read costs alone (diagnose reads its trajectories
while it imports the analysis).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIO = "longtail-8b"
TARGET_RATIO = 1.5
TARGET_RSS_GB = 2.0

# the stage timers of a step, without the whole-step timer that contains them
_PHASE_SUMS = """
SELECT step, sum(value) AS phase_s
FROM read_parquet('{run}/steps/*.parquet')
WHERE key LIKE 'timing_s/%' AND key <> 'timing_s/step' AND value IS NOT NULL
GROUP BY step ORDER BY step
"""
# rlscope's t90 is the ceil(0.9 n)-th smallest finish time (for the 10 or more a step here), which is DuckDB's quantile_disc
_FINISH = """
SELECT step, quantile_disc(finish_time, 0.9) AS t90_s, max(finish_time) AS max_s, count(*) AS n
FROM read_parquet('{run}/trajectories/*.parquet')
WHERE finish_time IS NOT NULL AND isfinite(finish_time) AND aborted IS NOT TRUE
GROUP BY step ORDER BY step
"""
_REWARDS = """
WITH t AS (
    SELECT step, coalesce(data_source, '(unknown)') AS source, reward,
           lower(coalesce(reward_status, 'ok')) <> 'ok' AS error
    FROM read_parquet('{run}/trajectories/*.parquet')
)
SELECT step, source,
       avg(reward) FILTER (WHERE NOT error) AS mean_reward,
       avg(CASE WHEN reward = 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE NOT error AND reward IS NOT NULL) AS zero_share,
       avg(CASE WHEN error THEN 1.0 ELSE 0.0 END) AS error_rate
FROM t GROUP BY step, source ORDER BY step, source
"""


def duckdb_child(run: str, out: str) -> None:
    """The DuckDB side, run in its own process: the three queries, results written as JSON."""
    import duckdb

    con = duckdb.connect()
    result = {}
    for name, sql in (("phase_sums", _PHASE_SUMS), ("finish", _FINISH), ("rewards", _REWARDS)):
        cursor = con.execute(sql.format(run=run))
        columns = [d[0] for d in cursor.description]
        result[name] = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


# what `rlscope diagnose --format json` imports, without reading or analysing anything; ended as
# diagnose ends (rlscope.cli.run), without the interpreter's teardown of what it imported
_DIAGNOSE_IMPORTS = (
    "import os, pyarrow.dataset, rlscope.cli.diagnose, rlscope.analyzers, rlscope.report.document; os._exit(0)"
)

# the columns diagnose reads, read into Arrow with pyarrow alone (no pandas, no numpy views, no
# analysis, no report): a floor under any diagnose in Python that reads what it reads
_READ_FLOOR = """
import glob, os, sys
import pyarrow as pa, pyarrow.parquet as pq
pa.set_memory_pool(pa.jemalloc_memory_pool())
reads = {
    "trajectories": ["step", "finish_time", "aborted", "engine", "response_tokens", "trainer_version",
                     "policy_version_start", "data_source", "reward", "reward_status"],
    "steps": ["step", "attempt", "time", "key", "value"],
    "gpu": ["time", "role", "util_pct"],
    "spans": ["step", "phase", "start", "end"],
    "logprob": ["step", "n_tokens", "abs_counts", "abs_max", "abs_mean", "is_clipped"],
}
text = ["engine", "data_source", "reward_status", "role", "phase"]
rows = 0
for table, columns in reads.items():
    for path in sorted(glob.glob(f"{sys.argv[1]}/{table}/*.parquet")):
        rows += pq.read_table(path, columns=columns, read_dictionary=[c for c in columns if c in text]).num_rows
assert rows > 0
os._exit(0)  # as diagnose ends
"""


def generate(run: Path, steps: int, regenerate: bool) -> None:
    """Simulate the run once; reuse it while its ``meta.json`` says the same scenario and steps."""
    meta = run / "meta.json"
    if meta.exists() and not regenerate:
        doc = json.loads(meta.read_text())
        if (doc.get("scenario"), doc.get("steps")) == (SCENARIO, steps):
            return
    shutil.rmtree(run, ignore_errors=True)
    from rlscope.trace.simulator import simulate

    started = time.perf_counter()
    print(f"simulating {SCENARIO} for {steps} steps into {run} ...", flush=True)
    simulate(SCENARIO, steps, run, seed=0)
    print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)


def compile_bytecode() -> None:
    """Write the bytecode of rlscope's modules, as installing a package does. Where
    PYTHONDONTWRITEBYTECODE is set (this development machine sets it), an editable install
    would otherwise compile every module it imports again at each start (about 0.1 s)."""
    import compileall
    import importlib.util

    for package in ("rlscope", "rlscope.collectors"):
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=1)


def describe(run: Path) -> str:
    from rlscope.trace.reader import RunReader

    reader = RunReader(run)
    rows = {t: reader.row_count(t) for t in reader.tables()}
    size = sum(p.stat().st_size for p in run.rglob("*.parquet"))
    return ", ".join(f"{t} {n:,}" for t, n in rows.items()) + f" rows; {size / 2**20:.0f} MiB of Parquet"


def timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS in GB) of one child process; raises if it fails."""
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode not in (0, 3):  # 3: diagnose found something at --fail-on (not used here)
        raise SystemExit(f"{' '.join(command)} exited with {child.returncode}")
    return wall, usage.ru_maxrss * 1024 / 1e9  # ru_maxrss is in KiB on Linux


def agree(doc: dict, duck: dict) -> list[str]:
    """Where diagnose and DuckDB disagree on the numbers both compute (empty: they agree)."""
    problems = []

    def close(a: float | None, b: float | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)

    tail = {r["step"]: r for r in doc["long_tail"]["per_step"]}
    for row in duck["finish"]:
        mine = tail.get(row["step"])
        if mine is None or not (close(mine["t_thr_s"], row["t90_s"]) and close(mine["rollout_s"], row["max_s"])):
            problems.append(f"finish times of step {row['step']}: {mine} vs {row}")
    phases = {r["step"]: r for r in doc["phases"]["seconds_per_step"]}
    for row in duck["phase_sums"]:
        mine = phases.get(row["step"])
        named = None if mine is None else sum(v for k, v in mine.items() if k not in ("step", "step_s", "other"))
        if not close(named, row["phase_s"]):
            problems.append(f"phase sum of step {row['step']}: {named} vs {row['phase_s']}")
    rewards = {(r["step"], r["source"]): r for r in doc["rewards"]["by_step"]}
    for row in duck["rewards"]:
        mine = rewards.get((row["step"], row["source"]), {})
        for key in ("mean_reward", "zero_share", "error_rate"):
            if not close(mine.get(key), row[key]):
                problems.append(f"{key} of {row['step']}/{row['source']}: {mine.get(key)} vs {row[key]}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each side, alternated (default 5)")
    parser.add_argument("--out", type=Path, help="run directory (default bench/out/diag-STEPS)")
    parser.add_argument("--regenerate", action="store_true", help="simulate the run again even if present")
    parser.add_argument("--duckdb-child", nargs=2, metavar=("RUN", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.duckdb_child:
        duckdb_child(*args.duckdb_child)
        return

    run = (args.out or HERE / "out" / f"diag-{args.steps}").resolve()
    generate(run, args.steps, args.regenerate)
    compile_bytecode()
    print(f"run: {run}\n  {describe(run)}")
    doc_path, duck_path = run.parent / f"{run.name}-diagnose.json", run.parent / f"{run.name}-duckdb.json"
    diagnose = [sys.executable, "-m", "rlscope", "diagnose", str(run), "--format", "json", "--output", str(doc_path)]
    duck = [sys.executable, str(Path(__file__).resolve()), "--duckdb-child", str(run), str(duck_path)]
    floors = {
        "imports": [sys.executable, "-c", _DIAGNOSE_IMPORTS],
        "duckdb imports": [sys.executable, "-c", "import duckdb"],
        "read floor": [sys.executable, "-c", _READ_FLOOR, str(run)],
    }
    print("diagnose: " + " ".join(diagnose[1:]))

    samples: dict[str, list[tuple[float, float]]] = {"diagnose": [], "duckdb": [], **{k: [] for k in floors}}
    for i in range(args.repeat):
        for name, command in (("duckdb", duck), ("diagnose", diagnose), *floors.items()):
            samples[name].append(timed(command))
        (d_wall, d_rss), (q_wall, q_rss) = samples["diagnose"][-1], samples["duckdb"][-1]
        print(
            f"  run {i + 1}: diagnose {d_wall:.2f} s {d_rss:.2f} GB | duckdb {q_wall:.2f} s {q_rss:.2f} GB"
            f" | imports alone: diagnose's {samples['imports'][-1][0]:.2f} s, duckdb {samples['duckdb imports'][-1][0]:.2f} s"
            f" | read floor {samples['read floor'][-1][0]:.2f} s"
        )

    walls = {k: statistics.median(w for w, _ in v) for k, v in samples.items()}
    rss = {k: max(r for _, r in v) for k, v in samples.items()}
    ratio = walls["diagnose"] / walls["duckdb"]
    problems = agree(json.loads(doc_path.read_text()), json.loads(duck_path.read_text()))
    print("\n| measure | diagnose | DuckDB | target |\n|---|---|---|---|")
    print(f"| wall time, median of {args.repeat} | {walls['diagnose']:.2f} s | {walls['duckdb']:.2f} s | |")
    print(f"| ratio diagnose / DuckDB | **{ratio:.2f}** | | <= {TARGET_RATIO} |")
    print(f"| peak RSS, largest run | **{rss['diagnose']:.2f} GB** | {rss['duckdb']:.2f} GB | <= {TARGET_RSS_GB} GB |")
    budget = TARGET_RATIO * walls["duckdb"]
    print(
        f"\ninterpreter and diagnose's imports alone: {walls['imports']:.2f} s ({walls['imports'] / walls['duckdb']:.2f}"
        f" x DuckDB's whole run). The target, {budget:.2f} s, leaves {budget - walls['imports']:.2f} s for"
        f" what diagnose does after them (analysing, writing, and the read where the imports do not hide it); DuckDB takes {walls['duckdb'] - walls['duckdb imports']:.2f} s"
        f" after its imports ({walls['duckdb imports']:.2f} s) for its three queries."
    )
    print(
        f"reading the columns diagnose reads with pyarrow alone, and nothing else: {walls['read floor']:.2f} s"
        f" ({walls['read floor'] / walls['duckdb']:.2f} x DuckDB's whole run, against the target's {TARGET_RATIO})."
    )
    print(
        "\nshared numbers (t90, max finish, stage sums, reward by source): " + ("agree" if not problems else "DIFFER")
    )
    for p in problems[:10]:
        print("  " + p)


if __name__ == "__main__":
    main()
