"""Simulated RL post-training runs whose answers are known, built on DOMAIN's "8B reasoning" ledger.

Analyzers are judged against runs where the truth is written down: ``simulate`` writes a
complete run directory (steps, spans, trajectories, gpu, logprob and ``meta.json``) and
records in ``meta["ground_truth"]`` what an analyzer should find: throughput and tail time,
forward and training time, the balanced rollout:train split, the injected faults.

The timings are not drawn from a table: they come out of a small model of the machinery.
Rollout engines run continuous batching (FIFO admission into as many slots as the KV pool
holds; every running sequence gains one token per decode step, and a step takes longer the
more KV it reads), so the long tail appears because a few long answers keep running after
the rest have finished. Forward and training time follow FLOPs (2N per token
per logprob pass, 6N for training) at a fixed MFU. The topologies (colocated, separated
sync, one-step overlap, async streaming) only change which GPUs do what and when. Every
random draw comes from a ``numpy`` Generator seeded by ``seed``; there is no wall clock,
so a seed gives the same tables every time. ``docs/simulator.md`` states the conventions.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa

from rlscope.errors import RunDirError, UsageError
from rlscope.trace.recorder import logprob_histogram_row
from rlscope.trace.schema import LOGPROB
from rlscope.trace.store import write_meta, write_segment

__all__ = [
    "EPOCH",
    "SCENARIOS",
    "TOPOLOGIES",
    "Agent",
    "Engine",
    "Lengths",
    "Model",
    "RewardFault",
    "RewardSource",
    "Scenario",
    "balanced_split",
    "get_scenario",
    "simulate",
    "t90",
]

EPOCH = 1.75e9
"""Unix time at which every simulated run starts, so that runs are byte-for-byte repeatable."""

TOPOLOGIES = ("colocated", "separated", "one_step_overlap", "async")

_GPUS_PER_HOST = 8
_H100_PEAK_FLOPS = 989e12  # dense bf16 per GPU
_H100_MEM_BYTES = 85_520_809_984  # NVML memory.total of an 80 GB H100 SXM
_GPU_SAMPLE_S = 2.0
_LOGPROB_SAMPLE = 65_536  # tokens per step whose trainer-vs-rollout delta is drawn
_STALE_DRIFT = 3e-3  # extra |delta| per policy version of staleness (weights moved on)
_DELTA_SCALE = {"bf16": 1e-3, "fp8": 1e-2}  # typical |log p_trainer - log p_rollout| by rollout precision


# -- scenario description ------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """Model size: FLOPs use ``active_params``; training memory uses ``total_params``."""

    name: str
    total_params: float
    active_params: float

    @property
    def moe(self) -> bool:
        return self.active_params < self.total_params


@dataclass(frozen=True)
class Lengths:
    """Response lengths: a capped log-normal whose mean is ``mean`` at policy version 0.

    ``sigma`` (spread of log-length) is the tail weight; ``group_sigma`` of it is shared by
    the G samples of one prompt (hard prompts give long answers to all of them). The mean
    grows by ``growth`` per policy version, as answers lengthen during training.
    """

    mean: float
    cap: int
    sigma: float = 1.0
    group_sigma: float = 0.3
    growth: float = 0.0
    prompt_mean: float = 512.0

    def mean_at(self, version: int) -> float:
        return min(self.mean * (1.0 + self.growth) ** version, 0.5 * self.cap)


@dataclass(frozen=True)
class Engine:
    """One rollout engine (replica): its GPUs, KV pool and decode-step cost.

    A decode step reads the weights once and every running sequence's KV cache, so with
    ``b`` sequences of mean context ``c`` it takes ``step_base_s + step_per_seq_s * b * c /
    ref_context``. The engine runs as many sequences as its KV pool holds at ``c``. Longer
    answers therefore cost twice: fewer sequences fit, and each step reads more KV.
    """

    gpus: int
    kv_tokens: int
    step_base_s: float
    step_per_seq_s: float  # at ref_context tokens of context
    ref_context: float
    max_seqs: int = 256

    def slots(self, context: float) -> int:
        return max(1, min(self.max_seqs, int(self.kv_tokens // max(context, 1.0))))

    def step_s(self, running: int, context: float) -> float:
        return self.step_base_s + self.step_per_seq_s * running * context / self.ref_context


@dataclass(frozen=True)
class Agent:
    """Multi-turn trajectories: model turns separated by environment (tool) waits."""

    turns_mean: float
    turns_max: int
    tool_median_s: float
    tool_sigma: float = 0.8
    long_wait_p: float = 0.0  # share of tool calls that are slow (test suites, builds)
    long_wait_s: tuple[float, float] = (30.0, 120.0)
    obs_tokens: int = 250  # environment tokens per tool result (prefill only)


@dataclass(frozen=True)
class RewardSource:
    """A data source and the reward function or service that scores it."""

    name: str
    share: float  # share of prompts
    accuracy: float  # mean reward at step 1 (rewards are 0 or 1)
    gain: float = 0.0  # accuracy gained per step
    latency_s: float = 0.003  # median scoring time per trajectory


@dataclass(frozen=True)
class RewardFault:
    """A reward service that fails for part of the run: errors, not zeros."""

    source: str
    steps: tuple[int, int]  # first and last failing step, inclusive
    rate: float  # share of that source's trajectories that get an error
    codes: tuple[tuple[str, float], ...] = (("TIMEOUT", 0.6), ("HTTP_503", 0.4))
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Scenario:
    """Everything a simulated run needs; ``SCENARIOS`` holds the shipped ones.

    Build your own to simulate another setup; an inconsistent one (a split that does not add
    up, a fault on an unknown source, ...) raises ``ValueError`` when constructed.
    """

    name: str
    summary: str
    topology: str
    model: Model
    n_gpus: int
    split: tuple[int, int]  # (rollout, train) GPUs; colocated: (n, n)
    batch_size: int
    group_size: int
    lengths: Lengths
    engine: Engine
    sources: tuple[RewardSource, ...]
    default_steps: int
    precision: str = "bf16"
    agent: Agent | None = None
    engine_weights: tuple[float, ...] = ()  # set: each prompt's samples stick to one engine
    faults: tuple[RewardFault, ...] = ()
    moe_flip_rate: float = 0.0  # tokens whose expert routing differs between trainer and rollout
    staleness_threshold: float = 0.5  # async: groups in flight <= B * (1 + threshold)
    weight_sync_s: float = 1.5
    mfu_forward: float = 0.5
    mfu_train: float = 0.4
    reward_concurrency: int = 64
    gpu_type: str = "H100-SXM-80GB"
    peak_flops: float = _H100_PEAK_FLOPS
    gpu_mem_bytes: int = _H100_MEM_BYTES

    def __post_init__(self) -> None:
        problems = []
        if self.topology not in TOPOLOGIES:
            problems.append(f"topology must be one of {', '.join(TOPOLOGIES)}")
        colocated = self.topology == "colocated"
        if colocated and self.split != (self.n_gpus, self.n_gpus):
            problems.append("a colocated split is (n_gpus, n_gpus)")
        if not colocated and (sum(self.split) != self.n_gpus or min(self.split) < 1):
            problems.append("split must give both sides GPUs and add up to n_gpus")
        if self.split[0] % self.engine.gpus:
            problems.append("rollout GPUs must be a multiple of the engine's GPUs")
        if self.engine_weights and len(self.engine_weights) != self.split[0] // self.engine.gpus:
            problems.append("engine_weights needs one weight per engine")
        if self.precision not in _DELTA_SCALE:
            problems.append(f"precision must be one of {', '.join(_DELTA_SCALE)}")
        names = [s.name for s in self.sources]
        if any(f.source not in names for f in self.faults):
            problems.append("every fault must name one of the sources")
        if problems:
            raise ValueError(f"scenario {self.name!r}: " + "; ".join(problems))

    @property
    def rollout_gpus(self) -> int:
        return self.split[0]

    @property
    def train_gpus(self) -> int:
        return self.split[1]

    @property
    def n_engines(self) -> int:
        return self.rollout_gpus // self.engine.gpus


# Decode-step cost of an 8B model on one H100 (TP 1). The KV pool holds 1.4 waves of the
# ledger's 8192 trajectories on 64 engines (91 sequences of 8.7K tokens), and the two
# step-cost numbers were calibrated once so that the ledger's batch finishes 90% of its
# trajectories at ~406 s and the last at ~602 s; see docs/simulator.md.
_ENGINE_8B = Engine(gpus=1, kv_tokens=796_000, step_base_s=0.0066, step_per_seq_s=0.000287, ref_context=8704)

_MATH_8B = (
    RewardSource("deepscaler", 0.5, 0.45, 0.004),
    RewardSource("openr1-math", 0.35, 0.35, 0.004),
    RewardSource("aime-hard", 0.15, 0.08, 0.001),
)


def _scenarios() -> dict[str, Scenario]:
    m8 = Model("reasoning-8b", 8.0e9, 8.0e9)
    ledger = {
        "model": m8,
        "n_gpus": 64,
        "batch_size": 512,
        "group_size": 16,
        "lengths": Lengths(mean=8192, cap=32768, sigma=1.0, group_sigma=0.3),
        "engine": _ENGINE_8B,
        "sources": _MATH_8B,
    }
    items = [
        Scenario(
            name="healthy-colocated",
            summary="small dense model on 8 GPUs, colocated, modest tail, no faults (the baseline)",
            topology="colocated",
            model=Model("dense-1.5b", 1.5e9, 1.5e9),
            n_gpus=8,
            split=(8, 8),
            batch_size=128,
            group_size=8,
            lengths=Lengths(mean=1200, cap=4096, sigma=0.4, group_sigma=0.2, growth=0.005, prompt_mean=300),
            engine=Engine(
                gpus=1, kv_tokens=900_000, step_base_s=0.004, step_per_seq_s=0.00006, ref_context=1500, max_seqs=64
            ),
            sources=(RewardSource("gsm8k", 0.6, 0.55, 0.008), RewardSource("math-lighteval", 0.4, 0.3, 0.006)),
            default_steps=30,
            weight_sync_s=0.6,
        ),
        Scenario(
            name="longtail-8b",
            summary="DOMAIN's 8B reasoning ledger, colocated on 64 H100: gen 602 s (tail 196), fwd 72, train 136",
            topology="colocated",
            split=(64, 64),
            default_steps=10,
            **ledger,
        ),
        Scenario(
            name="separated-8b",
            summary="the same 8B ledger on separated sync pools 46:18: each side idles while the other works",
            topology="separated",
            split=(46, 18),
            default_steps=4,
            weight_sync_s=3.0,
            **ledger,
        ),
        Scenario(
            name="async-drift",
            summary="async streaming 21:11 (the 8B ledger on 32 GPUs) while answers lengthen: the split drifts",
            topology="async",
            model=m8,
            n_gpus=32,
            split=(21, 11),
            batch_size=256,
            group_size=16,
            lengths=Lengths(mean=4000, cap=32768, sigma=1.0, group_sigma=0.3, growth=0.05),
            engine=_ENGINE_8B,
            sources=_MATH_8B,
            default_steps=20,
            staleness_threshold=1.0,
            weight_sync_s=3.0,
        ),
        Scenario(
            name="agentic-failing-reward",
            summary="multi-turn agent with tool waits; a reward service fails mid-run, one engine overloaded",
            topology="colocated",
            model=Model("agent-7b", 7.6e9, 7.6e9),
            n_gpus=16,
            split=(16, 16),
            batch_size=64,
            group_size=8,
            lengths=Lengths(mean=3000, cap=16384, sigma=0.8, group_sigma=0.4, growth=0.01, prompt_mean=1500),
            engine=Engine(gpus=2, kv_tokens=1_400_000, step_base_s=0.005, step_per_seq_s=0.00025, ref_context=4500),
            sources=(
                RewardSource("swe-sandbox", 0.45, 0.3, 0.006, latency_s=2.0),
                RewardSource("tool-math", 0.35, 0.55, 0.006, latency_s=0.01),
                RewardSource("terminal-hard", 0.2, 0.03, 0.0, latency_s=0.8),
            ),
            default_steps=24,
            agent=Agent(turns_mean=6.0, turns_max=30, tool_median_s=3.0, long_wait_p=0.02),
            engine_weights=(1.0, 1.0, 1.0, 1.0, 1.0, 2.2, 1.0, 1.0),
            faults=(RewardFault("swe-sandbox", steps=(7, 14), rate=0.35),),
            weight_sync_s=1.0,
        ),
        Scenario(
            name="moe-mismatch",
            summary="MoE 30B-A3B with an FP8 rollout, one-step overlap 24:8: high trainer-rollout logprob mismatch",
            topology="one_step_overlap",
            model=Model("moe-30b-a3b", 30.5e9, 3.3e9),
            n_gpus=32,
            split=(24, 8),
            batch_size=256,
            group_size=8,
            lengths=Lengths(mean=2000, cap=8192, sigma=0.8, group_sigma=0.3, growth=0.01),
            engine=Engine(gpus=2, kv_tokens=1_200_000, step_base_s=0.009, step_per_seq_s=0.00018, ref_context=2500),
            sources=(RewardSource("deepscaler", 0.6, 0.5, 0.005), RewardSource("codecontests", 0.4, 0.3, 0.004)),
            default_steps=20,
            precision="fp8",
            moe_flip_rate=1e-4,
            weight_sync_s=8.0,
            mfu_forward=0.35,
            mfu_train=0.25,
        ),
    ]
    return {s.name: s for s in items}


SCENARIOS: dict[str, Scenario] = _scenarios()


def get_scenario(name: str) -> Scenario:
    """The shipped scenario called ``name``; a ``UsageError`` listing the names otherwise."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UsageError(f"unknown scenario {name!r}; scenarios are {', '.join(SCENARIOS)}") from None


