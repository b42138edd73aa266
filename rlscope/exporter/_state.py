"""One run's running aggregates, updated from the segments added since the last refresh.

A scrape must cost the same at step 10 and at step 10,000, so nothing here rereads the
run: each table is read through a ``Cursor`` (only new segments), and what the metrics
need is kept as bounded state: the newest step's timers, per-source reward counts for
the last few steps plus whole-run totals, the latest sample of each GPU, the newest
log-prob histogram (its step's rows, and the newest step records, to tell a crashed
attempt's rows), and the last ``WINDOW_STEPS`` steps of metrics and trajectories that
the analyzers (tail share, MFU, recommended split) are run on when something new arrives.
An async run on separate pools' recommended split leaves out the steps ``rlscope diagnose``
leaves out, its pipeline fills (the run's first training step and each job's first), which
the newest training records and the job starts since them tell, not the window's first step.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from rlscope.advice.finding import fmt_count
from rlscope.advice.thresholds import (
    REWARD_COLLAPSE_MIN_SAMPLES,
    REWARD_ZERO_COLLAPSE,
    REWARD_ZERO_RISE_MIN,
    SPLIT_GAIN_MIN,
)
from rlscope.analyzers import anatomy, longtail, mfu, topology
from rlscope.analyzers._data import (
    TRAJECTORY_COLUMNS,
    RunFacts,
    RunFrames,
    imported_job_firsts,
    pipeline_fills,
    readings_of,
    training_records,
    unfinite_timers,
    wide_steps,
)
from rlscope.analyzers.mismatch import abs_quantile
from rlscope.collectors.verl_metrics import (
    SHARE_KEYS,
    SUBSTAGES,
    TRAINED_FROM_KEY,
    canonical,
    in_share_range,
    step_rows,
    training_rows,
)
from rlscope.errors import RLScopeError
from rlscope.exporter._labels import OTHER, LabelCap, sanitize_label
from rlscope.exporter._metrics import LOGPROB_ABS_QUANTILES, STALENESS_QUANTILES, logprob_limit
from rlscope.trace.reader import Cursor, RunReader
from rlscope.trace.schema import JOB_START_SKEW_SECONDS, LOGPROB_BIN_EDGES, STEPS, whole_histograms
from rlscope.trace.store import META_FILE, read_meta, require_directory

__all__ = [
    "GPU_STALE_SECONDS",
    "MAX_ERROR_CODES",
    "MAX_GPUS",
    "MAX_PHASES",
    "MAX_SOURCES",
    "MEDIAN_STEPS",
    "REWARD_GONE_STEPS",
    "REWARD_WINDOW_STEPS",
    "STALENESS_STEPS",
    "WINDOW_STEPS",
    "RunState",
    "Sample",
]

log = logging.getLogger("rlscope")

# Steps of metrics and trajectories kept for the analyzers; they judge the run by its last
# quarter, so tail share, MFU and the split describe the last 2 complete steps.
WINDOW_STEPS = 8
REWARD_WINDOW_STEPS = 5  # per source: the reward gauges cover its last 5 steps with samples
REWARD_GONE_STEPS = 20  # a source absent from the run's last 20 steps with trajectories has no gauges
STALENESS_STEPS = 2
MEDIAN_STEPS = 64
_RECORDS = 256  # the newest step records (log calls) kept to tell when the run went back
_LOGPROB_ROWS = 1024  # rows of the histogram's step kept apart (to leave out a crashed attempt's)
GPU_STALE_SECONDS = 300.0

# The stall rule as rules/ sets it (a test keeps them equal): a job that has logged no step is
# stalled after the first-step limit, or factor x the run's median step where longer, and the
# alert fires 5 minutes on. A job start more than that limit and twice the alert's "for" after
# the one before it begins a new stall clock (a relaunch after a stall): the job before had been
# stalled for longer than the alert takes to fire, evaluated each minute, so it paged.
STALL_FIRST_STEP_SECONDS = 3600.0
STALL_STEP_FACTOR = 4.0
STALL_FOR_SECONDS = 300.0
# the shortest gap RunState._relaunch_seconds gives (a run whose median step is short, or unknown)
_MIN_RELAUNCH_SECONDS = STALL_FIRST_STEP_SECONDS + 2 * STALL_FOR_SECONDS

# Label caps: beyond these, new values share the "__other__" label.
MAX_SOURCES = 50
MAX_ERROR_CODES = 20
MAX_PHASES = 64
MAX_GPUS = 4096

_TIMING = "timing_s/"
_IDLE_KEYS = {"fully_async/trainer/idle_ratio": "trainer", "fully_async/rollouter/idle_ratio": "rollouter"}
_SCORE_KEYS = {"critic/score/max": "max", "critic/score/min": "min"}
_STEP_COLUMNS = ["step", "attempt", "time", "key", "value"]
_REWARD_COLUMNS = ["data_source", "reward", "reward_status", "reward_error"]
_TRAJ_COLUMNS = list(dict.fromkeys([*TRAJECTORY_COLUMNS, *_REWARD_COLUMNS, "attempt"]))
_N_BINS = len(LOGPROB_BIN_EDGES) - 1

Sample = tuple[str, tuple[str, ...], float]
"""(metric name, label values after ``run``, value)."""


@dataclass
class _SourceRewards:
    """Reward counts of one source: per step for its last steps, summed before that.

    The baseline holds the source's earlier steps, as ``rlscope diagnose``'s earlier share
    counts them, so a source that scored mostly zeros all along has a baseline of mostly zeros.
    It is served, and a window judged against it, only once it holds ``REWARD_WINDOW_STEPS``
    steps with scores: a step or two (one solved batch of a hard source) say nothing of what is
    normal for a source.

    A window (``REWARD_WINDOW_STEPS`` steps in a row) is a collapse when it meets the alert's
    condition against the baseline of the steps before it: ``REWARD_ZERO_COLLAPSE`` zeros,
    ``REWARD_ZERO_RISE_MIN`` above that baseline, with ``REWARD_COLLAPSE_MIN_SAMPLES`` scored
    samples at least (a source scored once or twice a step has all-zero windows by chance). A step that scored (almost) only zeros and was
    in a window that was a collapse stays out of the baseline: a collapse that lasts must not
    become its own baseline and end the alert. Each step is judged when it leaves the window, on
    every window it was in, with their counts as they are then; so no step is held out on a
    window that partial counts, or a baseline still missing some of its steps, made look like
    a collapse.
    """

    # step -> [trajectories, scored, reward sum, zeros, errors]
    recent: dict[int, np.ndarray] = field(default_factory=dict)
    left: dict[int, tuple[np.ndarray, bool]] = field(default_factory=dict)  # the last steps that left: counts, held out
    base_scored: float = 0.0
    base_zeros: float = 0.0
    base_steps: int = 0  # steps with scores in the baseline

    def add(self, step: int, counts: np.ndarray) -> None:
        if step in self.recent:
            self.recent[step] += counts
        elif len(self.recent) < REWARD_WINDOW_STEPS or step > min(self.recent):
            self.recent[step] = counts.copy()
        elif step in self.left:  # more samples of a step that left the window
            old, held = self.left[step]
            if not held:
                self._to_baseline(counts, new_step=old[1] <= 0 < old[1] + counts[1])
            self.left[step] = (old + counts, held)
        else:  # older than the window: into the baseline, as diagnose counts it. A step among those
            # that left last, not one of them, never was in the window (or was forgotten): it is no
            # step of the baseline yet, so it is one now, and is kept with them, so that forget()
            # takes out of the baseline exactly what went in. An older one is no new step (it had
            # most likely scored before, and counting each late piece again would serve a baseline
            # of more steps than it has; one that had not is left uncounted, which only delays it)
            among = bool(self.left) and step > min(self.left)
            self._to_baseline(counts, new_step=among and counts[1] > 0)
            if among:
                self._keep_left(step, counts.copy(), held=False)
        while len(self.recent) > REWARD_WINDOW_STEPS:
            oldest = min(self.recent)
            self._leave(oldest, self.recent.pop(oldest))

    def _leave(self, step: int, counts: np.ndarray) -> None:
        """``step`` leaves the window: held out if it scored (almost) only zeros and a window it
        was in is a collapse, else into the baseline."""
        held = False
        if counts[1] > 0 and counts[3] / counts[1] >= REWARD_ZERO_COLLAPSE:
            before = sorted(self.left)
            seq = [*before, step, *sorted(self.recent)]
            at = len(before)
            for first in range(max(0, at - REWARD_WINDOW_STEPS + 1), at + 1):
                window = seq[first : first + REWARD_WINDOW_STEPS]
                if len(window) < REWARD_WINDOW_STEPS:
                    break
                # the baseline then: without the steps that left since the window began
                since = [self.left[s][0] for s in before[first:] if not self.left[s][1]]
                scored = self.base_scored - sum(c[1] for c in since)
                zeros = self.base_zeros - sum(c[3] for c in since)
                steps = self.base_steps - sum(1 for c in since if c[1] > 0)
                inside = np.sum([self._counts(s, step, counts) for s in window], axis=0)
                if _collapse(inside, scored, zeros, steps):
                    held = True
                    break
        if not held:
            self._to_baseline(counts, new_step=counts[1] > 0)
        self._keep_left(step, counts, held=held)

    def _counts(self, step: int, leaving: int, counts: np.ndarray) -> np.ndarray:
        """The counts of ``step``: ``counts`` for the one ``leaving``, else where it is kept."""
        if step == leaving:
            return counts
        return self.left[step][0] if step in self.left else self.recent[step]

    def _keep_left(self, step: int, counts: np.ndarray, *, held: bool) -> None:
        """Keep the steps that left the window last, as many as a window holding ``step`` reaches back."""
        self.left[step] = (counts, held)
        while len(self.left) >= REWARD_WINDOW_STEPS:
            del self.left[min(self.left)]

    def _to_baseline(self, counts: np.ndarray, *, new_step: bool) -> None:
        self.base_scored += counts[1]
        self.base_zeros += counts[3]
        self.base_steps += int(new_step)

    def forget(self, gone: set[int]) -> None:
        """Forget the steps of a crashed attempt that a resumed one went back before: they leave
        the window without going into the baseline, and those that had left it already (and went
        into the baseline) are taken out of it again, to be counted once, when redone. (A step
        of the crashed attempt that left longer ago stays in the baseline: its counts are gone.)"""
        for step in gone & self.recent.keys():
            del self.recent[step]
        for step in gone & self.left.keys():
            counts, held = self.left.pop(step)
            if not held:
                self.base_scored -= counts[1]
                self.base_zeros -= counts[3]
                self.base_steps -= int(counts[1] > 0)

    def gauges(self, since: int) -> dict[str, float]:
        """The source's gauges; none when it has had no samples since step ``since``, so that its
        series go stale and an alert on a source that stopped appearing resolves. (A source that
        skips a few steps keeps them: its alerts must not restart their ``for:`` each time.)"""
        if not self.recent or max(self.recent) < since:
            return {}
        n, scored, total, zeros, errors = np.sum(list(self.recent.values()), axis=0)
        out: dict[str, float] = {}
        if n > 0:
            out["rlscope_reward_error_ratio"] = errors / n
        if scored > 0:
            out["rlscope_reward_mean"] = total / scored
            out["rlscope_reward_zero_ratio"] = zeros / scored
        if self.base_steps >= REWARD_WINDOW_STEPS and self.base_scored > 0:
            out["rlscope_reward_zero_ratio_baseline"] = self.base_zeros / self.base_scored
        return out


def _collapse(window: np.ndarray, base_scored: float, base_zeros: float, base_steps: int) -> bool:
    """Whether a window's counts are a zero collapse against a baseline, as the alert judges it
    (with the baseline it is served with: ``REWARD_WINDOW_STEPS`` steps at least), from
    ``REWARD_COLLAPSE_MIN_SAMPLES`` scored samples in the window: fewer are all zeros by chance
    too often to hold steps out of the baseline on them (it would drift down)."""
    scored, zeros = window[1], window[3]
    if scored < REWARD_COLLAPSE_MIN_SAMPLES or base_scored <= 0 or base_steps < REWARD_WINDOW_STEPS:
        return False
    share = zeros / scored
    return share >= REWARD_ZERO_COLLAPSE and share - base_zeros / base_scored >= REWARD_ZERO_RISE_MIN


def run_label(run_dir: str | os.PathLike[str]) -> str:
    """The ``run`` label of a run directory: its last path component, sanitised. A local path
    is made absolute first, so that ``.`` or ``runs/exp1/..`` is named after the directory."""
    text = os.fspath(run_dir)
    if "://" not in text:  # a filesystem URI keeps its path as written
        text = os.path.abspath(text)
    text = text.rstrip("/")
    return sanitize_label(text.rsplit("/", 1)[-1] or text)


class RunState:
    """What the exporter knows about one run; ``refresh()`` reads only what is new.

    Not thread-safe: the collector serialises refreshes and reads of all its runs.
    """

    def __init__(self, run_dir: str | os.PathLike[str], run: str):
        self.run_dir = run_dir
        self.run = run
        self.reader: RunReader | None = None
        self.meta: dict[str, Any] = {}
        self.cursor = Cursor()
        self.up = False
        self.refresh_seconds = math.nan
        self.refresh_errors = 0
        self._warned: set[str] = set()
        # steps
        self._newest: tuple[float, int, int] | None = None  # (time, attempt, step) of the newest log
        self._phases: dict[str, float] = {}
        self._phases_of: tuple[int, int] | None = None  # (attempt, step) whose timers _phases holds
        self._phase_cap = LabelCap(MAX_PHASES)
        self._idle: dict[str, tuple[float, int, int, float]] = {}  # role -> (time, attempt, step, value)
        # per share of time (SHARE_KEYS), its last MEDIAN_STEPS steps read: (attempt, ok, value) of the
        # highest attempt, as diagnose's share_readings; and the one warned about: (step, attempt, value)
        self._shares: dict[str, dict[int, tuple[int, bool, float]]] = {}
        self._share_warned: dict[str, tuple[int, int, float]] = {}
        self._score: dict[str, tuple[float, int, int, float]] = {}  # max / min -> (time, attempt, step, value)
        self._scores: dict[int, dict[str, tuple[tuple[int, float], float]]] = {}  # step -> stat -> (order, value)
        self._durations: dict[int, float] = {}  # step -> timing_s/step
        self._log_times: dict[int, float] = {}  # step -> when it was logged
        self._timed_at: dict[int, float] = {}  # step -> when a record of it with its step timer was logged
        self._records: list[tuple[float, int, int]] = []  # (time, step, attempt) of the newest records
        self._max_step: int | None = None
        self._validated = -math.inf  # when the newest record that is no step (a validation alone) was logged
        self._job_starts: list[float] = []  # the first job starts logged since the last training step
        self._first_job = math.inf  # the earliest job start read: from then meta.json's time is no job's start
        self._meta_time = math.nan  # when meta.json was last written: every process's Recorder writes it
        # the pipeline fills (_fills): the newest _RECORDS training records (step, attempt, time), the
        # run's lowest trained step, and the job starts since the newest training record forgotten
        self._trainings = training_records(pd.DataFrame())
        self._first_trained: int | None = None
        self._forgotten = -math.inf  # when the newest training record no longer kept was logged
        self._fill_starts: list[float] = []
        self._window = STEPS.empty_table().select(_STEP_COLUMNS)
        # trajectories
        self._source_cap = LabelCap(MAX_SOURCES)
        self._code_cap = LabelCap(MAX_ERROR_CODES)
        self._rewards: dict[str, _SourceRewards] = {}
        self._reward_steps: list[int] = []  # the run's last REWARD_GONE_STEPS steps with trajectories
        self._sent: Counter[str] = Counter()
        self._errors: Counter[tuple[str, str]] = Counter()
        self._traj: dict[int, list[pa.Table]] = {}
        self._traj_attempt: dict[int, int] = {}  # step -> the attempt whose trajectories are held
        self._traj_gone: set[int] = set()  # steps whose held attempt a resume went back before
        self._traj_attempts = False  # a trajectory with an attempt above 0 was read: see _current_attempts
        # gpu, logprob
        self._gpu_cap = LabelCap(MAX_GPUS)
        self._gpus: dict[tuple[str, str], tuple[float, str, float]] = {}  # (host, gpu) -> (time, role, util)
        self._run_clock = -math.inf  # the newest time of any GPU sample or step record: the run's "now"
        self._logprob_step: int | None = None  # the histogram's: the step most recently logged
        self._logprob_rows: list[tuple[float, np.ndarray]] = []  # its rows: (time, counts)
        self._logprob_floor = -math.inf  # rows of the step logged before this are an earlier pass's
        self._logprob_newest = -math.inf  # the newest row in the histogram
        self._logprob_back = False  # it began by going back: a lower step than the histogram before it
        self._logprob_counts = np.zeros(_N_BINS)
        self._logprob_stale = False  # new rows or records since the counts were settled
        self._logprob_abs_sum = 0.0  # over every token read (the summary's _sum and _count)
        self._logprob_tokens = 0
        self._lag_sum = 0.0  # over every trajectory read with both versions
        self._lag_count = 0
        # derived by the analyzers
        self._dirty = False
        self._tail_share = math.nan
        self._mfu = math.nan
        self._recommended: dict[str, int] = {}
        self._staleness: list[tuple[str, float]] = []

    # -- reading ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the segments added since the last refresh and update the aggregates."""
        started = time.perf_counter()
        try:
            meta = self._meta_now() if self.reader is not None else None
            if self.reader is not None and (meta is None or meta.get("created") != self.meta.get("created")):
                errors = self.refresh_errors  # deleted, or another run in its place: start again,
                self.__init__(self.run_dir, self.run)  # type: ignore[misc]  # none of its values served
                self.refresh_errors = errors  # a counter: it never goes back
            elif meta is not None and meta != self.meta:  # a resumed job merged its config in: a new
                self.meta = meta  # split or precision; what the analyzers derive from it is redone
                self._dirty = True
            if self.reader is None:
                self.reader = RunReader(self.run_dir)
                self.meta = dict(self.reader.meta)
            self._meta_time = self._meta_written()
        except RLScopeError as exc:  # not (yet) a run directory: retried at the next refresh
            self._fail("open", exc)
        except Exception as exc:  # noqa: BLE001 - an unreadable run must not take /metrics down
            self._fail("open", exc)
        else:
            self.up = self._read_tables()
        if self._dirty:
            self._dirty = False
            self._staleness = self._staleness_quantiles()
            try:
                self._derive()
            except Exception as exc:  # noqa: BLE001 - an analyzer bug leaves the other metrics served
                self._fail("analyze", exc)
        self.refresh_seconds = time.perf_counter() - started

    def _read_tables(self) -> bool:
        """Read and ingest each table's new segments; whether all of them were read without error.

        Each table on its own: one that cannot be read or ingested (a bad segment, a value no
        aggregate expects) must not keep the others from being served. The refresh counts as
        one failed refresh however many tables failed."""
        assert self.reader is not None
        failed = False
        for table, columns, ingest in (
            ("steps", _STEP_COLUMNS, self._ingest_steps),
            ("trajectories", _TRAJ_COLUMNS, self._ingest_trajectories),
            ("gpu", ["time", "host", "gpu", "role", "util_pct"], self._ingest_gpu),
            ("logprob", ["step", "time", "abs_counts", "abs_mean", "abs_max", "n_tokens"], self._ingest_logprob),
            ("jobs", ["time"], self._ingest_jobs),
        ):
            try:
                ingest(self.reader.read_new(table, self.cursor, columns))
            except Exception as exc:  # noqa: BLE001 - one bad segment must not take /metrics down
                self._fail(f"read {table}", exc, count=not failed)
                failed = True
        self._drop_stale_gpus()
        trained = self._trained()
        self._job_starts = [t for t in self._job_starts if t > trained]
        if self._logprob_stale:
            self._logprob_stale = False
            self._settle_logprob()
        return not failed

    def _meta_now(self) -> dict[str, Any] | None:
        """meta.json as it is now, None when the run directory or its meta.json is gone. The
        directory still holds the run first read while ``created`` is the same: it stays through
        resumes, and a run created in its place has its own."""
        assert self.reader is not None
        try:
            require_directory(self.reader.location)
            return read_meta(self.reader.location)
        except RLScopeError:
            return None

    def _meta_written(self) -> float:
        """When meta.json was last written (unix seconds): every process's Recorder writes it as it
        opens (a resumed job merges its config in). Its ``created`` where the filesystem keeps
        no time."""
        assert self.reader is not None
        loc = self.reader.location
        try:
            mtime_ns = loc.fs.get_file_info(loc.join(META_FILE)).mtime_ns
        except Exception:  # noqa: BLE001 - a filesystem without the time: meta.json's own
            mtime_ns = None
        if mtime_ns is not None:
            return mtime_ns / 1e9
        created = self.meta.get("created")
        if not isinstance(created, (int, float)) or isinstance(created, bool):
            return math.nan
        try:
            return float(created)
        except OverflowError:  # JSON has no bound on integers
            return math.nan

    def _trained(self) -> float:
        """When the run logged its last training step (-inf before its first)."""
        return self._newest[0] if self._newest is not None else -math.inf

    def _progress(self) -> float:
        """When the run last showed progress: its last step, or a validation logged on its own
        after it (-inf before either)."""
        return max(self._trained(), self._validated)

    def _job_start(self, now: float) -> float:
        """When the job that has logged no step yet started: the first job start logged since the
        run's last training step, unless that job's own validation came after it. A later start (a
        driver that restarts again and again without a step) does not restart the stall clock,
        nor does the validation each restart may log (verl's ``val_before_train``): two starts
        without a training step between them are a job that failed once already. Unless it comes
        more than the relaunch gap (:meth:`_relaunch_seconds`) after the start before it: the
        jobs before had been stalled long enough to page, and this one (a relaunch) gets its own
        clock. A start later than ``now`` (the scrape) by more than ``JOB_START_SKEW_SECONDS`` is
        a wrong clock: it counts only once ``now`` gets there, as it would hold the stall and
        GPU-idle alerts off until then. NaN when there is none. A run without a jobs table (an
        older rlscope's) has meta.json's time instead, before its first step or validation only:
        every process's Recorder rewrites meta.json as it opens, so after a step it would restart
        the clock of a run whose actors crash-loop."""
        latest = now + JOB_START_SKEW_SECONDS
        if self._first_job > latest:
            return self._meta_time if self._progress() == -math.inf else math.nan
        starts = [t for t in self._job_starts if t <= latest]
        gap = self._relaunch_seconds()
        first = max((i for i in range(1, len(starts)) if starts[i] - starts[i - 1] > gap), default=0)
        starts = starts[first:]
        return starts[0] if len(starts) > 1 or (starts and starts[0] > self._validated) else math.nan

    def _relaunch_seconds(self) -> float:
        """How long after the job start before it a start begins a new stall clock: the stall limit
        of a job that has logged no step (the first-step limit, or the run's own where longer) and
        twice the alert's ``for``, so that the job before had been firing a while."""
        median = self._median_step_seconds()
        limit = (
            STALL_FIRST_STEP_SECONDS
            if math.isnan(median)
            else max(STALL_FIRST_STEP_SECONDS, STALL_STEP_FACTOR * median)
        )
        return limit + 2 * STALL_FOR_SECONDS

    def _fail(self, kind: str, exc: BaseException, *, count: bool = True) -> None:
        self.refresh_errors += int(count)
        if kind != "analyze":
            self.up = False
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(
                "exporter: run %s: %s failed (%s: %s); retrying at each scrape", self.run, kind, type(exc).__name__, exc
            )

    def _ingest_steps(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self._dirty = self._logprob_stale = True
        step = rows.column("step").to_numpy()
        attempt = pc.fill_null(rows.column("attempt"), 0).to_numpy()
        when = pc.fill_null(rows.column("time"), -math.inf).to_numpy().copy()
        when[~np.isfinite(when)] = -math.inf  # no time (null, NaN): before every other record, never the newest
        value = rows.column("value").to_numpy(zero_copy_only=False).astype(float)
        uniq = pc.unique(rows.column("key"))
        keys = uniq.to_pylist()  # as logged: the rules read their units, and a row without a key says nothing
        names = [canonical(k) if k is not None else "" for k in keys]
        key_index = pc.index_in(rows.column("key"), uniq).to_numpy(zero_copy_only=False)
        self._run_clock = max(self._run_clock, float(when.max()))
        # a record (one log call: step, attempt, time) that shows no training step by the step
        # anatomy's rule (validation metrics, validation, checkpoint or profiling timers alone) is none: verl's
        # val_before_train logs one before the first step (and on a resume), so it neither moves
        # the last step and its time nor makes an interval of the median; whatever its values say
        # (``step_rows``): a NaN timer logged is the trainer's progress all the same
        shows = step_rows(keys, value, key_index)
        timer = np.array([name == anatomy.STEP_TIMER for name in names], dtype=bool)[key_index]
        record = pd.DataFrame({"step": step, "attempt": attempt, "when": when, "trains": shows})
        trains = record.groupby(["step", "attempt", "when"], dropna=False)["trains"].transform("any").to_numpy()
        if not trains.all():
            self._validated = max(self._validated, float(when[~trains].max()))
        if trains.any():
            top = int(step[trains].max())
            self._max_step = top if self._max_step is None else max(self._max_step, top)

        order = np.lexsort((step, attempt, when))  # by time, then attempt, then step
        version = np.array([name == TRAINED_FROM_KEY for name in names], dtype=bool)[key_index]
        late = np.zeros(len(step), dtype=bool)
        if version.any():  # a fully async trainer's run
            holds = record.assign(v=version).groupby(["step", "attempt", "when"], dropna=False)["v"].transform("any")
            late = self._late(order, step, trains, holds.to_numpy(dtype=bool))
        current = trains & ~late
        if current.any():
            last = order[current[order]][-1]
            newest = (float(when[last]), int(attempt[last]), int(step[last]))
            if self._newest is None or newest > self._newest:
                if self._newest is None or newest[1] != self._newest[1]:  # another attempt: a resume
                    self._phases, self._phases_of = {}, None
                self._newest = newest
        cur_attempt, cur_step = self._newest[1:] if self._newest is not None else (None, None)

        stages = [_stage(name) for name in names]
        wanted = [i for i, name in enumerate(names) if stages[i] or name in _IDLE_KEYS or name in _SCORE_KEYS]
        # a stage timer other than the step timer matters only in the step served (or a late one's):
        # the rest of a long run's timers (a few dozen a step) are left out before the loop, not in it
        served = (step == cur_step) & (attempt == cur_attempt) if cur_step is not None else np.zeros(len(step), bool)
        other_stage = np.array([bool(stage) and stage != "step" for stage in stages], dtype=bool)[key_index]
        looped = np.isin(key_index, wanted) & ~(other_stage & ~late & ~served)
        for i in order[looped[order]]:  # a few rows per step
            name = names[key_index[i]]
            v = value[i]
            if name in _IDLE_KEYS and not in_share_range(v):  # NaN and inf too: no share of time, as diagnose reads it
                continue
            if not math.isfinite(v):
                continue
            stage = stages[key_index[i]]
            if stage:
                if v < 0 or (stage == "step" and v == 0):  # timed nothing, as diagnose reads it
                    continue
                if stage == "step":
                    self._durations[int(step[i])] = v
                if late[i] or (step[i] == cur_step and attempt[i] == cur_attempt):
                    source = (int(attempt[i]), int(step[i]))
                    if source != self._phases_of:  # the timers of a newer step than those served
                        self._phases, self._phases_of = {}, source
                    self._phases[self._phase_cap(stage)] = v
            else:  # the latest value of an idle ratio or a score bound
                if name in _IDLE_KEYS:
                    v = min(max(v, 0.0), 1.0)  # within rounding of [0, 1]
                latest, label = (
                    (self._idle, _IDLE_KEYS[name]) if name in _IDLE_KEYS else (self._score, _SCORE_KEYS[name])
                )
                mark = (float(when[i]), int(attempt[i]), int(step[i]), v)
                if label not in latest or mark[:3] >= latest[label][:3]:
                    latest[label] = mark
                if latest is self._score:  # and per step, the latest attempt's, for the flat streak
                    by_stat = self._scores.setdefault(int(step[i]), {})
                    rank = (int(attempt[i]), float(when[i]))
                    if label not in by_stat or rank >= by_stat[label][0]:
                        by_stat[label] = (rank, v)
        shares = [i for i, name in enumerate(names) if name in SHARE_KEYS]
        if shares:
            self._read_shares(names, order[np.isin(key_index[order], shares)], step, attempt, key_index, value)
        logged = pd.Series(when[current]).groupby(step[current]).max()
        for s, t in logged.items():
            self._log_times[int(s)] = max(float(t), self._log_times.get(int(s), -math.inf))
        timed = timer & (value > 0)
        for s, t in pd.Series(when[timed]).groupby(step[timed]).max().items():
            self._timed_at[int(s)] = max(float(t), self._timed_at.get(int(s), -math.inf))
        records = record[~late].drop_duplicates(["when", "step", "attempt"]).sort_values("when").tail(_RECORDS)
        new = zip(records["when"].tolist(), records["step"].tolist(), records["attempt"].tolist(), strict=True)
        self._records = sorted([*self._records, *((float(t), int(s), int(a)) for t, s, a in new)])[-_RECORDS:]
        trained = training_rows(keys, value, key_index)  # the rows that train, as diagnose places them
        self._keep_trainings(step[trained], attempt[trained], when[trained])
        gone = self._drop_superseded()
        if gone and not self._traj_attempts:  # trajectories without attempts: told by the step records
            self._forget_trajectories(gone)
        _keep_last(self._durations, MEDIAN_STEPS)
        _keep_last(self._log_times, MEDIAN_STEPS + 1)
        _keep_last(self._timed_at, MEDIAN_STEPS + 1)
        _keep_last(self._scores, MEDIAN_STEPS)

        window = pa.concat_tables([self._window, rows.select(_STEP_COLUMNS)])
        if gone:
            window = window.filter(pc.invert(pc.is_in(window.column("step"), pa.array(gone, pa.int64()))))
        steps = np.unique(window.column("step").to_numpy())
        self._window = window.filter(pc.greater_equal(window.column("step"), int(steps[-WINDOW_STEPS:][0])))

    def _keep_trainings(self, step: np.ndarray, attempt: np.ndarray, when: np.ndarray) -> None:
        """Keep what places the pipeline fills (:meth:`_fills`) from the rows just read that train
        (their ``step``, ``attempt`` and ``when``): the run's lowest trained step, and its newest
        ``_RECORDS`` training records as ``training_records`` gives them, each (step, attempt) with
        its first training row's time. Far more than the window's steps: each of those keeps its
        own record and the one logged before it, which tell whether a job began between them."""
        if step.size == 0:
            return
        new = pd.DataFrame({"step": step, "attempt": attempt, "time": when})
        low = int(new["step"].min())
        self._first_trained = low if self._first_trained is None else min(self._first_trained, low)
        records = pd.concat([self._trainings, new]) if len(self._trainings) else new
        records = records.groupby(["step", "attempt"], as_index=False)["time"].min().sort_values("time", kind="stable")
        if len(records) > _RECORDS:
            self._forgotten = max(self._forgotten, float(records["time"].iloc[-_RECORDS - 1]))
            records = records.iloc[-_RECORDS:]
            self._fill_starts = [t for t in self._fill_starts if t > self._forgotten]
        self._trainings = records

    def _fills(self) -> frozenset[int]:
        """The run's pipeline fills among the steps kept (``RunFrames.fills``): its first training
        step and each job's (``pipeline_fills``). Only job starts after the newest training record
        forgotten are kept: an earlier job's first record was logged before it, forgotten too."""
        named = imported_job_firsts(self.meta)  # an imported log's resumed jobs, where it gave no times
        return pipeline_fills(self._trainings, self._fill_starts, named, first=self._first_trained)

    def _read_shares(
        self,
        names: list[str],
        rows: np.ndarray,
        step: np.ndarray,
        attempt: np.ndarray,
        key_index: np.ndarray,
        value: np.ndarray,
    ) -> None:
        """Keep the share-of-time ``rows`` just read (indices, in the order logged) as diagnose
        reads them, and say once per share that one was logged outside [0, 1] (not served, not
        used). Only a value that counts is named: its step's highest attempt read so far that
        logged the share, with no value in [0, 1]. A crashed attempt's value read after its redo
        is no warning; one read before it is named with its attempt, and a redo in [0, 1] read
        later withdraws that warning: the next value outside [0, 1] is named instead."""
        new = readings_of(
            pd.DataFrame(
                {
                    "step": step[rows].astype(np.int64),
                    "key": [names[k] for k in key_index[rows]],
                    "attempt": attempt[rows].astype(np.int64),
                    "ok": in_share_range(value[rows]),
                    "value": value[rows],
                }
            )
        )
        touched: dict[str, set[int]] = {}
        for key, s, a, ok, v in zip(new["key"], new["step"], new["attempt"], new["ok"], new["value"], strict=True):
            held = self._shares.setdefault(key, {}).get(int(s))
            if held is not None and a < held[0]:  # a crashed attempt's, read after its redo
                continue
            if held is not None and a == held[0]:  # the same attempt logged it again: any value in range reads
                ok, v = ok or held[1], held[2] if math.isnan(v) else v
            self._shares[key][int(s)] = (int(a), bool(ok), float(v))
            touched.setdefault(key, set()).add(int(s))
        for key, steps in sorted(touched.items()):
            by_step = self._shares[key]
            warned = self._share_warned.get(key)
            if warned is not None and warned[0] in steps and by_step[warned[0]][1]:
                del self._share_warned[key]
                self._warned.discard(key)
                redo = by_step[warned[0]][0]
                log.warning(
                    "exporter: run %s: %s at step %d was %s %r warned about; the next value outside "
                    "[0, 1] is warned about",
                    self.run,
                    key,
                    warned[0],
                    f"logged in [0, 1] by attempt {redo}, which counts for the step, not attempt {warned[1]}'s"
                    if redo != warned[1]
                    else f"also logged in [0, 1] by attempt {redo}, which reads it, not its",
                    warned[2],
                )
            out = sorted(s for s in steps if not by_step[s][1])
            if out and key not in self._warned:
                self._warned.add(key)
                a, _, v = by_step[out[0]]
                self._share_warned[key] = (out[0], a, v)
                log.warning(
                    "exporter: run %s: %s logged %r at step %d (attempt %d), outside [0, 1]: read as not logged, and "
                    "so is any such value after it (should a later attempt redo the step, its value counts instead)",
                    self.run,
                    key,
                    v,
                    out[0],
                    a,
                )
            _keep_last(by_step, MEDIAN_STEPS)

    def _late(self, order: np.ndarray, step: np.ndarray, trains: np.ndarray, holds: np.ndarray) -> np.ndarray:
        """Which rows are of a fully async trainer's late training record: one holding
        ``fully_async/count/current_param_version``, filed under the update it describes
        (``verl_metrics.split_record``) below the step of the training record logged before it.
        verl logs it after the next sync's rollouter window, so it is no resume: it neither
        moves the last step back nor cuts the log-prob histogram, and its timers are the newest."""
        late = np.zeros(len(step), dtype=bool)
        plain = (trains & ~holds)[order]
        before = pd.Series(np.where(plain, step[order], np.nan)).ffill().shift(1)
        if self._newest is not None:
            before = before.fillna(self._newest[2])
        late[order] = holds[order] & trains[order] & (step[order] < before.to_numpy())
        return late

    def _forget_trajectories(self, gone: list[int]) -> None:
        """Forget the trajectories of a crashed attempt's steps that a resumed one went back before:
        those of the ``gone`` steps, and of any step above them (one the crashed attempt began and
        never logged). Done as the steps are read, before the trajectories of the same refresh, so
        the resumed attempt's own are kept; its reward windows, tail share and staleness are then
        its own steps', not the crashed attempt's. Only for runs whose trajectories carry no
        attempt (an older rlscope's, an importer's): the resumed attempt's rows are attempt 0
        again, and only the step records tell them apart (the first step redone keeps both)."""
        top = max(gone)
        drop = set(gone)
        drop |= {s for s in self._traj if s > top} | {s for s in self._reward_steps if s > top}
        for rewards in self._rewards.values():
            drop |= {s for s in (*rewards.recent, *rewards.left) if s > top}
        self._drop_steps(drop)
        for s in drop:  # redone under attempt 0 again: their rows are the resumed attempt's
            self._traj_attempt.pop(s, None)

    def _drop_steps(self, steps: set[int]) -> None:
        """Forget the trajectories held for ``steps``: per-step reward counts, tail, staleness, and
        which steps a source is looked for in (a redone step below them is then the newest)."""
        self._reward_steps = [s for s in self._reward_steps if s not in steps]
        for s in steps & self._traj.keys():
            del self._traj[s]
        for rewards in self._rewards.values():
            rewards.forget(steps)

    def _current_attempts(self, step: np.ndarray, attempt: np.ndarray) -> np.ndarray:
        """Which rows to hold: each step's rows of the highest attempt read for it.

        Rows of a higher attempt than the step's held ones (a resumed run generating it again)
        replace them, and forget the steps above it held under a lower attempt than theirs (the
        crashed attempt's, read before the resume went back; each is redone under a higher one,
        and a late row of it is ignored); rows of a lower attempt (a crashed process's late
        flush) are ignored; rows of the same attempt add."""
        top = pd.Series(attempt).groupby(step).max()
        if not self._traj_attempts and top.max() > 0:
            self._traj_attempts = True
        ignored: list[int] = []
        for s, a in zip(top.index.tolist(), top.tolist(), strict=True):  # steps in ascending order
            held = self._traj_attempt.get(s)
            gone = s in self._traj_gone
            if held is not None and (a < held or (a == held and gone)):
                ignored.append(s)
                continue
            if a > (0 if held is None else held):
                self._traj_gone.discard(s)
                above = {t for t, h in self._traj_attempt.items() if t > s and h < a and t not in self._traj_gone}
                # and those a window holds whose attempt is no longer known: older than every step
                # held, so the crashed attempt's too (a source seen once in many steps keeps them)
                windows = {*self._traj, *(t for r in self._rewards.values() for t in (*r.recent, *r.left))}
                self._drop_steps({s} | above | {t for t in windows - self._traj_attempt.keys() if t > s})
                self._traj_gone |= above
            self._traj_attempt[s] = a
        # the last steps held, and apart from them the last steps gone: those are the highest until
        # redone, and a redone step counted among them would be forgotten at once (then its next
        # rows would replace its first, as a higher attempt's)
        live = {s: a for s, a in self._traj_attempt.items() if s not in self._traj_gone}
        _keep_last(live, MEDIAN_STEPS)
        self._traj_gone = set(sorted(self._traj_gone)[-MEDIAN_STEPS:])
        self._traj_attempt = {s: a for s, a in self._traj_attempt.items() if s in live or s in self._traj_gone}
        keep = attempt == top.reindex(step).to_numpy()
        if ignored:
            keep &= ~np.isin(step, ignored)
        return keep

    def _ingest_trajectories(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        self._dirty = True
        df = rows.select(["step", *_REWARD_COLUMNS]).to_pandas()
        df["source"] = _capped(df["data_source"], self._source_cap)
        step = rows.column("step").to_numpy()
        keep = self._current_attempts(step, pc.fill_null(rows.column("attempt"), 0).to_numpy())
        error = df["reward_status"].fillna("ok").astype(str).str.lower().ne("ok")  # as rlscope diagnose reads it
        scored = ~error & df["reward"].notna()
        df = df.assign(
            n=1.0,
            scored=scored.astype(float),
            total=df["reward"].where(scored, 0.0).astype(float),
            zeros=(scored & df["reward"].eq(0.0)).astype(float),
            errors=error.astype(float),
        )
        # the counters count every trajectory read, a crashed attempt's too (they were sent); the
        # per-step windows hold each step's current attempt only
        for source, n in df.groupby("source").size().items():
            self._sent[source] += int(n)
        steps = np.unique(step)
        self._reward_steps = sorted(set(self._reward_steps) | {int(s) for s in steps})[-REWARD_GONE_STEPS:]
        cols = ["n", "scored", "total", "zeros", "errors"]
        summed = df[keep].groupby(["source", "step"])[cols].sum()
        for (source, s), counts in zip(summed.index, summed.to_numpy(dtype=float), strict=True):  # not iterrows:
            self._rewards.setdefault(source, _SourceRewards()).add(int(s), counts)  # a Series per step costs ms
        failed = df[error]
        codes = _capped(failed["reward_error"], self._code_cap)
        for (source, code), n in failed.groupby([failed["source"], codes]).size().items():
            self._errors[(source, code)] += int(n)
        lags = pc.drop_null(pc.subtract(rows.column("trainer_version"), rows.column("policy_version_start")))
        self._lag_sum += float(pc.sum(lags).as_py() or 0)
        self._lag_count += len(lags)

        rows = rows.filter(pa.array(keep))
        held = np.unique(rows.column("step").to_numpy())
        window = sorted(set(self._traj) | {int(s) for s in held})[-WINDOW_STEPS:]
        for s in set(self._traj) - set(window):
            del self._traj[s]
        for s in window:
            if s in held:
                part = rows.filter(pc.equal(rows.column("step"), s)).select(list(TRAJECTORY_COLUMNS))
                self._traj.setdefault(s, []).append(part)

    def _ingest_gpu(self, rows: pa.Table) -> None:
        if rows.num_rows == 0:
            return
        rows = rows.filter(pc.is_finite(rows.column("time"))).sort_by("time")  # a NaN time would sort last
        if rows.num_rows:
            self._run_clock = max(self._run_clock, float(rows.column("time")[-1].as_py()))
        latest = rows.group_by(["host", "gpu"], use_threads=False).aggregate(
            [("time", "last"), ("role", "last"), ("util_pct", "last")]
        )
        for host, gpu, when, role, util in zip(*(latest.column(i).to_pylist() for i in range(5)), strict=True):
            if util is None:
                continue
            gpu_label = "unknown" if gpu is None else str(gpu)
            if self._gpu_cap(f"{host}/{gpu_label}") == OTHER:  # beyond MAX_GPUS: one shared series
                key = (OTHER, OTHER)
            else:
                key = (sanitize_label(host), gpu_label)
            if key not in self._gpus or when >= self._gpus[key][0]:
                self._gpus[key] = (float(when), sanitize_label(role), float(util) / 100.0)

    def _drop_stale_gpus(self) -> None:
        """Forget GPUs whose latest reading is ``GPU_STALE_SECONDS`` older than the run's newest GPU
        sample or step record, whichever is newer: a GPU gone quiet, or a sampler that died while
        training goes on, must not hold an old reading up as the present (an idle GPU's alert)."""
        cut = self._run_clock - GPU_STALE_SECONDS
        for key in [k for k, (t, _, _) in self._gpus.items() if t < cut]:
            del self._gpus[key]

    def _ingest_jobs(self, rows: pa.Table) -> None:
        """Keep the job starts logged since the run's last training step (``_RECORDS`` of them: a
        job restarting more often without a step keeps those that tell where a new stall clock
        begins, see :func:`_thin_starts`). A start with no time (null, NaN) cannot be placed: a jobs table of none but those is no jobs table
        (nor is one of none but starts in the future, until they are served: see :meth:`_job_start`).
        Apart from those, the starts that place each job's first step: :meth:`_keep_fill_starts`."""
        if rows.num_rows == 0:
            return
        when = pc.fill_null(rows.column("time"), math.nan).to_numpy(zero_copy_only=False).astype(float)
        when = when[np.isfinite(when)]
        if when.size == 0:
            return
        self._first_job = min(self._first_job, float(when.min()))
        self._keep_fill_starts(when)
        later = when[when > self._trained()]
        starts = sorted([*self._job_starts, *later.tolist()])
        if len(starts) > _RECORDS:
            starts = _thin_starts(starts, _MIN_RELAUNCH_SECONDS)[-_RECORDS:]
        self._job_starts = starts

    def _keep_fill_starts(self, when: np.ndarray) -> None:
        """Add job starts (finite times) to those that place each job's first training step
        (:meth:`_fills`): those after the newest training record forgotten, and of a crash loop's
        many starts with no training record between them the last alone (beyond ``_RECORDS``)."""
        new = when[when > self._forgotten]
        if new.size == 0:
            return
        self._dirty = True  # a start read after its job's first step takes that step out of the split
        starts = sorted([*self._fill_starts, *new.tolist()])
        if len(starts) > _RECORDS:
            times = np.sort(self._trainings["time"].to_numpy(dtype=float))
            gap = np.searchsorted(times, starts, side="left")  # the training records logged before each
            last_in_gap = np.append(gap[1:] != gap[:-1], True)
            starts = [t for t, last in zip(starts, last_in_gap, strict=True) if last]
        self._fill_starts = starts

    def _ingest_logprob(self, rows: pa.Table) -> None:
        rows, broken = whole_histograms(rows)  # a broken row must not move the step (and reset the sum)
        if broken:
            what = fmt_count(broken, "log-prob histogram row")
            log.warning("%s: %s without one count per bin; left out", self.run_dir, what)
        if rows.num_rows == 0:
            return
        self._logprob_stale = True
        # the summary's _sum and _count run over the tokens read, as Prometheus counts them: each
        # row's mean |delta| times its tokens (a row of no tokens has no mean). A row's tokens count
        # its infinite deltas, its mean (and max) leave them out. With no finite |delta| of 100 or
        # more (max below it), the last bin holds only infinite ones: its tokens leave both sums.
        # Otherwise the two cannot be told apart there, and the row stays out of both
        columns = ("abs_mean", "abs_max", "n_tokens", "abs_counts")
        for mean, top, n, counts in zip(*(rows.column(c).to_pylist() for c in columns), strict=True):
            if counts[-1] and (top or 0.0) >= LOGPROB_BIN_EDGES[-2]:
                continue
            finite = max((n or 0) - counts[-1], 0)
            self._logprob_abs_sum += (mean or 0.0) * finite
            self._logprob_tokens += finite
        # the quantiles are of the step most recently logged, its rows in the order they were logged
        # (not read): a row of another step logged later begins a new histogram, one logged before
        # the newest row is a late flush (another writer's) and left out of it. A row with no time
        # (null, NaN) cannot be placed: it is taken as logged at the run's newest time so far
        when = pc.fill_null(rows.column("time"), math.nan).to_numpy(zero_copy_only=False).astype(float)
        order = np.argsort(np.where(np.isfinite(when), when, -math.inf), kind="stable")
        steps, counts = rows.column("step").to_numpy()[order], rows.column("abs_counts").to_pylist()
        for step, t, i in zip(steps.tolist(), when[order].tolist(), order.tolist(), strict=True):
            row = counts[i]
            timeless = not math.isfinite(t)
            if timeless:
                t = max(self._logprob_newest, self._run_clock)
            # a row with no time begins a new histogram only for a higher step: one of an older
            # step (a late row) must not take the histogram from the step being logged
            if self._logprob_step is None:
                later = True
            else:
                later = step > self._logprob_step if timeless else t > self._logprob_newest
            if self._logprob_step is None or (step != self._logprob_step and later):
                self._logprob_back = self._logprob_step is not None and step < self._logprob_step
                self._logprob_step, self._logprob_rows = step, []
                self._logprob_floor = self._logprob_newest
            if step == self._logprob_step and (timeless or t > self._logprob_floor):
                self._logprob_rows.append((t, np.asarray(row, dtype=float)))
                self._logprob_newest = max(self._logprob_newest, t)
        if len(self._logprob_rows) > _LOGPROB_ROWS:  # a step logged for ever: its oldest rows as one
            self._logprob_rows.sort(key=lambda r: r[0])
            cut = len(self._logprob_rows) - _LOGPROB_ROWS // 2
            old, self._logprob_rows = self._logprob_rows[:cut], self._logprob_rows[cut:]
            self._logprob_rows.insert(0, (old[-1][0], np.sum([c for _, c in old], axis=0)))

    def _settle_logprob(self) -> None:
        """The histogram's counts: its rows logged since the run last went back before it.

        The steps table tells when: a record logged after the histogram began, of a lower step
        (a resume from an earlier checkpoint) or of its step with a higher attempt than its rows
        had (the attempt of the step's records just before them, no other step's between; else
        that of the run's newest record then, unless the histogram itself began by going back or
        its step was logged before another step's, by an attempt that crashed: then the first
        record of the step after its rows tells). Rows logged before that were the crashed
        attempt's: left out."""
        if not self._logprob_rows:
            self._logprob_counts = np.zeros(_N_BINS)
            return
        step = self._logprob_step
        began = min(t for t, _ in self._logprob_rows)
        before = [r for r in self._records if r[0] < began]
        # the step's records since the newest one of another step: a record of the step logged
        # before a lower step's was a crashed attempt's (it says nothing of the rows' attempt)
        other = max((i for i, (_, s, _) in enumerate(before) if s != step), default=-1)
        own = [a for _, s, a in before[other + 1 :]]
        redone = any(s == step for _, s, _ in before[: other + 1])
        attempt = own[-1] if own else None if self._logprob_back or redone or not before else before[-1][2]
        cut = -math.inf
        for t, s, a in self._records:
            if t <= began:
                continue
            if s < step:  # the run went back below the histogram's step
                cut, attempt = t, None
            elif s == step:
                if attempt is not None and a > attempt:  # its step again, by a later attempt
                    cut = t
                attempt = a if attempt is None else max(attempt, a)
        self._logprob_counts = np.sum([c for t, c in self._logprob_rows if t >= cut] or [np.zeros(_N_BINS)], axis=0)

    def _drop_superseded(self) -> list[int]:
        """Forget the steps of a crashed attempt that a resumed one went back before; which ones.

        A step's timer (``timing_s/step``, which the trainer logs once a step, as it ends) logged
        later than a higher step's means the run resumed from a checkpoint below that one: the
        steps above it timed before are the crashed attempt's, to be redone. Other records of a
        lower step logged late (another process's metrics tagged with the step it saw) are no
        resume. A run without step timers is judged on its training records' times alone.
        Kept by step number, they would hold the per-step windows (the last 64 steps' reward
        ranges, durations and log times, the analyzers' last steps) until the resumed attempt
        passed them, and a resume that went back further than a window would leave it none of
        its own steps. Judged on logging time, not attempt: verl numbers attempts per step (a
        step beyond the crashed attempt's last is attempt 0 again)."""
        logged = self._timed_at or self._log_times
        steps = sorted(logged)
        if len(steps) < 2:
            return []
        times = np.array([logged[s] for s in steps])
        before = np.maximum.accumulate(times)[:-1]  # the newest timer of any lower step
        gone = [s for s, t, b in zip(steps[1:], times[1:], before, strict=True) if math.isfinite(t) and b > t]
        for s in gone:
            for by_step in (self._log_times, self._timed_at, self._durations, self._scores):
                by_step.pop(s, None)
        if gone:
            self._max_step = max(self._log_times)
        return gone

    # -- analyzers on the window ---------------------------------------------------------

    def _derive(self) -> None:
        """Tail share, MFU and the recommended split from the analyzers, on the last steps only."""
        window = self._window
        frames = RunFrames(
            wide_steps(window),
            self._window_trajectories(),
            self.meta,
            unfinite=unfinite_timers(window),
            fills=self._fills(),
        )
        anat = anatomy.analyze(frames)
        tail = longtail.analyze(frames)
        self._tail_share = tail.tail_share
        self._warn_clock_times(tail.clock_times)
        self._mfu = mfu.analyze(frames, anat, tail).mfu
        topo = topology.analyze(frames, anat, tail)
        self._recommended = {}
        # as diagnose's split-imbalanced finding: only for pools of known sizes (meta.json's split,
        # adding up to the GPUs), against which a move is weighed, and it pays only from
        # SPLIT_GAIN_MIN shorter steps; else the split there is
        pools = topo.n_rollout is not None and topo.n_train is not None
        if topo.model is not None and pools and topo.current != "colocated" and topo.current in topo.what_if.index:
            best = topo.what_if.loc[topo.current]
            split = int(best["n_rollout"]), int(best["n_train"])
            if not 1 - best["step_s"] / topo.step_now_s >= SPLIT_GAIN_MIN:
                split = topo.n_rollout, topo.n_train
            self._recommended = {"rollout": split[0], "train": split[1]}

    def _warn_clock_times(self, clock_times: dict[str, tuple[tuple[int, float], ...]]) -> None:
        """Say once per column that trajectory times were logged as a clock's (``time.time()``), as
        diagnose and the dashboard do: the tail share served leaves those steps out."""
        for column, logged in sorted(clock_times.items()):
            if logged and f"clock:{column}" not in self._warned:
                self._warned.add(f"clock:{column}")
                step, value = logged[0]
                log.warning(
                    "exporter: run %s: trajectories' %s was logged as a clock's time (time.time()) at step %d "
                    "(%.0f s): those steps' finish times are read as not measured, and the tail share leaves them "
                    "out; log seconds since the step's rollout began",
                    self.run,
                    column,
                    step,
                    value,
                )

    def _window_trajectories(self) -> pa.Table | None:
        """Trajectories of complete steps: the trainer logged the step, or a later step began."""
        newest = max(self._traj, default=None)
        done = [
            part
            for s, parts in self._traj.items()
            if s < newest or (self._max_step is not None and s <= self._max_step)
            for part in parts
        ]
        return pa.concat_tables(done) if done else None

    def _staleness_quantiles(self) -> list[tuple[str, float]]:
        """(quantile label, policy versions) over the trajectories of the last steps."""
        parts = [p for s in sorted(self._traj)[-STALENESS_STEPS:] for p in self._traj[s]]
        if not parts:
            return []
        t = pa.concat_tables(parts)
        lags = pc.drop_null(pc.subtract(t.column("trainer_version"), t.column("policy_version_start")))
        if len(lags) == 0:
            return []
        values = lags.to_numpy().astype(float)
        return [(label, float(np.quantile(values, q, method="inverted_cdf"))) for label, q in STALENESS_QUANTILES]

    # -- exposition ------------------------------------------------------------------------

    def samples(self) -> list[Sample]:
        """Every sample this run exports now (NaN and absent values left out)."""
        out: list[Sample] = [("rlscope_run_up", (), 1.0 if self.up else 0.0)]
        out.append(("rlscope_exporter_refresh_errors_total", (), float(self.refresh_errors)))
        if not math.isnan(self.refresh_seconds):
            out.append(("rlscope_exporter_refresh_seconds", (), self.refresh_seconds))
        if self.reader is None:
            return out
        if self._newest is not None:
            when, _, step = self._newest
            out.append(("rlscope_last_step", (), float(step)))
            if math.isfinite(when):
                out.append(("rlscope_last_step_timestamp_seconds", (), when))
        if math.isfinite(self._validated) and (self._newest is None or self._validated > self._newest[0]):
            out.append(("rlscope_validation_timestamp_seconds", (), self._validated))
        started = self._job_start(time.time())
        if math.isfinite(started):
            out.append(("rlscope_job_start_timestamp_seconds", (), started))
        median = self._median_step_seconds()
        if not math.isnan(median):
            out.append(("rlscope_step_median_seconds", (), median))
        out += [("rlscope_step_seconds", (phase,), v) for phase, v in sorted(self._phases.items())]
        out += [("rlscope_idle_ratio", (role,), mark[3]) for role, mark in sorted(self._idle.items())]
        out += [("rlscope_reward_score", (stat,), mark[3]) for stat, mark in sorted(self._score.items())]
        if self._scores:
            out.append(("rlscope_reward_flat_steps", (), float(self._flat_steps())))
        since = self._reward_steps[0] if self._reward_steps else 0
        for source, rewards in sorted(self._rewards.items()):
            out += [(name, (source,), v) for name, v in rewards.gauges(since).items()]
            out.append(("rlscope_reward_trajectories_total", (source,), float(self._sent[source])))
        out += [("rlscope_reward_errors_total", key, float(n)) for key, n in sorted(self._errors.items())]
        for name, value in (("rlscope_tail_share", self._tail_share), ("rlscope_mfu_ratio", self._mfu)):
            if not math.isnan(value):
                out.append((name, (), float(value)))
        out += [("rlscope_staleness", (label,), v) for label, v in self._staleness]
        if self._staleness:
            out.append(("rlscope_staleness_sum", (), self._lag_sum))
            out.append(("rlscope_staleness_count", (), float(self._lag_count)))
        if self._logprob_counts.sum() > 0:
            out += [
                ("rlscope_logprob_abs_delta", (label,), abs_quantile(self._logprob_counts, q))
                for label, q in LOGPROB_ABS_QUANTILES
            ]
            out.append(("rlscope_logprob_abs_delta_sum", (), self._logprob_abs_sum))
            out.append(("rlscope_logprob_abs_delta_count", (), float(self._logprob_tokens)))
            precision, model_type, limit = logprob_limit(self.meta)
            labels = (sanitize_label(precision), sanitize_label(model_type))
            out.append(("rlscope_logprob_abs_delta_threshold", labels, limit))
        for (host, gpu), (_, role, util) in sorted(self._gpus.items()):
            out.append(("rlscope_gpu_utilization_ratio", (host, gpu, role), util))
        facts = RunFacts.from_meta(self.meta)
        for role, n in (("rollout", facts.rollout_gpus), ("train", facts.train_gpus)):
            if n:
                out.append(("rlscope_configured_gpus", (role,), float(n)))
        out += [("rlscope_recommended_gpus", (role,), float(n)) for role, n in self._recommended.items()]
        return out

    def _flat_steps(self) -> int:
        """How many of the last steps up to the newest one, in a row, logged a reward range with
        critic/score max equal to min (at most the ``MEDIAN_STEPS`` steps kept)."""
        newest = self._newest[2] if self._newest is not None else max(self._scores)
        n = 0
        for s in sorted((s for s in self._scores if s <= newest), reverse=True):
            stats = self._scores[s]
            if not ("max" in stats and "min" in stats and stats["max"][1] == stats["min"][1]):
                break
            n += 1
        return n

    def _median_step_seconds(self) -> float:
        if self._durations:
            return float(np.median(list(self._durations.values())))
        times = [self._log_times[s] for s in sorted(self._log_times)]
        gaps = np.diff([t for t in times if math.isfinite(t)])
        return float(np.median(gaps)) if gaps.size else math.nan


def _stage(name: str) -> str | None:
    """The verl stage a canonical step key times, as the step anatomy reads it: ``timing_s/<stage>``
    exactly, not a stage nested in another one (:data:`SUBSTAGES`, e.g. ``generate_sequences``
    inside ``gen``) and not a statistic under a stage (``timing_s/agent_loop/slowest/response_length``
    is a token count). None for any other key."""
    if not name.startswith(_TIMING):
        return None
    stage = name[len(_TIMING) :]
    if not stage or "/" in stage or stage in SUBSTAGES:
        return None
    return stage


def _capped(raw: pd.Series, cap: LabelCap) -> pd.Series:
    """Labels for a column of raw values, each distinct value sanitised and capped once."""
    raw = raw.astype(object).where(raw.notna(), "")
    return raw.map({value: cap(value) for value in raw.unique()})


def _thin_starts(starts: list[float], gap: float) -> list[float]:
    """``starts`` (sorted) without each one whose neighbours left are ``gap`` apart or less: no
    relaunch gap is shorter, so the same starts begin a new stall clock without it, and the first
    and last of each clock's starts are kept."""
    kept = starts[:1]
    for i in range(1, len(starts) - 1):
        if starts[i + 1] - kept[-1] > gap:
            kept.append(starts[i])
    return kept + starts[1:][-1:]


def _keep_last(by_step: dict[int, Any], n: int) -> None:
    """Drop all but the ``n`` highest steps (in place)."""
    if len(by_step) > n:
        for s in sorted(by_step)[:-n]:
            del by_step[s]
