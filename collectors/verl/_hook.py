"""The hook's state in one process: its Recorder, what waits for a step number, and its counters.

verl's timers and its logprob debug metrics run before the trainer knows it will log them
under ``Tracking.log(data, step)``; the hook keeps what they produced here and stamps it
with the step of the next ``Tracking.log``. The Recorder is created on first use, so a
process that imports verl but never trains (a GPU worker, a reward worker) writes nothing.
"""

from __future__ import annotations

import atexit

# imported now, not by the read of the steps on disk (pandas and pyarrow import it lazily): it
# registers an exit handler, which fails once the interpreter is exiting (Hook._release_at_exit)
import concurrent.futures.thread  # noqa: F401
import importlib.metadata
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping
from concurrent import futures
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow.compute as pc

from rlscope.collectors.verl_metrics import (
    TRAINED_FROM_KEY,
    is_rollouter_window_key,
    record_trains,
    split_record,
    timer_stage,
)
from rlscope.errors import RunDirError
from rlscope.trace.reader import RunReader
from rlscope.trace.recorder import Recorder
from rlscope.trace.store import segment_written_ns

__all__ = [
    "CROSSCHECK_KEY",
    "ENV_EXPORT_HOST",
    "ENV_EXPORT_PORT",
    "ENV_GPU_INTERVAL",
    "ENV_GPU_ROLE",
    "MAX_PENDING_LOGPROB",
    "MAX_PENDING_SPANS",
    "MAX_PENDING_TRAJECTORIES",
    "SOURCE",
    "Hook",
    "process_hook",
    "set_process_hook",
    "verl_version",
]

log = logging.getLogger("rlscope")

SOURCE = "verl-hook"  # the ``source`` of the logprob rows this hook writes
# Kept while no Tracking.log has come (a process that times phases but never logs); oldest dropped beyond.
MAX_PENDING_SPANS = 10_000
MAX_PENDING_LOGPROB = 4  # per-token arrays are large: a few steps' worth at most
# trajectory rows held while the steps earlier processes logged are read (a worker's first samples)
MAX_PENDING_TRAJECTORIES = 100_000
CROSSCHECK_KEY = "rlscope/verl_hook/probs_diff_max"  # max |exp(old) - exp(rollout)| over the same tokens as verl
# seconds the first Tracking.log waits for the steps already on disk (read from Tracking.__init__ on)
RESUME_WAIT = 1.0
# seconds a process exiting waits for that read, to write the samples held for it
EXIT_WAIT = 5.0

# Services the driver (the process that builds verl's Tracking) starts beside the patches.
ENV_GPU_INTERVAL = "RLSCOPE_GPU_INTERVAL"  # seconds between NVML samples of this node; 0 turns it off
ENV_GPU_ROLE = "RLSCOPE_GPU_ROLE"  # role label of this node's GPUs
ENV_EXPORT_PORT = "RLSCOPE_EXPORT_PORT"  # serve Prometheus /metrics of the run from this process
ENV_EXPORT_HOST = "RLSCOPE_EXPORT_HOST"

# A phase's role in the spans table; every other verl stage runs on the trainer's GPUs.
_ROLES = {"gen": "rollout", "reward": "reward"}


def _attempts_on_disk(run_dir: str, before: float, by_job: bool = False) -> dict[int, int]:
    """Each step earlier processes of the run logged, with the highest attempt it was logged
    under: the ``steps`` table's, and the steps beyond them whose trajectories a process that
    crashed mid-step wrote (segments written before ``before``, this process's start, so that
    no other process of this job counts; a compacted one by the segments it merged).

    ``by_job``: this process was restarted within its job (a Ray actor restart), after its
    siblings wrote samples of the step it was restarted in; segments count when written before
    the latest job start on disk instead, which is its own job's (see :meth:`Hook.log_job_start`),
    or before ``before`` when no job start is on disk."""
    try:
        reader = RunReader(run_dir, require_meta=False)
        steps = reader.read("steps", ["step", "attempt"]).to_pandas()
        jobs = reader.read("jobs", ["time"]).column("time") if by_job else None
    except RunDirError:  # a new run: nothing on disk yet
        return {}
    out = {int(k): int(v) for k, v in steps["attempt"].fillna(0).groupby(steps["step"]).max().items()}
    if jobs is not None and len(jobs):
        before = pc.max(jobs).as_py()
    # a compacted segment is named when compacted: its rows were written when its origins were
    earlier = [
        s for s in reader.segments("trajectories") if max(segment_written_ns(n) for n, _ in s.origins) < before * 1e9
    ]
    if earlier:
        beyond = pc.field("step") > max(out, default=-1)
        tail = reader.read("trajectories", ["step", "attempt"], filter=beyond, segments=earlier).to_pandas()
        out.update({int(k): int(v) for k, v in tail["attempt"].fillna(0).groupby(tail["step"]).max().items()})
    return out