# -- measurement conventions ------------------------------------------------------------


def t90(finish_times: Sequence[float] | np.ndarray) -> float:
    """Time by which 90% of a step's trajectories have finished: the ceil(0.9 n)-th smallest;
    with n < 10, read at 0.9 n between the last two (t_n - 0.1 n (t_n - t_(n-1))); NaN for one."""
    f = np.asarray(finish_times, dtype=np.float64)
    f = np.sort(f[np.isfinite(f)])  # as the long-tail analyzer reads them
    if f.size < 2:
        return math.nan
    if f.size < 10:
        return float(f[-1] - 0.1 * f.size * (f[-1] - f[-2]))
    return float(f[(9 * f.size + 9) // 10 - 1])


def balanced_split(n: int, t_thr: float, t_tail: float, t_train: float, *, one_step: bool) -> tuple[int, int]:
    """The integer rollout:train split of ``n`` GPUs that minimises the step time.

    Times are measured on all ``n`` GPUs. Async streaming hides the tail, so its step is
    ``max(t_thr * n / n_r, t_train * n / n_t)`` and the answer is ``n_r / n_t = t_thr /
    t_train`` rounded. One-step overlap must also wait for the tail, which more GPUs do not
    shorten: ``max(t_thr * n / n_r + t_tail, t_train * n / n_t)`` (the ledger's 46:18).
    """
    tail = t_tail if one_step else 0.0
    best = min(range(1, n), key=lambda r: (max(t_thr * n / r + tail, t_train * n / (n - r)), r))
    return best, n - best


# -- response lengths ---------------------------------------------------------------------


@lru_cache(maxsize=256)
def _log_mu(mean: float, sigma: float, cap: float) -> float:
    """Location of a log-normal whose values capped at ``cap`` have mean ``mean``."""

    def capped_mean(mu: float) -> float:
        def phi(x: float) -> float:
            return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))

        lc = math.log(cap)
        below = math.exp(mu + sigma * sigma / 2) * phi((lc - mu - sigma * sigma) / sigma)
        return below + cap * (1.0 - phi((lc - mu) / sigma))

    lo, hi = -5.0, math.log(cap) + 5 * sigma
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if capped_mean(mid) < mean else (lo, mid)
    return (lo + hi) / 2


