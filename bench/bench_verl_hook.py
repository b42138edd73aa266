"""What the verl hook adds to each ``Tracking.log`` call, against verl's own call, in one process.

    python bench/bench_verl_hook.py [--steps 2000] [--keys 300]

Installs the hook the way users do (``VERL_USE_EXTERNAL_MODULES`` before ``import verl``),
then alternates the hooked ``Tracking.log`` with verl's original (``Tracking.log.__wrapped__``)
on the same KEYS-metric dict. Two backends: ``console`` (verl formats and prints the dict;
stdout goes to /dev/null while timing) and none (verl does nothing, so the hooked time is
the hook's whole cost). Also times an empty ``with marked_timer(...)`` block, hooked and
not. Prints medians per call and the hooked / original ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def bench(tracking_cls: Any, backend: list[str], steps: int, keys: int) -> tuple[float, float]:
    tracker = tracking_cls(project_name="bench", experiment_name="bench", default_backend=backend)
    hooked, original = tracking_cls.log, tracking_cls.log.__wrapped__
    payloads = [{f"group{k % 12}/metric_{k}": float(k * (s + 1)) for k in range(keys)} for s in range(16)]
    plain_costs, hooked_costs = [], []
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        for step in range(steps):
            data = payloads[step % len(payloads)]
            t0 = time.perf_counter()
            original(tracker, data=data, step=step)
            t1 = time.perf_counter()
            hooked(tracker, data=data, step=step)
            t2 = time.perf_counter()
            plain_costs.append(t1 - t0)
            hooked_costs.append(t2 - t1)
    return _median_us(plain_costs), _median_us(hooked_costs)


def bench_timer(marked_timer: Any, steps: int) -> tuple[float, float]:
    original = marked_timer.__wrapped__
    timing_raw: dict[str, float] = {}
    plain_costs, hooked_costs = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        with original("gen", timing_raw):
            pass
        t1 = time.perf_counter()
        with marked_timer("gen", timing_raw):
            pass
        t2 = time.perf_counter()
        plain_costs.append(t1 - t0)
        hooked_costs.append(t2 - t1)
    return _median_us(plain_costs), _median_us(hooked_costs)


def _line(name: str, plain: float, hooked: float) -> str:
    return (
        f"{name:>12}: verl {plain:8.1f} us   hooked {hooked:8.1f} us   "
        f"added {hooked - plain:6.1f} us   ratio {hooked / plain:6.2f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["VERL_USE_EXTERNAL_MODULES"] = "rlscope.collectors.verl"
        os.environ["RLSCOPE_RUN_DIR"] = os.path.join(tmp, "run")
        import verl
        from verl.utils.debug import marked_timer
        from verl.utils.tracking import Tracking

        import rlscope.collectors.verl as hook

        if hook.status()["patches"].get("verl.utils.tracking:Tracking.log") != "patched":
            print("the hook did not patch Tracking.log", file=sys.stderr)
            return 1
        print(f"verl {verl.__version__}, {args.keys} keys, {args.steps} calls each, medians per call")
        for name, backend in (("console", ["console"]), ("no backend", [])):
            print(_line(name, *bench(Tracking, backend, args.steps, args.keys)))
        print(_line("marked_timer", *bench_timer(marked_timer, args.steps)))
        hook.flush(30.0)
        rec = hook.status()["recorder"]
        print(f"rows written {rec['rows_written']}, dropped {rec['dropped_rows']}, faults {hook.status()['faults']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