def _restarted_by_ray() -> bool:
    """Whether this process is a Ray actor that Ray restarted (``max_restarts``) after its first
    process died: it joins a job already under way. Ray is only looked at if already imported."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return False
    context = ray.get_runtime_context()
    return context.get_actor_id() is not None and bool(context.was_current_actor_reconstructed)


def _in_background(fn: Any, *args: Any) -> Future:
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits
            future.set_exception(exc)

    threading.Thread(target=run, name="rlscope-resume", daemon=True).start()
    return future


def verl_version() -> str | None:
    """verl's version without importing anything new: the module if loaded, else the installed dist."""
    module = sys.modules.get("verl")
    version = getattr(module, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


class Hook:
    """Everything the patches share in one process. Recording methods may raise; the wrappers
    catch, count (``fault``) and carry on.

    A patched class can travel by pickle (Ray ships actor classes that are not importable by
    name, methods included); a Hook pickles as a reference to whatever hook the receiving
    process has, so a wrapper's closure never drags a lock or a Recorder across.
    """

    def __init__(self, run_dir: str | None):
        self.run_dir = run_dir
        self._lock = threading.Lock()
        self._recorder: Recorder | None = None
        self._spans: deque[tuple[str, float, float]] = deque()
        self._logprob: deque[tuple[np.ndarray, float]] = deque()
        self.patches: dict[str, str] = {}  # "module:attr" -> patched | pending | missing | failed: <error>
        self.faults: dict[str, int] = {}
        self.pending_dropped = 0
        self.skipped: dict[str, int] = {}  # reason -> records (or parts of them) not recorded
        self._window_step: int | None = None  # the step of the last fully async rollouter window logged
        self._final_step: int | None = None  # the step whose final fully async rollouter window was dropped
        self._warned: set[str] = set()
        self._services: dict[str, Any] | None = None  # started once, in the driver
        self._on_disk: Future | None = None  # steps logged before this process: step -> last attempt
        self._prior: dict[int, int] | None = None
        self._logged: dict[int, int] = {}  # step -> the attempt this process logged its training under
        self._held: deque[tuple[int, list[Mapping[str, Any]]]] = deque()  # trajectories waiting for _prior
        self._held_rows = 0
        self._releasing = threading.Lock()  # held rows are recorded by one thread at a time
        self._release_armed = False  # the read's end is set to release the held rows
        self._started = time.time()  # segments written before this are earlier processes'
        self._job_from: float | None = time.time()  # this process's start: its first job's, until logged

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return process_hook, ()

    # -- bookkeeping ----------------------------------------------------------------------

    def warn_once(self, key: str, message: str, *args: object) -> None:
        with self._lock:
            first = key not in self._warned
            self._warned.add(key)
        if first:
            log.warning(message, *args)

    def fault(self, feature: str, exc: BaseException) -> None:
        """Count an exception a wrapper caught; the first of each feature is logged."""
        with self._lock:
            self.faults[feature] = self.faults.get(feature, 0) + 1
        self.warn_once(
            f"fault:{feature}",
            "rlscope verl hook: %s capture failed (%s: %s); training continues, see rlscope.collectors.verl.status()",
            feature,
            type(exc).__name__,
            exc,
        )

    def status(self) -> dict[str, Any]:
        with self._lock:
            rec = self._recorder
            out: dict[str, Any] = {
                "installed": True,
                "run_dir": self.run_dir,
                "patches": dict(self.patches),
                "faults": dict(self.faults),
                "pending": len(self._spans) + len(self._logprob) + len(self._held),
                "pending_dropped": self.pending_dropped,
                "skipped": dict(self.skipped),
            }
        out["recorder"] = rec.status() if rec is not None else None
        services = self._services or {}
        sampler, server = services.get("gpu_sampler"), services.get("exporter")
        out["services"] = {
            "gpu_sampler": None if sampler is None else {"samples": sampler.samples, "errors": sampler.errors},
            "exporter": None if server is None else server.url,
        }
        return out

    def start_services(self) -> None:
        """In the driver: this node's NVML sampler and, if ``RLSCOPE_EXPORT_PORT`` is set, the exporter.

        Each is optional and independent: no GPU is one logged line, a busy port another.
        """
        with self._lock:
            if self._services is not None:
                return
            self._services = {}
        text = os.environ.get(ENV_GPU_INTERVAL, "1.0")
        try:
            interval = float(text)
        except ValueError:
            interval = math.nan
        if not math.isfinite(interval) or interval < 0:
            log.warning("rlscope verl hook: %s=%r is not a number of seconds; no GPU sampling", ENV_GPU_INTERVAL, text)
        elif interval > 0:
            from rlscope.collectors.gpu_sampler import GpuSampler

            sampler = GpuSampler(self.recorder(), interval=interval, role=os.environ.get(ENV_GPU_ROLE, "unknown"))
            if sampler.start():
                self._services["gpu_sampler"] = sampler
        port = os.environ.get(ENV_EXPORT_PORT, "").strip()
        if port:
            from rlscope.exporter import serve

            host = os.environ.get(ENV_EXPORT_HOST, "127.0.0.1")
            self._services["exporter"] = serve(self.run_dir, port=int(port), host=host)
            log.info("rlscope verl hook: serving %s", self._services["exporter"].url)

    # -- the Recorder -----------------------------------------------------------------------

    def recorder(self) -> Recorder:
        """This process's Recorder, created (and meta.json merged) on first use."""
        with self._lock:
            if self._recorder is None:
                if self.run_dir is None:
                    raise RuntimeError("RLSCOPE_RUN_DIR is not set in this process")
                meta: dict[str, Any] = {"framework": "verl"}
                version = verl_version()
                if version:
                    meta["framework_version"] = version
                self._recorder = Recorder(self.run_dir, meta=meta)
            return self._recorder

    def update_meta(self, meta: Mapping[str, Any]) -> None:
        """Merge what the trainer's config tells into meta.json (driver only, once per Tracking);
        the Recorder's writer thread writes it, off the trainer's thread."""
        self.recorder().update_meta(meta)

    def log_job_start(self) -> None:
        """Record the start of the job whose Tracking was just set up (driver only, once per
        Tracking). The process's first job started when the process did (the hook is installed as
        it imports verl, before verl builds its workers, engines and checkpoint), a later one (fit
        called again) now; a worker process, which sets up no Tracking, records none."""
        with self._lock:
            when, self._job_from = self._job_from, None
        rec = self.recorder()
        rec.log_job_start(time.time() if when is None else when)
        # written now, not at the next flush: a worker Ray restarts in this job's first step reads it
        rec.flush(0)

    def flush(self, timeout: float = 10.0) -> None:
        """Write what was logged, trajectories held for the steps on disk among it (waiting up
        to ``timeout`` for that read)."""
        with self._lock:
            rec, held, reading = self._recorder, bool(self._held), self._on_disk
        if held and reading is not None:
            futures.wait([reading], timeout)
            self._release_held(reading)
        if rec is not None:
            rec.flush(timeout)

    # -- data that waits for its step -----------------------------------------------------------

    def _hold(self, queue: deque, item: Any, limit: int) -> None:
        with self._lock:
            queue.append(item)
            while len(queue) > limit:
                queue.popleft()
                self.pending_dropped += 1

    def read_prior_steps(self, starts_job: bool = False) -> None:
        """Start reading, off the trainer's thread, the steps earlier processes of this run logged.
        ``starts_job``: this process starts a job (the driver, reading before it logs the job's
        start), so its own start parts earlier jobs from its own, even if Ray restarted it."""
        with self._lock:
            if self._on_disk is None and self.run_dir is not None:
                self._on_disk = _in_background(self._read_prior, starts_job)

    def _read_prior(self, starts_job: bool) -> dict[int, int]:
        """The steps earlier jobs logged, for :meth:`read_prior_steps` (on its thread)."""
        restarted = False
        if not starts_job:
            try:
                restarted = _restarted_by_ray()
            except Exception as exc:  # noqa: BLE001 - Ray cannot tell: judged by this process's start
                self.fault("resume", exc)
        return _attempts_on_disk(self.run_dir, self._started, restarted)

    def _settle_prior(self, wait: float) -> dict[int, int] | None:
        """The steps earlier processes logged, waiting for their read at most ``wait`` seconds;
        then None if ``wait`` is 0, else (a slow or failing read) nothing, logged as a fault."""
        if self._prior is not None:
            return self._prior
        self.read_prior_steps()
        future = self._on_disk
        assert future is not None
        try:
            prior = future.result(wait) if wait or future.done() else None
        except Exception:  # noqa: BLE001 - a slow or failing read: logged as attempt 0
            ended = future.done()  # one look: a read done just now is judged by how it ended
            failed = future.exception() if ended else None
            if ended and failed is None:
                prior = future.result()
            else:
                prior = {}
                slow = TimeoutError(f"steps on disk not read within {wait:g} s; logged as attempt 0")
                self.fault("resume", failed or slow)
        if prior is None:
            return None
        with self._lock:
            if self._prior is None:
                self._prior = prior
            return self._prior

    def _attempt(self, step: int, data: Mapping[str, Any]) -> int:
        """The attempt this process logs ``step`` under: 0, or one more than the last attempt on
        disk when an earlier process of the run (before a crash and resume) logged it. A record
        that trains nothing (``record_trains``: verl validates the checkpoint step it resumes
        from, timing ``testing`` too) joins the attempt this process already logged the step
        under, else the step's attempt on disk: it repeats no training."""
        prior = self._settle_prior(RESUME_WAIT)
        assert prior is not None
        if data and not record_trains(data):
            return self._logged.get(step, prior.get(step, 0))
        attempt = prior.get(step, -1) + 1
        self._logged[step] = attempt
        return attempt

    def _first_sight(self, step: int) -> int | None:
        """The attempt this process generates ``step`` under, fixed when it first sees the step
        (as :meth:`_attempt` will log its training), or None while the steps on disk are read."""
        with self._lock:
            known = self._logged.get(step)
        if known is not None:
            return known
        prior = self._settle_prior(0)
        if prior is None:
            return None
        with self._lock:
            return self._logged.setdefault(step, prior.get(step, -1) + 1)

    def add_span(self, phase: str, start: float, end: float) -> None:
        self._hold(self._spans, (timer_stage(str(phase)), start, end), MAX_PENDING_SPANS)

    def add_logprob(self, deltas: np.ndarray, probs_diff_max: float) -> None:
        self._hold(self._logprob, (deltas, probs_diff_max), MAX_PENDING_LOGPROB)

    def on_log(self, step: Any, data: Mapping[str, Any]) -> None:
        """A ``Tracking.log``: record its metrics under the steps they describe (``split_record``)
        and give everything waiting the step logged, when it happened (a checkpoint of its version)."""
        rec = self.recorder()
        step = int(step)
        attempt = None
        trainer = TRAINED_FROM_KEY in data
        for described, metrics in split_record(step, data):
            if described == step:
                metrics = self._without_final_window(step, metrics, trainer=trainer)
                if not metrics:
                    continue
            logged = self._attempt(described, metrics)
            rec.log_step(described, metrics, attempt=logged)
            attempt = logged if described == step else attempt
        if attempt is None:  # all of it went to an earlier update: what waited is still this step's
            attempt = self._first_sight(step) or 0
        with self._lock:
            spans, self._spans = self._spans, deque()
            logprob, self._logprob = self._logprob, deque()
        for phase, start, end in spans:
            rec.log_span(step, phase, start, end, role=_ROLES.get(phase, "trainer"), attempt=attempt)
        for deltas, probs_diff_max in logprob:
            rec.log_logprob_delta(step, deltas, source=SOURCE, attempt=attempt)
            rec.log_step(step, {CROSSCHECK_KEY: probs_diff_max}, attempt=attempt)

    def _without_final_window(self, step: int, metrics: dict[str, Any], *, trainer: bool) -> dict[str, Any]:
        """``metrics`` less a second fully async rollouter window of ``step`` in this process.

        verl logs one window per weight sync, under the version it made; when the queue ends
        right after a sync to a version not due for validation, ``fit`` syncs that version once
        more and logs the window from the last sync to the end, which followed the last update
        and is no step's: it would replace the step's own. Counted in ``status()["skipped"]``.
        The trainer's record (``trainer``: it holds ``TRAINED_FROM_KEY``) repeats the rollout
        utilization of the window logged before it: no window of its own, but the final one's
        again after that window is dropped."""
        window = [key for key in metrics if is_rollouter_window_key(str(key))]
        if not window:
            return metrics
        with self._lock:
            if trainer:
                again = self._final_step == step
            else:
                again, self._window_step = self._window_step == step, step
                if again:
                    self._final_step = step
                    self.skipped["fully_async_final_window"] = self.skipped.get("fully_async_final_window", 0) + 1
        return {k: v for k, v in metrics.items() if k not in window} if again else metrics

    def log_trajectory(self, step: int, row: Mapping[str, Any]) -> None:
        self.log_trajectories(step, [row])

    def log_trajectories(self, step: int, rows: list[Mapping[str, Any]]) -> None:
        """Record a step's trajectories under the attempt the step is generated in. A process's
        first rows may come before it knows which steps earlier processes logged: they are held
        (at most ``MAX_PENDING_TRAJECTORIES`` rows) until the read ends, never waited for."""
        rec = self.recorder()
        step = int(step)
        attempt = self._first_sight(step)
        if attempt is None:
            with self._lock:
                held = self._prior is None
                if held:
                    self._held.append((step, rows))
                    self._held_rows += len(rows)
                    while self._held_rows > MAX_PENDING_TRAJECTORIES and len(self._held) > 1:
                        self._held_rows -= len(self._held.popleft()[1])
                        self.pending_dropped += 1
                arm, self._release_armed = held and not self._release_armed, self._release_armed or held
            if arm:  # once: the read's end releases every row held till then (one callback per row piled up)
                assert self._on_disk is not None
                self._on_disk.add_done_callback(self._release_held)
                atexit.register(self._release_at_exit, os.getpid())  # before the Recorder's own atexit closes it
            if held:
                return
            attempt = self._first_sight(step)
        rec.log_trajectories(step, rows, attempt=attempt or 0)

    def _release_at_exit(self, pid: int) -> None:
        """At interpreter exit, write the trajectories still held: a process that ends (its last
        samples logged, no flush) before the read of the steps on disk does would lose them. The
        read is waited for ``EXIT_WAIT`` seconds at most; one not ended by then logs them as
        attempt 0, a ``resume`` fault, as a step's record is. Never raises. Only in process
        ``pid``, which holds them: a child forked from it has neither the read nor a Recorder."""
        if os.getpid() != pid:
            return
        try:
            with self._lock:
                held, reading = bool(self._held), self._on_disk
            if held and reading is not None:
                self._settle_prior(EXIT_WAIT)
                self._release_held(reading)
        except Exception as exc:  # noqa: BLE001 - exit must go on
            self.fault("trajectories", exc)

    def _release_held(self, _: Future) -> None:
        """The steps on disk are read: record the trajectories held meanwhile."""
        try:
            with self._releasing:
                if self._settle_prior(0) is None:
                    return  # flush() gave up waiting: the read's end releases them
                with self._lock:
                    held, self._held, self._held_rows = self._held, deque(), 0
                for step, rows in held:
                    self.recorder().log_trajectories(step, rows, attempt=self._first_sight(step) or 0)
        except Exception as exc:  # noqa: BLE001 - on the reading thread: never raised
            self.fault("trajectories", exc)


_process: Hook | None = None
_disabled: Hook | None = None


def set_process_hook(hook: Hook) -> None:
    global _process
    _process = hook


def process_hook() -> Hook:
    """The hook installed in this process, or a disabled one (no run directory) where none is."""
    global _disabled
    if _process is not None:
        return _process
    if _disabled is None:
        _disabled = Hook(None)
    return _disabled