@dataclass
class _Batch:
    """One step's prompts and samples before generation (a column per field)."""

    group: np.ndarray
    source: np.ndarray  # index into Scenario.sources
    prompt_tokens: np.ndarray
    response_tokens: np.ndarray
    turn_tokens: list[list[int]]
    waits: list[list[float]]
    engine: np.ndarray  # pinned engine per sample, or -1: any engine

    def __len__(self) -> int:
        return int(self.group.size)


def _draw_groups(sc: Scenario, rng: np.random.Generator, first_group: int, n_groups: int, version: int) -> _Batch:
    """Draw ``n_groups`` prompts and their G samples at the given policy version."""
    G, lens = sc.group_size, sc.lengths
    n = n_groups * G
    groups = np.repeat(np.arange(first_group, first_group + n_groups, dtype=np.int64), G)
    shares = np.array([s.share for s in sc.sources])
    source = np.repeat(rng.choice(len(sc.sources), size=n_groups, p=shares / shares.sum()), G)
    prompt_sigma = 0.3
    prompt = np.repeat(
        np.maximum(16, np.round(lens.prompt_mean * np.exp(rng.normal(-(prompt_sigma**2) / 2, prompt_sigma, n_groups)))),
        G,
    ).astype(np.int64)
    mu = _log_mu(lens.mean_at(version), lens.sigma, float(lens.cap))
    own_sigma = math.sqrt(max(lens.sigma**2 - lens.group_sigma**2, 0.0))
    z = np.repeat(rng.normal(0.0, lens.group_sigma, n_groups), G) + rng.normal(0.0, own_sigma, n)
    response = np.clip(np.round(np.exp(mu + z)), 1, lens.cap).astype(np.int64)
    agent = sc.agent
    if agent is None:
        turn_tokens = [[int(r)] for r in response]
        waits: list[list[float]] = [[] for _ in range(n)]
    else:
        turns = np.minimum(1 + rng.poisson(agent.turns_mean - 1.0, n), agent.turns_max)
        turns = np.minimum(turns, response)  # every turn emits at least one token
        owner = np.repeat(np.arange(n), turns)
        starts = np.concatenate([[0], np.cumsum(turns)[:-1]])
        weights = rng.exponential(1.0, owner.size)
        share = weights / np.add.reduceat(weights, starts)[owner]
        toks = 1 + np.floor(share * (response - turns)[owner]).astype(np.int64)
        toks[starts + turns - 1] += response - np.add.reduceat(toks, starts)  # exact totals
        waits_flat = np.exp(rng.normal(math.log(agent.tool_median_s), agent.tool_sigma, owner.size))
        slow = rng.random(owner.size) < agent.long_wait_p
        waits_flat[slow] = rng.uniform(*agent.long_wait_s, int(slow.sum()))
        turn_tokens = [t.tolist() for t in np.split(toks, starts[1:])]
        waits = [w[:-1].tolist() for w in np.split(waits_flat, starts[1:])]  # no wait after the last turn
        prompt = prompt + (turns - 1) * agent.obs_tokens
    engine = np.full(n, -1, dtype=np.int64)
    if sc.engine_weights:
        engine = np.repeat(_sticky_engines(sc.engine_weights, groups[::G]), G)
    return _Batch(groups, source, prompt, response, turn_tokens, waits, engine)


def _sticky_engines(weights: Sequence[float], groups: np.ndarray) -> np.ndarray:
    """Engine of each prompt under weighted prompt-sticky routing (e.g. a prefix-cache hash).

    A golden-ratio sequence spreads prompts evenly, so each engine's share of the prompts
    tracks its weight closely even over a few steps.
    """
    edges = np.cumsum(weights) / np.sum(weights)
    u = np.modf(groups * 0.6180339887498949 + 0.5)[0]
    return np.minimum(np.searchsorted(edges, u, side="right"), len(weights) - 1)


# -- continuous batching --------------------------------------------------------------------

_ENGINE_EVENT, _TOOL_EVENT, _TRAIN_END, _SYNC_END = range(4)


class _Cluster:
    """Rollout engines under continuous batching, as a discrete-event simulation.

    Each engine admits queued requests FIFO while it has a free slot. All running
    sequences of an engine gain one token per decode step, so the engine keeps one token
    clock: a request admitted at clock ``k`` with ``L`` tokens to go finishes when the clock
    reaches ``k + L``, and the wall time per clock tick is the step time at the current batch.
    Other timed events (tool results, trainer milestones) share the same queue.
    """

    def __init__(self, n_engines: int, engine: Engine, context: float, watch: Iterable[int] = ()):
        self.engine = engine
        self.set_context(context)
        self.clock = [0.0] * n_engines
        self.since = [0.0] * n_engines
        self.running: list[list[tuple[float, int]]] = [[] for _ in range(n_engines)]
        self.waiting: list[deque[tuple[int, int]]] = [deque() for _ in range(n_engines)]
        self.stamp = [0] * n_engines
        self.events: list[tuple[float, int, int, int, int]] = []
        self._tie = itertools.count()
        self.paused = False
        self.busy_slot_s = 0.0
        self.load = [0] * n_engines  # requests running or waiting, per engine
        # sampled engines: (times, utilization) at every change of their running batch
        self.watch: dict[int, tuple[list[float], list[float]]] = {e: ([0.0], [0.0]) for e in watch}

    def set_context(self, context: float) -> None:
        """Size the engines for sequences of this mean context (prompt + response) length."""
        self.slots = self.engine.slots(context)
        self._step_base = self.engine.step_s(0, context)
        self._step_per_seq = self.engine.step_s(1, context) - self._step_base

    def least_loaded(self) -> int:
        return self.load.index(min(self.load))

    def _advance(self, e: int, t: float) -> None:
        b = len(self.running[e])
        if b and not self.paused:
            dt = t - self.since[e]
            self.clock[e] += dt / (self._step_base + self._step_per_seq * b)
            self.busy_slot_s += b * dt
        self.since[e] = t

    def _schedule(self, e: int) -> None:
        self.stamp[e] += 1
        run = self.running[e]
        if run and not self.paused:
            done = self.since[e] + (run[0][0] - self.clock[e]) * (self._step_base + self._step_per_seq * len(run))
            heapq.heappush(self.events, (done, next(self._tie), _ENGINE_EVENT, e, self.stamp[e]))

    def _fill(self, e: int, t: float, admitted: Callable[[int, float], None]) -> None:
        run, wait = self.running[e], self.waiting[e]
        while wait and len(run) < self.slots:
            rid, tokens = wait.popleft()
            heapq.heappush(run, (self.clock[e] + tokens, rid))
            admitted(rid, t)
        if e in self.watch:
            times, utils = self.watch[e]
            times.append(t)
            utils.append(_decode_util(len(run), self.slots))

    def submit(self, e: int, rid: int, tokens: int, t: float, admitted: Callable[[int, float], None]) -> None:
        self._advance(e, t)
        self.load[e] += 1
        self.waiting[e].append((rid, tokens))
        self._fill(e, t, admitted)
        self._schedule(e)

    def at(self, t: float, kind: int, rid: int = 0) -> None:
        heapq.heappush(self.events, (t, next(self._tie), kind, rid, 0))

    def pause(self, t: float) -> None:
        for e in range(len(self.running)):
            self._advance(e, t)
            self.stamp[e] += 1
        self.paused = True

    def resume(self, t: float, admitted: Callable[[int, float], None]) -> None:
        self.paused = False
        for e in range(len(self.running)):
            self.since[e] = t
            self._fill(e, t, admitted)
            self._schedule(e)

    def run(self, handler: _Flight) -> None:
        """Process events in time order until none are left or the handler is done."""
        events = self.events
        while events and not handler.done:
            t, _, kind, a, stamp = heapq.heappop(events)
            if kind != _ENGINE_EVENT:
                handler.event(kind, a, t)
            elif stamp == self.stamp[a]:
                self._advance(a, t)
                finished, rid = heapq.heappop(self.running[a])
                self.load[a] -= 1
                self.clock[a] = finished
                self._fill(a, t, handler.admitted)
                self._schedule(a)
                handler.turn_done(rid, t)


