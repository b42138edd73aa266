"""A writer SIGKILLed at random moments leaves a readable run that lost only unflushed rows;
a reader running beside a writer never sees an error or a partial segment."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pyarrow.compute as pc

from rlscope.trace.reader import Cursor, RunReader

KEYS = 40
TRIALS = 20
PARALLEL = 4

WRITER = textwrap.dedent(
    f"""
    import sys, time
    import numpy as np
    from rlscope import Recorder

    run_dir, flush_interval = sys.argv[1], float(sys.argv[2])
    rec = Recorder(run_dir, meta={{"framework": "kill-test"}}, flush_interval=flush_interval)
    assert rec.flush()  # the writer thread has made the run directory and its meta.json
    print("READY", flush=True)
    step = 0
    while True:
        rec.log_step(step, {{f"k{{i}}": step + i / 1000 for i in range({KEYS})}})
        rec.log_trajectories(step, [{{"traj_id": f"{{step}}-{{j}}", "finish_time": float(j)}} for j in range(8)])
        if step % 5 == 4:
            if rec.flush():
                print(f"FLUSHED {{step}}", flush=True)
        step += 1
        time.sleep(0.001)
    """
)


def _start(tmp_path, name: str, flush_interval: float) -> tuple[subprocess.Popen, str]:
    run = str(tmp_path / name)
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, run, str(flush_interval)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "READY", proc.stderr.read() if proc.stderr else line
    return proc, run


def _check_run(run: str, acknowledged: int) -> None:
    reader = RunReader(run)
    steps = reader.read("steps", ["step", "key"])
    assert reader.warnings == []
    # no (step, key) twice, and every step up to the last acknowledged flush is complete
    pairs = set(zip(steps.column("step").to_pylist(), steps.column("key").to_pylist(), strict=True))
    assert len(pairs) == steps.num_rows
    for step in range(acknowledged + 1):
        assert all((step, f"k{i}") in pairs for i in range(KEYS)), f"step {step} lost after flush acknowledged"
    trajectories = reader.read("trajectories", ["step"])
    if acknowledged >= 0:
        counts = pc.value_counts(trajectories.column("step")).to_pylist()
        per_step = {c["values"]: c["counts"] for c in counts}
        assert all(per_step.get(s) == 8 for s in range(acknowledged + 1))


def test_sigkill_at_random_moments_loses_only_unflushed_rows(tmp_path):
    rng = random.Random(1234)
    for batch in range(TRIALS // PARALLEL):
        procs = []
        for i in range(PARALLEL):
            # half the trials also flush in the background often, so kills land mid-write
            procs.append(_start(tmp_path, f"run{batch}-{i}", 0.01 if i % 2 else 5.0))
        for proc, run in procs:
            time.sleep(rng.uniform(0.05, 0.4))
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate(timeout=30)
            assert proc.returncode == -signal.SIGKILL
            flushed = [int(line.split()[1]) for line in out.splitlines() if line.startswith("FLUSHED")]
            _check_run(run, max(flushed, default=-1))
            assert not [n for n in os.listdir(os.path.join(run)) if n.endswith(".tmp")]


def test_reader_beside_a_live_writer_sees_no_errors_and_no_partial_segment(tmp_path):
    proc, run = _start(tmp_path, "live", 0.005)
    try:
        reader = RunReader(run)
        cursor = Cursor()
        seen_rows = 0
        # read for 2 s beside the writer, and on (up to a minute) until it has written something:
        # on a loaded machine the writer's interpreter may still be starting after 2 s
        started = time.monotonic()
        reads = 0
        while time.monotonic() - started < 2.0 or (seen_rows == 0 and time.monotonic() - started < 60.0):
            new = reader.read_new("steps", cursor, ["step", "key"])
            seen_rows += new.num_rows
            whole = RunReader(run).read("steps", ["step"])
            assert whole.num_rows >= seen_rows
            reads += 1
        assert reader.warnings == []
        assert reads > 5 and seen_rows > 0
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    final = RunReader(run)
    assert final.read_new("steps", cursor).num_rows + seen_rows == final.row_count("steps")
