"""Load on `rlscope export`: concurrent scrapers on loopback, errors and scrape latency.

    python bench/bench_export_load.py [RUN_DIR ...] [--scrapers 20] [--seconds 30]

Starts `rlscope export` in its own process on 127.0.0.1 (a free port), then SCRAPERS
threads each fetch /metrics back to back for SECONDS. Without RUN_DIR it simulates the
agentic scenario (24 steps) into a temporary directory and keeps appending a step with
its trajectories every second while the scrapers run, so refreshes happen under load; a
RUN_DIR given is only read. Prints the scrapes, errors (a non-200 answer, a failed
connection, or a body without rlscope_run_up), scrapes per second and the p50 / p99 /
max latency; exits 1 if any scrape failed. Only loopback is contacted, and every loop
stops at the deadline.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from rlscope import Recorder
from rlscope.trace.simulator import simulate


def _scraper(url: str, deadline: float, latencies: list[float], errors: list[str]) -> None:
    while time.monotonic() < deadline:
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = answer.read()
                ok = answer.status == 200 and b"rlscope_run_up" in body
        except OSError as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            continue
        latencies.append(time.perf_counter() - started)
        if not ok:
            errors.append("bad answer")


def _writer(run_dir: Path, first_step: int, deadline: float) -> None:
    """Append one step (metrics and 256 trajectories) per second, as a live run would."""
    rng = np.random.default_rng(first_step)
    with Recorder(run_dir, flush_interval=3600) as rec:
        step = first_step
        while time.monotonic() < deadline:
            finish = np.sort(rng.lognormal(4.0, 0.8, 256))
            rec.log_trajectories(
                step,
                {
                    "data_source": rng.choice(["swe-sandbox", "tool-math", "terminal-hard"], 256).tolist(),
                    "reward": rng.integers(0, 2, 256).astype(float).tolist(),
                    "reward_status": ["ok"] * 256,
                    "finish_time": finish.tolist(),
                },
            )
            rec.log_step(step, {"timing_s/gen": float(finish[-1]), "timing_s/step": float(finish[-1]) + 30.0})
            rec.flush()
            step += 1
            time.sleep(max(0.0, min(1.0, deadline - time.monotonic())))


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    parser.add_argument("--scrapers", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        live = not args.run_dirs
        run_dirs = [str(Path(tmp) / "agentic")] if live else args.run_dirs
        if live:
            simulate("agentic-failing-reward", 24, run_dirs[0])
        exporter = subprocess.Popen(
            [sys.executable, "-m", "rlscope", "export", *run_dirs, "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = exporter.stdout.readline()
            if not line.startswith("serving "):
                print(f"exporter did not start: {line}{exporter.stderr.read()}", file=sys.stderr)
                return 1
            url = line.split()[1]
            urllib.request.urlopen(url, timeout=60).read()  # first scrape reads the whole run: not timed
            deadline = time.monotonic() + args.seconds
            latencies: list[float] = []
            errors: list[str] = []
            threads = [
                threading.Thread(target=_scraper, args=(url, deadline, latencies, errors)) for _ in range(args.scrapers)
            ]
            if live:
                threads.append(threading.Thread(target=_writer, args=(Path(run_dirs[0]), 25, deadline)))
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(args.seconds + 30)
            elapsed = time.monotonic() - started
        finally:
            exporter.terminate()
            exporter.wait(timeout=10)

    ms = [x * 1000 for x in latencies]
    print(
        f"scrapers {args.scrapers} seconds {args.seconds:g} live {'yes' if live else 'no'} "
        f"scrapes {len(ms)} errors {len(errors)} rate {len(ms) / elapsed:.0f}/s "
        f"p50 {statistics.median(ms) if ms else float('nan'):.1f} ms p99 {_percentile(ms, 99):.1f} ms "
        f"max {max(ms, default=float('nan')):.1f} ms"
    )
    for message in sorted(set(errors))[:5]:
        print(f"  error: {message}")
    return 1 if errors or not ms else 0


if __name__ == "__main__":
    sys.exit(main())