def _decode_util(running: int, slots: int) -> float:
    """NVML utilization of a decoding GPU: near full with a full batch, falling as it empties."""
    return 0.0 if running <= 0 else 30.0 + 68.0 * math.sqrt(min(running / slots, 1.0))


class _Flight:
    """Trajectories moving through the cluster turn by turn, and what happened to each."""

    def __init__(self, cluster: _Cluster, version: int = 0):
        self.cluster = cluster
        self.version = version  # policy version the engines hold now
        self.done = False
        self.turns: list[list[int]] = []
        self.waits: list[list[float]] = []
        self.engine: list[int] = []
        self.submit: list[float] = []
        self.finish: list[float] = []
        self.gen_s: list[float] = []
        self.version_start: list[int] = []
        self.version_end: list[int] = []
        self._turn: list[int] = []
        self._turn_admit: list[float] = []

    def add(self, batch: _Batch, engines: Sequence[int] | None, t: float) -> range:
        """Submit every trajectory of ``batch`` at time ``t``; return their ids.

        ``engines`` pins each trajectory to an engine; ``None`` picks the least-loaded one.
        """
        first = len(self.turns)
        for i in range(len(batch)):
            rid = first + i
            e = self.cluster.least_loaded() if engines is None else int(engines[i])
            self.turns.append(batch.turn_tokens[i])
            self.waits.append(batch.waits[i])
            self.engine.append(e)
            self.submit.append(t)
            self.finish.append(math.nan)
            self.gen_s.append(0.0)
            self.version_start.append(-1)
            self.version_end.append(-1)
            self._turn.append(0)
            self._turn_admit.append(t)
            self.cluster.submit(e, rid, self.turns[rid][0], t, self.admitted)
        return range(first, len(self.turns))

    def admitted(self, rid: int, t: float) -> None:
        self._turn_admit[rid] = t
        if self.version_start[rid] < 0:
            self.version_start[rid] = self.version

    def turn_done(self, rid: int, t: float) -> None:
        self.gen_s[rid] += t - self._turn_admit[rid]
        k = self._turn[rid]
        if k + 1 < len(self.turns[rid]):
            self._turn[rid] = k + 1
            self.cluster.at(t + self.waits[rid][k], _TOOL_EVENT, rid)
        else:
            self.finish[rid] = t
            self.version_end[rid] = self.version
            self.finished(rid, t)

    def finished(self, rid: int, t: float) -> None:
        """Hook: a trajectory's last turn is done."""

    def event(self, kind: int, rid: int, t: float) -> None:
        if kind == _TOOL_EVENT:
            self.cluster.submit(self.engine[rid], rid, self.turns[rid][self._turn[rid]], t, self.admitted)


def _run_batch(sc: Scenario, batch: _Batch, n_engines: int, version: int, watch: Iterable[int] = ()) -> _Flight:
    """Generate a whole batch submitted at t=0 on ``n_engines`` (a synchronous rollout)."""
    flight = _Flight(_Cluster(n_engines, sc.engine, _context(sc, version), watch), version)
    pinned = sc.engine_weights and n_engines == sc.n_engines
    # all requests arrive at once, so least-loaded dispatch is round robin
    flight.add(batch, batch.engine if pinned else np.arange(len(batch)) % n_engines, 0.0)
    flight.cluster.run(flight)
    return flight


def _context(sc: Scenario, version: int) -> float:
    """Mean context (prompt + response) the engines are sized for at a policy version."""
    return sc.lengths.prompt_mean + sc.lengths.mean_at(version)


def _thr_tail(finish: np.ndarray) -> tuple[float, float]:
    thr = t90(finish)
    return thr, float(np.max(finish)) - thr


# -- rewards, trainer times, log-prob mismatch ------------------------------------------------


@dataclass
class _Rewards:
    reward: np.ndarray  # NaN where the service failed
    status: list[str]
    error: list[str | None]
    seconds: np.ndarray

    def phase_s(self, concurrency: int) -> float:
        """The reward stage: scoring calls run ``concurrency`` at a time."""
        return 0.2 + float(self.seconds.sum()) / concurrency


def _rewards(sc: Scenario, step: int, batch: _Batch, rng: np.random.Generator) -> _Rewards:
    """Binary rewards per source; a failing service returns error codes, never zeros."""
    acc = np.array([min(max(s.accuracy + s.gain * (step - 1), 0.01), 0.95) for s in sc.sources])
    mean = acc[batch.source[:: sc.group_size]]
    concentration = 2.0  # prompts differ in difficulty: many groups all-0 or all-1
    p_group = np.repeat(rng.beta(mean * concentration, (1.0 - mean) * concentration), sc.group_size)
    truncated = batch.response_tokens >= sc.lengths.cap
    reward = ((rng.random(len(batch)) < p_group) & ~truncated).astype(np.float64)
    latency = np.array([s.latency_s for s in sc.sources])[batch.source]
    seconds = latency * np.exp(rng.normal(0.0, 0.5, len(batch)))
    status = ["ok"] * len(batch)
    error: list[str | None] = [None] * len(batch)
    names = [s.name for s in sc.sources]
    for fault in sc.faults:
        if not fault.steps[0] <= step <= fault.steps[1]:
            continue
        hit = (batch.source == names.index(fault.source)) & (rng.random(len(batch)) < fault.rate)
        weights = np.array([w for _, w in fault.codes])
        picks = rng.choice(len(fault.codes), size=len(batch), p=weights / weights.sum())
        for i in np.flatnonzero(hit):
            code = fault.codes[picks[i]][0]
            status[i], error[i], reward[i] = "error", code, math.nan
            seconds[i] = fault.timeout_s if code == "TIMEOUT" else 0.05
    return _Rewards(reward, status, error, seconds)


def _tokens(batch: _Batch) -> float:
    return float(batch.prompt_tokens.sum() + batch.response_tokens.sum())


def _trainer_times(sc: Scenario, batch: _Batch, rng: np.random.Generator) -> tuple[float, float, float, float]:
    """(forward, train, adv, achieved training MFU) on the training GPUs, from FLOPs."""
    tokens = _tokens(batch)
    peak = sc.train_gpus * sc.peak_flops
    mfu_f = sc.mfu_forward * (1.0 + rng.normal(0.0, 0.015))
    mfu_t = sc.mfu_train * (1.0 + rng.normal(0.0, 0.015))
    forward = 4.0 * sc.model.active_params * tokens / (peak * mfu_f)
    train = 6.0 * sc.model.active_params * tokens / (peak * mfu_t)
    return forward, train, 0.2 + 1e-5 * len(batch), mfu_t


def _logprob(
    sc: Scenario, rng: np.random.Generator, staleness: np.ndarray, tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token (log p_trainer - log p_rollout, |p_trainer - p_rollout|) for a token sample.

    Precision sets the scale (bf16 ~1e-3, fp8 ~1e-2); MoE routing flips add rare tokens
    with |delta| > 1; stale samples add drift because the trainer's weights moved on.
    """
    n = _LOGPROB_SAMPLE
    scale = _DELTA_SCALE[sc.precision]
    delta = rng.standard_t(3, n) * (scale * math.pi / (2.0 * math.sqrt(3.0))) + 0.1 * scale  # E|t3| = 2*sqrt(3)/pi
    owner = rng.choice(tokens.size, size=n, p=tokens / tokens.sum())
    delta += rng.normal(0.0, 1.0, n) * _STALE_DRIFT * staleness[owner]
    flips = rng.random(n) < sc.moe_flip_rate
    n_flips = int(flips.sum())
    delta[flips] = rng.choice([-1.0, 1.0], n_flips) * np.exp(rng.normal(math.log(1.6), 0.45, n_flips))
    lp_rollout = -rng.exponential(0.35, n)
    lp_trainer = np.minimum(lp_rollout + delta, 0.0)
    return lp_trainer - lp_rollout, np.abs(np.exp(lp_trainer) - np.exp(lp_rollout))


# -- topologies -----------------------------------------------------------------------------


@dataclass
class _StepRecord:
    """What one trainer step consumed and when each of its stages ran (unix seconds)."""

    step: int
    start: float  # the step's window opened (previous step's end)
    end: float
    batch: _Batch
    rewards: _Rewards
    flight: _Flight
    rids: np.ndarray  # the batch's trajectories in ``flight``
    origin: float  # unix time of the flight clock's t0 for this batch
    t0: float  # flight-clock time at which the batch's rollout began
    phases: dict[str, tuple[float, float]]
    mfu: float
    counterfactual: tuple[float, float]  # (T_thr, T_tail) of this batch on all n GPUs
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def trainer_version(self) -> int:
        return self.step - 1  # updates applied before this step's update


def _rng(seed: int, stream: int, step: int = 0) -> np.random.Generator:
    """An independent stream per (seed, purpose, step): steps do not disturb each other's draws."""
    return np.random.default_rng([seed, stream, step])


_DRAW, _TRAIN, _REWARD, _LOGPROBS, _GPU = range(5)


def _gen_version(sc: Scenario, step: int) -> int:
    """Policy version that generated step ``step``'s batch in a synchronous topology."""
    return max(step - 2, 0) if sc.topology == "one_step_overlap" else step - 1


def _trainer_phases(
    sc: Scenario, t: float, rewards: _Rewards, forward: float, adv: float, train: float
) -> dict[str, tuple[float, float]]:
    """The trainer's stages back to back from ``t``: reward, old_log_prob, ref, adv, update_actor."""
    phases = {}
    for name, dur in (
        ("reward", rewards.phase_s(sc.reward_concurrency)),
        ("old_log_prob", forward / 2),
        ("ref", forward / 2),
        ("adv", adv),
        ("update_actor", train),
    ):
        phases[name] = (t, t + dur)
        t += dur
    return phases


def _sync_steps(sc: Scenario, steps: int, seed: int, watch: list[int]) -> Iterator[_StepRecord]:
    """Colocated, separated and one-step-overlap runs: each batch is generated whole.

    One-step overlap generates batch k+1 while batch k trains; step k+1 opens when step k
    ends and first waits for that batch (verl's ``wait_prev_gen``), so a step lasts as long as
    the slower side. Colocated and separated runs do one side after the other. Steps are
    yielded one at a time (the next batch simulated one step ahead), so a long run never holds
    more than two batches in flight.
    """
    overlap = sc.topology == "one_step_overlap"

    def generate(k: int) -> tuple[_Batch, _Flight]:
        batch = _draw_groups(sc, _rng(seed, _DRAW, k), (k - 1) * sc.batch_size, sc.batch_size, _gen_version(sc, k))
        return batch, _run_batch(sc, batch, sc.n_engines, _gen_version(sc, k), watch)

    window = origin = EPOCH  # one-step overlap: batch 1 is generated as the loop starts; step 1 waits for it
    upcoming = generate(1)
    for k in range(1, steps + 1):
        batch, flight = upcoming
        upcoming = generate(k + 1) if k < steps else None
        gen_s = float(np.max(flight.finish))
        forward, train, adv, mfu = _trainer_times(sc, batch, _rng(seed, _TRAIN, k))
        rewards = _rewards(sc, k, batch, _rng(seed, _REWARD, k))
        if overlap:
            start = max(window, origin + gen_s)
            phases = {
                "gen": (origin, origin + gen_s),
                **_trainer_phases(sc, start, rewards, forward, adv, train),
            }
        else:
            start = origin = window
            phases = {
                "gen": (origin, origin + gen_s),
                **_trainer_phases(sc, origin + gen_s, rewards, forward, adv, train),
            }
        busy_until = phases["update_actor"][1]
        phases["update_weights"] = (busy_until, busy_until + sc.weight_sync_s)
        end = busy_until + sc.weight_sync_s
        finish = np.round(np.asarray(flight.finish), 3)
        counterfactual = (
            _thr_tail(finish) if sc.rollout_gpus == sc.n_gpus else _counterfactual(sc, batch, _gen_version(sc, k))
        )
        # the step opens when the previous one ended: an overlapped step first waits for its batch
        opened = window if overlap else start
        rec = _StepRecord(
            k, opened, end, batch, rewards, flight, np.arange(len(batch)), origin, 0.0, phases, mfu, counterfactual
        )
        if overlap:
            rec.extra["timing_s/wait_prev_gen"] = max(0.0, origin + gen_s - window)
            origin = start  # the next batch is generated during this step
        yield rec
        window = end


def _counterfactual(sc: Scenario, batch: _Batch, version: int) -> tuple[float, float]:
    """(T_thr, T_tail) of ``batch`` generated on all n GPUs at once: the split's yardstick."""
    flight = _run_batch(sc, batch, sc.n_gpus // sc.engine.gpus, version)
    return _thr_tail(np.round(np.asarray(flight.finish), 3))


class _AsyncRun(_Flight):
    """Async streaming: the rollouter keeps generating, the trainer takes batches as they are
    ready, and each update pauses the engines for a weight sync (partial rollouts resume on
    the new weights). At most ``B * (1 + staleness_threshold)`` prompts may be in flight or
    waiting to be trained on; beyond that the rollouter idles."""

    def __init__(self, sc: Scenario, steps: int, seed: int, watch: list[int]):
        super().__init__(_Cluster(sc.n_engines, sc.engine, _context(sc, 0), watch))
        self.sc, self.steps, self.seed = sc, steps, seed
        self.limit = int(sc.batch_size * (1.0 + sc.staleness_threshold))
        self.groups: list[tuple[_Batch, range]] = []
        self.left: list[int] = []  # trajectories of each group still generating
        self.ready: list[int] = []  # groups in the order they completed
        self.consumed = 0
        self.in_flight = 0  # trajectories submitted and not finished
        self.window = 0.0  # the current step's window opened (flight clock)
        self.window_busy = 0.0
        self.idle_at: float | None = None  # when the pool last drained to nothing in flight, this window
        self.pending: tuple | None = None  # the step being trained
        self.records: list[_StepRecord] = []

    def start(self) -> None:
        self._refill(0.0)
        self.cluster.run(self)

    def _refill(self, t: float) -> None:
        """Submit prompts while an engine slot is free and the staleness budget allows."""
        G, capacity = self.sc.group_size, self.cluster.slots * self.sc.n_engines
        while (
            not self.cluster.paused and len(self.groups) - self.consumed < self.limit and self.in_flight + G <= capacity
        ):
            g = len(self.groups)
            batch = _draw_groups(self.sc, _rng(self.seed, _DRAW, g), g, 1, self.version)
            self.left.append(len(batch))
            self.in_flight += len(batch)
            self.groups.append((batch, self.add(batch, batch.engine if self.sc.engine_weights else None, t)))

    def finished(self, rid: int, t: float) -> None:
        g = rid // self.sc.group_size
        self.left[g] -= 1
        self.in_flight -= 1
        if self.left[g] == 0:
            self.ready.append(g)
            self._maybe_train(t)
        self._refill(t)
        self._mark_idle(t)

    def _mark_idle(self, t: float) -> None:
        """verl's idle_start_time: the rollouter, stopped by its staleness limit, has drained every
        trajectory it had in flight (decoding, waiting for a tool, or held by a weight sync)."""
        if self.in_flight == 0:
            self.idle_at = t

    def _maybe_train(self, t: float) -> None:
        sc, B = self.sc, self.sc.batch_size
        if self.pending is not None or len(self.ready) - self.consumed < B or len(self.records) >= self.steps:
            return
        k = len(self.records) + 1
        groups = self.ready[self.consumed : self.consumed + B]
        self.consumed += B
        batch = _concat([self.groups[g][0] for g in groups])
        rids = np.array([r for g in groups for r in self.groups[g][1]])
        forward, train, adv, mfu = _trainer_times(sc, batch, _rng(self.seed, _TRAIN, k))
        rewards = _rewards(sc, k, batch, _rng(self.seed, _REWARD, k))
        phases = _trainer_phases(sc, t, rewards, forward, adv, train)
        self.pending = (k, batch, rids, rewards, phases, mfu, t - self.window)
        self.cluster.at(phases["update_actor"][1], _TRAIN_END)
        self._refill(t)

    def event(self, kind: int, rid: int, t: float) -> None:
        if kind == _TRAIN_END:
            self.cluster.pause(t)
            self.cluster.at(t + self.sc.weight_sync_s, _SYNC_END)
        elif kind == _SYNC_END:
            self._close_step(t)
        else:
            super().event(kind, rid, t)

    def _close_step(self, t: float) -> None:
        sc = self.sc
        assert self.pending is not None
        k, batch, rids, rewards, phases, mfu, wait = self.pending
        phases["param_sync"] = (t - sc.weight_sync_s, t)
        span = t - self.window
        busy = self.cluster.busy_slot_s - self.window_busy
        t0 = min(self.submit[r] for r in rids)
        gen_end = max(self.finish[r] for r in rids)
        unix = {"gen": (EPOCH + t0, EPOCH + gen_end), **{p: (EPOCH + a, EPOCH + b) for p, (a, b) in phases.items()}}
        rec = _StepRecord(
            k,
            EPOCH + self.window,
            EPOCH + t,
            batch,
            rewards,
            self,
            rids,
            EPOCH,
            t0,
            unix,
            mfu,
            _counterfactual(sc, batch, k - 1),
        )
        # verl 0.9.1's reset_staleness(): the rollouter is active by time from the version's start
        # until it drained (all of it when it never did), and its occupancy share weighs each
        # moment by how many of its slots decode
        active = span if self.idle_at is None else self.idle_at - self.window
        rec.extra["fully_async/trainer/idle_ratio"] = wait / span
        rec.extra["fully_async/rollouter/active_time"] = active
        rec.extra["fully_async/rollouter/version_time"] = span
        rec.extra["fully_async/rollouter/idle_ratio"] = 1.0 - active / span
        rec.extra["dynamic_resource/rollout_resource_utilization"] = busy / (self.cluster.slots * sc.n_engines * span)
        self.records.append(rec)
        self.pending = None
        self.version += 1
        self.window, self.window_busy = t, self.cluster.busy_slot_s
        self.cluster.set_context(_context(sc, self.version))
        self.cluster.resume(t, self.admitted)
        self.done = len(self.records) >= self.steps
        self.idle_at = None
        self._refill(t)
        self._maybe_train(t)
        self._mark_idle(t)


def _concat(batches: Sequence[_Batch]) -> _Batch:
    return _Batch(
        group=np.concatenate([b.group for b in batches]),
        source=np.concatenate([b.source for b in batches]),
        prompt_tokens=np.concatenate([b.prompt_tokens for b in batches]),
        response_tokens=np.concatenate([b.response_tokens for b in batches]),
        turn_tokens=[t for b in batches for t in b.turn_tokens],
        waits=[w for b in batches for w in b.waits],
        engine=np.concatenate([b.engine for b in batches]),
    )


def _async_steps(sc: Scenario, steps: int, seed: int, watch: list[int]) -> list[_StepRecord]:
    run = _AsyncRun(sc, steps, seed, watch)
    run.start()
    return run.records


# -- writing ----------------------------------------------------------------------------------


def _host(index: int) -> tuple[str, int]:
    """(host name, local GPU index) of global GPU ``index``; 8 GPUs per host."""
    return f"node-{index // _GPUS_PER_HOST:02d}", index % _GPUS_PER_HOST


def _sampled_gpus(sc: Scenario) -> list[tuple[int, str, int | None]]:
    """(global GPU index, role, engine) of the few GPUs whose NVML samples are written."""
    tp, E = sc.engine.gpus, sc.n_engines
    if sc.topology == "colocated":
        engines = {0, E // 2, E - 1}
        if sc.engine_weights:
            engines.add(int(np.argmax(sc.engine_weights)))
        return [(e * tp, "actor_rollout", e) for e in sorted(engines)]
    rollout = [(e * tp, "rollout", e) for e in sorted({0, E - 1})]
    return rollout + [(g, "trainer", None) for g in sorted({sc.rollout_gpus, sc.n_gpus - 1})]


def _trajectory_table(sc: Scenario, rec: _StepRecord) -> pa.Table:
    fl, rids, b = rec.flight, rec.rids, rec.batch

    def take(values: list) -> np.ndarray:  # this step's entries of a run-long list
        return np.array([values[r] for r in rids])

    vs, ve = take(fl.version_start), take(fl.version_end)
    names = np.array([s.name for s in sc.sources])
    member = np.arange(len(b)) % sc.group_size
    return pa.table(
        {
            "step": np.full(len(b), rec.step, dtype=np.int64),
            "traj_id": [f"s{rec.step:04d}-g{g:06d}-{m:02d}" for g, m in zip(b.group, member, strict=True)],
            "group": b.group,
            "data_source": names[b.source],
            "prompt_tokens": b.prompt_tokens,
            "response_tokens": b.response_tokens,
            "turns": np.array([len(fl.turns[r]) for r in rids], dtype=np.int32),
            "preemptions": np.zeros(len(b), dtype=np.int32),
            "gen_s": np.round(take(fl.gen_s), 3),
            "tool_s": np.round([sum(fl.waits[r]) for r in rids], 3),
            "reward_s": np.round(rec.rewards.seconds, 3),
            "submit_time": np.round(take(fl.submit) - rec.t0, 3),
            "finish_time": np.round(take(fl.finish) - rec.t0, 3),
            "engine": [f"engine-{fl.engine[r]}" for r in rids],
            "policy_version_start": vs,
            "policy_version_end": ve,
            "trainer_version": np.full(len(b), rec.trainer_version, dtype=np.int64),
            "aborted": np.zeros(len(b), dtype=bool),
            "partial": vs != ve,
            "reward": pa.array(rec.rewards.reward, from_pandas=True),
            "reward_status": rec.rewards.status,
            "reward_error": pa.array(rec.rewards.error, pa.string()),
        }
    )


_PHASE_UTIL = {  # NVML utilization of a GPU during a trainer-side stage
    "reward": 0.0,
    "old_log_prob": 92.0,
    "ref": 92.0,
    "adv": 6.0,
    "update_actor": 96.0,
    "update_weights": 40.0,
    "param_sync": 40.0,
}
_WEIGHT_SYNC = ("update_weights", "param_sync")


@dataclass(frozen=True)
class _Timeline:
    """What the GPU samples need of a step once its trajectories are written."""

    step: int
    end: float
    phases: dict[str, tuple[float, float]]
    origin: float
    watch: dict[int, tuple[list[float], list[float]]]  # the flight's sampled engines (shared when async)

    @classmethod
    def of(cls, rec: _StepRecord) -> _Timeline:
        return cls(rec.step, rec.end, rec.phases, rec.origin, rec.flight.cluster.watch)


def _gpu_table(
    sc: Scenario, timelines: list[_Timeline], gpus: list[tuple[int, str, int | None]], seed: int
) -> pa.Table:
    """NVML-like samples every 2 s on the sampled GPUs.

    Decoding GPUs follow their engine's running batch (full during the throughput part,
    emptying through the tail), trainer stages have their own level, a weight sync a
    middling one, and a GPU waiting for the other side reads ~0.
    """
    rng = _rng(seed, _GPU)
    end = max(r.end for r in timelines)
    train_mem = min(0.92 * sc.gpu_mem_bytes, 16.0 * sc.model.total_params / sc.train_gpus + 10 * 2**30)
    kv_mem = 0.85 * sc.gpu_mem_bytes
    flights = {id(r.watch): r for r in timelines}.values()  # async: one flight for all steps
    parts = []
    for index, role, engine in gpus:
        host, local = _host(index)
        times = EPOCH + 0.25 * local + np.arange(0.0, end - EPOCH, _GPU_SAMPLE_S)
        util = np.zeros(times.size)
        if engine is not None:
            et, eu = [], []
            for r in flights:
                t, u = r.watch[engine]
                et.extend(r.origin + np.asarray(t))
                eu.extend(u)
            util = np.asarray(eu)[np.clip(np.searchsorted(et, times, side="right") - 1, 0, None)]
        mem = np.full(times.size, kv_mem if role == "rollout" else train_mem)
        for r in timelines:
            for phase, (a, b) in r.phases.items():
                applies = (
                    role == "actor_rollout"
                    or (role == "trainer" and phase != "gen")
                    or (role == "rollout" and phase in _WEIGHT_SYNC)
                )
                if not applies:
                    continue
                # times ascend: the samples in [a, b) are one slice
                inside = slice(*np.searchsorted(times, (a, b), side="left"))
                if phase == "gen":
                    mem[inside] = kv_mem
                else:
                    util[inside] = _PHASE_UTIL[phase]
        noisy = np.round(np.clip(util + rng.normal(0.0, 1.5, times.size) * (util > 0), 0.0, 100.0), 1)
        parts.append(
            pa.table(
                {
                    "time": np.round(times, 3),
                    "host": [host] * times.size,
                    "gpu": np.full(times.size, local, dtype=np.int32),
                    "role": [role] * times.size,
                    "util_pct": noisy,
                    "mem_used_bytes": (mem + rng.normal(0.0, 2**26, times.size)).astype(np.int64),
                    "mem_total_bytes": np.full(times.size, sc.gpu_mem_bytes, dtype=np.int64),
                    "power_w": np.round(75.0 + 6.2 * noisy, 1),
                    "sm_clock_mhz": np.where(noisy > 0, 1980.0, 345.0),
                }
            )
        )
    return pa.concat_tables(parts)


def _step_metrics(
    sc: Scenario, rec: _StepRecord, table: pa.Table, pdiff: np.ndarray, counts: dict[str, int]
) -> dict[str, float]:
    """verl's per-step metrics, under verl's names."""
    dur = {p: b - a for p, (a, b) in rec.phases.items()}
    finish = table.column("finish_time").to_numpy()
    score = np.nan_to_num(rec.rewards.reward, nan=0.0)  # the trainer's batch: a failed score became 0
    resp, tokens = rec.batch.response_tokens, _tokens(rec.batch)
    step_s = rec.end - rec.start
    sync_key = "param_sync" if sc.topology == "async" else "update_weights"
    metrics = {
        "training/global_step": float(rec.step),
        "timing_s/gen": float(finish.max()),
        **{f"timing_s/{p}": dur[p] for p in ("reward", "old_log_prob", "ref", "adv", "update_actor", sync_key)},
        "timing_s/step": step_s,
        **rec.extra,
        "response_length/mean": float(resp.mean()),
        "response_length/max": float(resp.max()),
        "response_length/min": float(resp.min()),
        "response_length/clip_ratio": float(np.mean(resp >= sc.lengths.cap)),
        "prompt_length/mean": float(rec.batch.prompt_tokens.mean()),
        "perf/total_num_tokens": tokens,
        "perf/time_per_step": step_s,
        "perf/throughput": tokens / (step_s * sc.n_gpus),
        "perf/mfu/actor": rec.mfu,
        "critic/score/mean": float(score.mean()),
        "critic/score/max": float(score.max()),
        "critic/score/min": float(score.min()),
        "critic/rewards/mean": float(score.mean()),
        "training/rollout_probs_diff_max": float(pdiff.max()),
        "training/rollout_probs_diff_mean": float(pdiff.mean()),
        "training/rollout_probs_diff_std": float(pdiff.std()),
    }
    if sc.topology == "async":
        metrics["fully_async/count/stale_samples_processed"] = float(counts["stale_groups"])
        metrics["fully_async/count/stale_trajectory_processed"] = float(counts["stale_trajs"])
        metrics["fully_async/partial/partial_ratio"] = float(
            np.mean(table.column("partial").to_numpy(zero_copy_only=False))
        )
    return metrics


def _truth_row(sc: Scenario, rec: _StepRecord, table: pa.Table, staleness: np.ndarray) -> dict[str, float]:
    """This step's ground truth, measured from the table as written (see docs/simulator.md)."""
    thr, tail = _thr_tail(table.column("finish_time").to_numpy())
    dur = {p: b - a for p, (a, b) in rec.phases.items()}
    forward, train = dur["old_log_prob"] + dur["ref"], dur["update_actor"]
    return {
        "T_gen_s": thr + tail,
        "T_thr_s": thr,
        "T_tail_s": tail,
        "tail_share": tail / (thr + tail),
        "forward_s": forward,
        "train_s": train,
        "step_s": rec.end - rec.start,
        "T_thr_n_s": rec.counterfactual[0],
        "T_tail_n_s": rec.counterfactual[1],
        "train_n_s": (forward + train) * sc.train_gpus / sc.n_gpus,
        "response_length_mean": float(rec.batch.response_tokens.mean()),
        "staleness_mean": float(staleness.mean()),
        "staleness_max": float(staleness.max()),
    }


_CHUNK_STEPS = 100
"""Steps per written segment: a long run is written as it is simulated, never held whole."""


@dataclass
class _Written:
    """The trajectory columns the ground truth counts, as they were written (compact)."""

    step: np.ndarray
    source: np.ndarray  # index into Scenario.sources
    ok: np.ndarray  # reward_status == "ok"
    error: np.ndarray  # reward_status == "error"
    reward: np.ndarray  # NaN where the table has null
    engine: np.ndarray

    @classmethod
    def of(cls, rec: _StepRecord) -> _Written:
        status = np.asarray(rec.rewards.status)
        return cls(
            np.full(len(rec.batch), rec.step, dtype=np.int64),
            rec.batch.source.astype(np.int16),
            status == "ok",
            status == "error",
            np.asarray(rec.rewards.reward, dtype=np.float64),
            np.array([rec.flight.engine[r] for r in rec.rids], dtype=np.int32),
        )

    @classmethod
    def concat(cls, parts: list[_Written]) -> _Written:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls.__dataclass_fields__))


def simulate(scenario: str | Scenario, steps: int, out: str | os.PathLike[str], seed: int = 0) -> dict[str, Any]:
    """Write a simulated run of ``steps`` trainer steps to ``out``; return its ``meta.json``.

    ``out`` must not exist or be an empty directory, so a run is never mixed into another.
    The ground truth is under ``"ground_truth"`` (``docs/simulator.md`` defines each key).
    Steps, spans, trajectories and logprob are written a segment per ``_CHUNK_STEPS`` steps
    as they are simulated, the GPU samples and ``meta.json`` at the end.
    """
    sc = get_scenario(scenario) if isinstance(scenario, str) else scenario
    if steps <= 0:
        raise UsageError(f"steps must be positive, got {steps}")
    path = os.fspath(out)
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{path}: exists and is a file; give a new directory for the run")
    if os.path.isdir(path) and os.listdir(path):
        raise UsageError(f"{path}: directory is not empty; give a new directory for the run")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot create the run directory ({exc.strerror or exc})") from None
    gpus = _sampled_gpus(sc)
    watch = sorted({e for _, _, e in gpus if e is not None})
    records = (_async_steps if sc.topology == "async" else _sync_steps)(sc, steps, seed, watch)
    seq = itertools.count(1)

    def write(name: str, table: pa.Table) -> None:
        try:
            write_segment(path, name, table, writer_id="simulator", seq=next(seq))
        except (OSError, pa.ArrowException) as exc:
            raise RunDirError(f"{path}: cannot write the run ({exc})") from None

    rollout_host = _host(0)[0]
    trainer_host = _host(0 if sc.topology == "colocated" else sc.rollout_gpus)[0]
    steps_rows: dict[str, list[Any]] = {k: [] for k in ("step", "attempt", "time", "key", "value")}
    spans: dict[str, list[Any]] = {k: [] for k in ("step", "phase", "role", "host", "start", "end")}
    trajectories: list[pa.Table] = []
    logprob_rows: list[dict[str, Any]] = []
    truth: list[dict[str, float]] = []
    timelines: list[_Timeline] = []
    written: list[_Written] = []
    counts = {"stale_groups": 0, "stale_trajs": 0}

    def flush() -> None:
        """Write the steps simulated since the last flush as one segment per table."""
        write("steps", pa.table(steps_rows))
        write("spans", pa.table(spans))
        write("trajectories", pa.concat_tables(trajectories))
        write("logprob", pa.Table.from_pylist(logprob_rows, schema=LOGPROB))
        for column in [*steps_rows.values(), *spans.values()]:
            column.clear()
        trajectories.clear()
        logprob_rows.clear()

    for rec in records:
        table = _trajectory_table(sc, rec)
        trajectories.append(table)
        staleness = rec.trainer_version - table.column("policy_version_start").to_numpy()
        counts["stale_groups"] += int((staleness > 0).reshape(-1, sc.group_size).any(axis=1).sum())
        counts["stale_trajs"] += int((staleness > 0).sum())
        deltas, pdiff = _logprob(
            sc,
            _rng(seed, _LOGPROBS, rec.step),
            staleness.astype(np.float64),
            rec.batch.response_tokens.astype(np.float64),
        )
        when = round(rec.end, 3)
        logprob_rows.append(logprob_histogram_row(rec.step, deltas, source="simulator", when=when))
        for key, value in _step_metrics(sc, rec, table, pdiff, counts).items():
            for col, v in zip(steps_rows, (rec.step, 0, when, key, value), strict=True):
                steps_rows[col].append(v)
        for phase, (a, b) in [*rec.phases.items(), ("step", (rec.start, rec.end))]:
            role = {"gen": "rollout", "reward": "reward"}.get(phase, "trainer")
            host = rollout_host if role == "rollout" else trainer_host
            for col, v in zip(spans, (rec.step, phase, role, host, round(a, 3), round(b, 3)), strict=True):
                spans[col].append(v)
        truth.append(_truth_row(sc, rec, table, staleness))
        timelines.append(_Timeline.of(rec))
        written.append(_Written.of(rec))
        if len(trajectories) == _CHUNK_STEPS:
            flush()
    if trajectories:
        flush()
    write("gpu", _gpu_table(sc, timelines, gpus, seed))
    meta = _meta(sc, steps, seed, [t.step for t in timelines], truth, _Written.concat(written))
    try:
        write_meta(path, meta)
    except OSError as exc:
        raise RunDirError(f"{path}: cannot write the run ({exc})") from None
    return meta


def _faults(sc: Scenario, steps: int, rows: _Written) -> list[dict[str, Any]]:
    """The injected faults, with what the written tables hold of each."""
    names = [s.name for s in sc.sources]
    out: list[dict[str, Any]] = []
    for f in sc.faults:
        inside = (rows.source == names.index(f.source)) & (rows.step >= f.steps[0]) & (rows.step <= f.steps[1])
        out.append(
            {
                "kind": "reward_error",
                "source": f.source,
                "steps": list(f.steps),
                "rate": f.rate,
                "error_codes": [c for c, _ in f.codes],
                "timeout_s": f.timeout_s,
                "errors_written": int(np.sum(inside & rows.error)),
            }
        )
    if sc.engine_weights:
        heavy = int(np.argmax(sc.engine_weights))
        out.append(
            {
                "kind": "engine_imbalance",
                "engine": f"engine-{heavy}",
                "weight": sc.engine_weights[heavy] / float(np.mean(sc.engine_weights)),
                "share": round(float(np.mean(rows.engine == heavy)), 6),
                "fair_share": round(1.0 / len(sc.engine_weights), 6),
            }
        )
    if sc.precision != "bf16" or sc.moe_flip_rate:
        out.append(
            {
                "kind": "logprob_mismatch",
                "precision": sc.precision,
                "abs_delta_scale": _DELTA_SCALE[sc.precision],
                "moe_routing_flip_rate": sc.moe_flip_rate,
                "steps": [1, steps],
            }
        )
    return out


def _reward_sources(sc: Scenario, rows: _Written) -> dict[str, dict[str, Any]]:
    """Per source: trajectories, errors, legitimate zeros and mean reward as written."""
    out = {}
    for i, s in enumerate(sc.sources):
        mine = rows.source == i
        ok = mine & rows.ok
        out[s.name] = {
            "trajectories": int(mine.sum()),
            "errors": int(np.sum(mine & rows.error)),
            "zero_rewards": int(np.sum(ok & (rows.reward == 0.0))),
            "mean_reward": round(float(np.mean(rows.reward[ok])), 6) if ok.any() else None,
        }
    return out


def _meta(
    sc: Scenario, steps: int, seed: int, step_numbers: list[int], truth: list[dict[str, float]], rows: _Written
) -> dict[str, Any]:
    n = sc.n_gpus
    per_step = {k: [round(row[k], 6) for row in truth] for k in truth[0]}

    def split(i: int, one_step: bool) -> dict[str, int]:
        r, t = balanced_split(
            n, truth[i]["T_thr_n_s"], truth[i]["T_tail_n_s"], truth[i]["train_n_s"], one_step=one_step
        )
        return {"rollout": r, "train": t}

    gpus = _sampled_gpus(sc)
    return {
        "created": EPOCH,
        "framework": "simulator",
        "framework_version": "1",
        "scenario": sc.name,
        "description": sc.summary,
        "seed": seed,
        "steps": steps,
        "model": {
            "name": sc.model.name,
            "total_params": sc.model.total_params,
            "active_params": sc.model.active_params,
        },
        "model_type": "moe" if sc.model.moe else "dense",
        "gpu": {"type": sc.gpu_type, "count": n, "peak_flops": sc.peak_flops, "memory_bytes": sc.gpu_mem_bytes},
        "topology": sc.topology,
        "split": {"rollout": sc.rollout_gpus, "train": sc.train_gpus},
        "batch_size": sc.batch_size,
        "group_size": sc.group_size,
        "max_response_length": sc.lengths.cap,
        "precision": sc.precision,
        "gpu_sampling": {
            "interval_s": _GPU_SAMPLE_S,
            "sampled": [
                {"host": _host(i)[0], "gpu": _host(i)[1], "role": role, "engine": None if e is None else f"engine-{e}"}
                for i, role, e in gpus
            ],
            "note": f"{len(gpus)} of {n} GPUs are sampled to keep the trace small",
        },
        "config": {
            "engines": sc.n_engines,
            "gpus_per_engine": sc.engine.gpus,
            "kv_tokens_per_engine": sc.engine.kv_tokens,
            "decode_step_s": {
                "base": sc.engine.step_base_s,
                "per_sequence": sc.engine.step_per_seq_s,
                "at_context": sc.engine.ref_context,
            },
            "routing": "prompt-sticky, weighted" if sc.engine_weights else "least-loaded",
            "response_mean_at_start": sc.lengths.mean,
            "response_growth_per_version": sc.lengths.growth,
            "tail_sigma": sc.lengths.sigma,
            "agent": None if sc.agent is None else {**sc.agent.__dict__, "long_wait_s": list(sc.agent.long_wait_s)},
            "staleness_threshold": sc.staleness_threshold if sc.topology == "async" else None,
            "weight_sync_s": sc.weight_sync_s,
            "mfu_forward": sc.mfu_forward,
            "mfu_train": sc.mfu_train,
            "logprob_sample_tokens": _LOGPROB_SAMPLE,
        },
        "ground_truth": {
            "conventions": "docs/simulator.md#ground-truth",
            "steps": step_numbers,
            "per_step": per_step,
            "mean": {k: round(float(np.mean(v)), 6) for k, v in per_step.items()},
            "balanced_split": {
                "async": {"first": split(0, False), "last": split(-1, False)},
                "one_step": {"first": split(0, True), "last": split(-1, True)},
            },
            "faults": _faults(sc, steps, rows),
            "reward_sources": _reward_sources(sc, rows),
        },
    }
