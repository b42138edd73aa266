"""Whole-step MFU and its waterfall: of the GPUs' peak over the whole step, where did each point go?

Evidence: step anatomy (phase seconds), tokens per step (verl's ``perf/total_num_tokens``,
else the ``trajectories`` prompt + response tokens, else ``prompt_length/mean`` +
``response_length/mean`` times ``batch_size * group_size`` from ``meta.json``), the active
parameter count N and the GPUs (count, peak bf16 FLOP/s) from ``meta.json``, the long-tail
split of generation, and verl's ``perf/mfu/*`` for a cross-check.

FLOPs per token ~ 12 N: generation 2N, old logprob 2N, ref 2N, actor update 6N; a critic
of N_c parameters adds values 2N_c and critic update 6N_c. A stage counts only when its
timer was logged (no ``timing_s/ref``: no ref model, 10 N). Attention FLOPs are left out.
A critic that was timed but whose size meta.json does not state (``model.critic_params``)
does no counted work: its stages are named in ``uncounted``, and the MFU is a lower bound.

Whole-step MFU = useful FLOPs / (step time * n GPUs * peak) = sum_i(T_i eta_i) / sum_i(T_i)
for colocated phases. The waterfall starts from 100% (every GPU at peak for the whole step)
and charges every lost GPU-second to exactly one cause, so the points sum to 100 - MFU:

- decode: generation's throughput part, less the FLOPs all of generation does;
- long_tail: the tail of generation (GPUs waiting for the slowest trajectories);
- decode_long_tail: both, in the steps whose tail is unknown (below);
- forward: old / ref logprob and values, less their FLOPs; training: actor and critic updates;
- weight_sync, switching: time with no useful FLOPs;
- idle_other: the rest of the step (reward, advantages, waiting, untimed time, and in pooled
  topologies the time a pool waits for the other).

The denominator is always the whole step's GPU time, n x step. When the ledger holds more
GPU-seconds than that (stage timers that overlap, or generation beside the step of an
overlapped run whose split is not known, so that every phase is charged to all n GPUs), the
lost GPU-seconds of every cause are scaled down alike to what the step leaves after the useful
work: MFU stays useful / (n x step x peak) and the points still add up to 100 - MFU.

In pooled topologies (separated / async with a known split) generation runs on the n_r
rollout GPUs and everything else on the n_t training GPUs. The rollout pool's busy time is the
rollout time from trajectories, else ``timing_s/gen``, at most the step. Under async streaming
it is :func:`topology.async_busy_share` x step, as the topology what-if takes it: verl's
occupancy share ``dynamic_resource/rollout_resource_utilization``, else ``1 -
fully_async/rollouter/idle_ratio`` (an upper bound: it counts the pool's draining tail as busy),
or the whole step when neither is logged (a trajectory's finish time then counts from a submit
steps earlier, and the trainer's ``gen`` timer is its wait for samples); async streaming hides
the tail, so it is charged no tail. verl's ``colocate_async`` shares its GPUs: it is charged as
colocated.

A step's tail can be unknown: its estimate from response lengths is NaN (lengths bunched near
the max), or the run measured or estimated the tail of other steps but this one has nothing to
tell it from (no finish times, no lengths). Charging it 0 would give the tail's points to decode
throughput. So where a recent step's tail is unknown (and the topology does not hide it), that
step's generation is not split: its lost points go to ``decode_long_tail``, "decode + long tail
(split unknown)", while the steps whose tail is known keep theirs in ``decode`` and
``long_tail``. ``tail_points_max`` is the most of ``decode_long_tail`` the tail can hold, each
unknown step's tail charged at its ``tail_share_max``. A run with no finish times and no lengths
in any step charges no tail at all, as before.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rlscope.advice.catalogue import finding
from rlscope.advice.finding import Finding, Severity
from rlscope.advice.thresholds import MFU_CROSSCHECK_RATIO
from rlscope.analyzers import anatomy as _anatomy
from rlscope.analyzers import longtail as _longtail
from rlscope.analyzers._data import RunFacts, RunFrames, load, recent, steps_text
from rlscope.analyzers.topology import BUSY_BOUND_NOTE, async_busy_bounded, async_busy_share, unmodelled
from rlscope.trace.reader import RunReader

__all__ = [
    "CAUSES",
    "VERL_MFU_KEYS",
    "LedgerEntry",
    "MFUResult",
    "Waterfall",
    "analyze",
    "cause_label",
    "drawn_causes",
    "flops_per_token",
    "ledger",
    "mfu_from_etas",
    "tokens_per_step",
    "uncounted_note",
    "unknown_tail_note",
    "verl_stage_mfu",
    "waterfall",
]

CAUSES = ("decode", "long_tail", "decode_long_tail", "forward", "training", "weight_sync", "switching", "idle_other")
_CAUSE_LABELS = {
    "decode": "decode throughput",
    "long_tail": "long tail",
    "decode_long_tail": "decode + long tail (split unknown)",
    "forward": "forward (logprobs)",
    "training": "training",
    "weight_sync": "weight sync",
    "switching": "switching",
    "idle_other": "idle / other",
}


def cause_label(cause: str, tail_estimated: bool) -> str:
    """A waterfall cause as every report and the dashboard name it, saying when the tail is estimated."""
    label = _CAUSE_LABELS.get(cause, cause)
    return label + " (estimated)" if cause == "long_tail" and tail_estimated else label


# verl's per-stage MFU keys and the anatomy phase each one measures (verl 0.9.1 logs no ref MFU;
# actor_infer only in the legacy and experimental trainers)
VERL_MFU_KEYS = {
    "perf/mfu/actor": "update_actor",
    "perf/mfu/critic": "update_critic",
    "perf/mfu/actor_infer": "old_log_prob",
}

_FORWARD = ("old_log_prob", "ref", "values")
_TRAINING = ("update_actor", "update_critic")
_CRITIC = ("values", "update_critic")
_CRITIC_HINT = """--meta '{"model": {"critic_params": N}}'"""


def flops_per_token(active_params: float, critic_params: float | None = None) -> dict[str, float]:
    """FLOPs per token of each verl stage: gen, old_log_prob, ref 2N; update_actor 6N; critic 2N_c / 6N_c."""
    n = float(active_params)
    out = {"gen": 2 * n, "old_log_prob": 2 * n, "ref": 2 * n, "update_actor": 6 * n}
    if critic_params:
        out.update(values=2 * float(critic_params), update_critic=6 * float(critic_params))
    return out


def drawn_causes(lost: Mapping[str, float | None]) -> list[str]:
    """The causes of ``lost`` a waterfall draws, so that every report and the dashboard draw the
    same bars: those with points known (NaN or None: none), less ``decode_long_tail`` where it holds
    none (no step's tail unknown)."""
    return [c for c, p in lost.items() if p is not None and not math.isnan(p) and (c != "decode_long_tail" or p > 0)]


def unknown_tail_note(steps: Sequence[int], points_max: float | None) -> str:
    """How every report says which steps' generation is one bar, and the most of it the tail can hold
    (``points_max`` NaN or None: no bound)."""
    most = (
        f"the tail holds at most {points_max:.1f} points of them, if all responses decode in one wave"
        if points_max is not None and math.isfinite(points_max)
        else "the lengths give no bound on the tail's part either"
    )
    return (
        f"no long tail is known in {steps_text(steps)}, which have no finish times and no estimate from "
        f"response lengths, so their generation's points are one bar, decode + long tail, not split; {most}"
    )


def uncounted_note(stages: Iterable[str]) -> str:
    """How every report words an MFU that leaves out a timed critic's FLOPs, and what gives them."""
    return f"a lower bound: {', '.join(stages)} not counted; {_CRITIC_HINT}"


def mfu_from_etas(seconds: Mapping[str, float], etas: Mapping[str, float]) -> float:
    """Time-weighted MFU of colocated phases: sum_i(T_i eta_i) / sum_i(T_i) (phases without eta count 0)."""
    total = sum(seconds.values())
    return sum(t * etas.get(k, 0.0) for k, t in seconds.items()) / total


@dataclass(frozen=True)
class LedgerEntry:
    """GPU-seconds charged to one cause, and the GPU-seconds of peak-rate work done in them."""

    cause: str
    gpu_s: float | np.ndarray  # an array over steps in the MFU's ledger of every step at once
    useful_gpu_s: float | np.ndarray = 0.0


@dataclass(frozen=True)
class Waterfall:
    """``mfu`` (fraction) and ``lost``: points (of 100) per cause in :data:`CAUSES` order."""

    mfu: float
    lost: pd.Series


def waterfall(entries: Iterable[LedgerEntry], budget_gpu_s: float) -> Waterfall:
    """Charge every GPU-second of ``budget_gpu_s`` (n GPUs x step time) to one cause.

    GPU-seconds not in any entry go to ``idle_other``. MFU is the useful GPU-seconds over the
    budget, always. If the entries exceed the budget (overlapping timers, or pools of unknown
    size), the lost GPU-seconds of every entry are scaled down alike to the budget less the
    useful work, so that the points still add up to 100 - MFU.
    """
    mfu, lost = _charge(list(entries), budget_gpu_s)
    return Waterfall(mfu, pd.Series(lost, index=pd.Index(CAUSES, name="cause"), dtype=float))


def _charge(entries: list[LedgerEntry], budget_gpu_s: float) -> tuple[float, dict[str, float]]:
    """:func:`waterfall` as plain numbers (MFU, points per cause): it runs once per step."""
    budget = budget_gpu_s
    if not budget > 0:
        return math.nan, dict.fromkeys(CAUSES, math.nan)
    useful = sum(e.useful_gpu_s for e in entries)
    wasted = sum(e.gpu_s - e.useful_gpu_s for e in entries)
    scale = 1.0
    if useful + wasted > budget and wasted > 0:  # more GPU time charged than the step holds
        scale = max(budget - useful, 0.0) / wasted
    lost = dict.fromkeys(CAUSES, 0.0)
    for e in entries:
        lost[e.cause] += 100.0 * (e.gpu_s - e.useful_gpu_s) * scale / budget
    lost["idle_other"] += 100.0 * (budget - useful - wasted * scale) / budget
    return useful / budget, lost


def ledger(
    seconds: Mapping[str, float | np.ndarray],
    flops: Mapping[str, float | np.ndarray],
    *,
    tail_s: float | np.ndarray,
    peak: float,
    n_rollout: int,
    n_train: int,
    rollout_s: float | np.ndarray | None = None,
) -> list[LedgerEntry]:
    """One step's ledger from anatomy phase ``seconds`` and per-stage ``flops``, or every step's at
    once from arrays over the steps (the same arithmetic, element by element).

    Colocated: ``n_rollout = n_train = n`` and generation lasts ``seconds["gen"]``. Pooled:
    generation runs ``rollout_s`` on ``n_rollout`` GPUs, the rest on ``n_train`` GPUs.
    """
    gen_s = seconds["gen"] if rollout_s is None else rollout_s
    fwd = sum(flops.get(s, 0.0) for s in _FORWARD) / peak
    train = sum(flops.get(s, 0.0) for s in _TRAINING) / peak
    return [
        LedgerEntry("decode", n_rollout * (gen_s - tail_s), flops.get("gen", 0.0) / peak),
        LedgerEntry("long_tail", n_rollout * tail_s),
        LedgerEntry("forward", n_train * sum(seconds[s] for s in _FORWARD), fwd),
        LedgerEntry("training", n_train * sum(seconds[s] for s in _TRAINING), train),
        LedgerEntry("weight_sync", n_train * seconds["weight_sync"]),
        LedgerEntry("switching", n_train * seconds["switching"]),
    ]


def tokens_per_step(frames: RunFrames) -> pd.Series:
    """Prompt + response tokens per step, from the best source the run has (see module docstring)."""
    steps, traj = frames.steps, frames.trajectories
    if "perf/total_num_tokens" in steps:
        return steps["perf/total_num_tokens"].dropna()
    if traj.has("response_tokens"):
        per = np.nan_to_num(traj.numbers("prompt_tokens").astype(float)) + np.nan_to_num(
            traj.numbers("response_tokens").astype(float)
        )
        g = traj.step_groups()
        return pd.Series(np.add.reduceat(g.take(per), g.starts), index=pd.Index(g.keys, name="step"))
    seqs = frames.facts.sequences_per_step
    if seqs and {"prompt_length/mean", "response_length/mean"} <= set(steps.columns):
        return ((steps["prompt_length/mean"] + steps["response_length/mean"]) * seqs).dropna()
    return pd.Series(dtype=float)


@dataclass(frozen=True)
class MFUResult:
    """MFU per step and the waterfall of the last quarter of the run.

    ``per_step``: index step; ``step_s``, ``tokens``, ``flops`` (useful), ``mfu``, and the
    stage efficiencies ``eta_gen`` (over all of generation), ``eta_thr`` (over its throughput
    part), ``eta_forward``, ``eta_training``. ``mfu``: recent whole-step MFU (fraction).
    ``waterfall``: points lost per cause (sums to 100 - 100 * mfu). ``cross_check``: index
    verl key; ``stage``, ``verl``, ``rlscope``, ``ratio`` (verl / rlscope), recent means.
    ``tail_estimated``: the long tail it charges is estimated from response lengths.
    ``tail_unknown``: a recent step whose tail the waterfall would charge has none known
    (``tail_unknown_steps``, see the module docstring): its generation's lost points are in
    ``waterfall["decode_long_tail"]`` (0 when no step's tail is unknown), the other steps'
    in ``decode`` and ``long_tail`` (both NaN when every recent step's tail is unknown), and
    ``tail_points_max`` is the most of ``decode_long_tail`` the tail can hold (NaN otherwise,
    or where an unknown step has no bound); ``eta_thr`` is NaN in a step whose tail is unknown.
    ``scaled``: the recent ledger held more GPU-seconds than the steps (see the module
    docstring), so its lost points were scaled to fit. ``uncounted``: critic stages timed in
    the recent steps whose FLOPs are left out for want of ``model.critic_params``.
    ``verl_stage``: verl's own ``perf/mfu/*`` recent means (:func:`verl_stage_mfu`), kept where
    ``mfu`` is unknown too, so a report without the hardware still shows what verl measured.
    """

    per_step: pd.DataFrame
    mfu: float
    waterfall: pd.Series
    cross_check: pd.DataFrame
    findings: list[Finding] = field(default_factory=list)
    missing: tuple[str, ...] = ()  # what MFU lacks: the ``rlscope diagnose`` options that give it, or what to log
    tail_estimated: bool = False
    scaled: bool = False
    uncounted: tuple[str, ...] = ()
    tail_unknown: bool = False
    tail_points_max: float = math.nan
    tail_unknown_steps: tuple[int, ...] = ()
    verl_stage: dict[str, float] = field(default_factory=dict)


def analyze(
    run: RunReader | RunFrames | str | os.PathLike[str],
    anatomy: _anatomy.AnatomyResult | None = None,
    longtail: _longtail.LongTailResult | None = None,
) -> MFUResult:
    """Compute MFU per step, the recent waterfall, and cross-check verl's own MFU."""
    frames = load(run)
    anatomy = anatomy or _anatomy.analyze(frames)
    longtail = longtail or _longtail.analyze(frames)
    facts = frames.facts
    tokens = tokens_per_step(frames)
    steps = anatomy.seconds.index.intersection(tokens.index)
    missing = _missing(frames, tokens, anatomy.seconds)
    if missing or steps.empty:
        # the headline's window, the last quarter of the timed steps
        verl = verl_stage_mfu(frames.steps.reindex(recent(anatomy.seconds).index))
        return MFUResult(
            pd.DataFrame(),
            math.nan,
            pd.Series(math.nan, index=list(CAUSES)),
            pd.DataFrame(),
            missing=missing,
            verl_stage=verl,
        )
    per_token = flops_per_token(facts.active_params, facts.critic_params)
    n_train = facts.train_gpus if facts.is_pooled else facts.n_gpus
    # every step at once, a numpy array per quantity: the same arithmetic per step as a loop over
    # the steps, which built ledgers of Python numbers and cost most of the MFU's time
    table = anatomy.seconds.loc[steps]
    sec = {c: table[c].to_numpy() for c in table.columns}
    tokens_at = tokens.loc[steps].to_numpy()
    flops = {s: np.where(sec[s] > 0, f * tokens_at, 0.0) for s, f in per_token.items() if s in sec}  # ran: > 0
    told_at = steps.isin(longtail.per_step.index)  # the steps whose tail the run tells, NaN or not
    tail = np.where(told_at, longtail.per_step["tail_share"].reindex(steps).to_numpy(dtype=float), 0.0)
    rollout_s = np.where(told_at, longtail.per_step["rollout_s"].reindex(steps).to_numpy(dtype=float), sec["gen"])
    busy = async_busy_share(frames.steps)
    busy_share = np.where(steps.isin(busy.index), busy.reindex(steps).to_numpy(dtype=float), 1.0)
    charge = functools.partial(_step_ledger, facts, sec, flops, busy_share=busy_share, rollout_s=rollout_s)
    ledgers = charge(tail=np.where(np.isnan(tail), 0.0, tail))
    # an estimate the lengths cannot give (NaN) has a bound; a measured NaN (one trajectory) has no tail;
    # a step the run's finish times or lengths leave out, where they give other steps', has neither
    estimate_unknown = np.isnan(tail) & told_at & longtail.estimated
    told = not longtail.per_step.empty  # the run tells some step's tail: a step it leaves out is unknown
    untold = told & ~told_at & (sec["gen"] > 0)
    hidden = facts.is_pooled and facts.kind == "async_streaming"  # no tail is charged at all
    unknown_at = (estimate_unknown | untold) & (not hidden)
    bound = longtail.per_step["tail_share_max"].reindex(steps).to_numpy(dtype=float) if longtail.estimated else math.nan
    budgets = facts.n_gpus * sec["step"]
    with np.errstate(divide="ignore", invalid="ignore"):  # _charge's MFU where the step's budget is > 0
        mfu = np.where(budgets > 0, sum(e.useful_gpu_s for e in ledgers) / budgets, math.nan)
    efficiencies = _efficiencies(ledgers)
    efficiencies["eta_thr"] = np.where(unknown_at, math.nan, efficiencies["eta_thr"])  # its throughput part unknown
    per_step = pd.DataFrame(
        efficiencies | {"step_s": sec["step"], "tokens": tokens_at, "flops": sum(flops.values()), "mfu": mfu},
        index=pd.Index(steps, name="step"),
    )
    window = recent(per_step).index
    at = {step: i for i, step in enumerate(steps)}
    at_window = {s: _entries_at(ledgers, at[s]) for s in window}
    unknown = {s for s in window if unknown_at[at[s]]}
    bounded = charge(tail=bound) if unknown else []
    at_bound = {s: _entries_at(bounded, at[s]) for s in unknown}
    with np.errstate(divide="ignore", invalid="ignore"):
        stage_eta = {s: flops[s] / (n_train * sec[s] * facts.peak_flops) for s in VERL_MFU_KEYS.values() if s in flops}
    budget = float(facts.n_gpus * per_step.loc[window, "step_s"].sum())
    entries = [e for s in window for e in (_unsplit(at_window[s]) if s in unknown else at_window[s])]
    fall = waterfall(entries, budget)
    scaled = sum(e.gpu_s for e in entries) > budget * (1 + 1e-9)
    lost, tail_max = fall.lost.copy(), math.nan
    unknown_steps = tuple(int(s) for s in window if s in unknown)
    tail_unknown = bool(unknown_steps)
    if tail_unknown:
        # the unknown steps' tail at its bound, the known steps' as charged: the difference is the bound's part
        bound = waterfall([e for s in window for e in at_bound.get(s, at_window[s])], budget).lost
        held = float(bound["long_tail"] - lost["long_tail"])  # NaN where an unknown step has no bound
        tail_max = held if math.isnan(held) else min(held, float(lost["decode_long_tail"]))
        if len(unknown_steps) == len(window):  # no step of the window has its generation split
            lost["decode"] = lost["long_tail"] = math.nan
    ran = {s: sec[s] > 0 for s in stage_eta}
    ours = pd.DataFrame.from_dict(
        {s: {k: float(eta[at[s]]) for k, eta in stage_eta.items() if ran[k][at[s]]} for s in window}, orient="index"
    )
    verl = verl_stage_mfu(frames.steps.reindex(window))
    check = _cross_check(verl, ours)
    # a timed critic of unknown size: its FLOPs are missing from the MFU, which must say so
    uncounted = tuple(
        s for s in _CRITIC if s not in per_token and s in sec and (sec[s][[at[t] for t in window]] > 0).any()
    )
    result = MFUResult(
        per_step,
        fall.mfu,
        lost,
        check,
        tail_estimated=longtail.estimated,
        scaled=scaled,
        uncounted=uncounted,
        tail_unknown=tail_unknown,
        tail_points_max=tail_max,
        tail_unknown_steps=unknown_steps,
        verl_stage=verl,
    )
    unknown_split = facts.overlapped and not (facts.is_pooled or facts.shares_gpus)
    # an async rollout pool whose busy time is not logged is charged busy: decode holds its idle time
    async_pool = facts.is_pooled and facts.kind == "async_streaming"
    pool_assumed = async_pool and unmodelled(facts, frames.steps) is not None
    pool_bounded = async_pool and not pool_assumed and async_busy_bounded(frames.steps)
    result.findings.extend(
        _findings(result, unknown_split=unknown_split, pool_assumed=pool_assumed, pool_bounded=pool_bounded)
    )
    return result


def _missing(frames: RunFrames, tokens: pd.Series, seconds: pd.DataFrame) -> tuple[str, ...]:
    """The facts MFU needs that the run does not state, named as the options that give them, or
    as what the run would have to log (``seconds``: the step anatomy's phase seconds)."""
    facts = frames.facts
    out = []
    if not facts.n_gpus:
        out.append("--gpus")
    if not facts.peak_flops:
        out.append("--gpu-type or --peak-tflops")
    if not facts.active_params:
        out.append("--active-params")
    if tokens.empty:
        lengths = {"prompt_length/mean", "response_length/mean"} <= set(frames.steps.columns)
        out.append(
            """--meta '{"batch_size": B, "group_size": G}'"""
            if lengths
            else "tokens per step (perf/total_num_tokens or trajectory token counts)"
        )
    # FLOPs are counted for the stages that ran (a timer above zero): a step timer alone computed none
    computing = seconds[[s for s in flops_per_token(1.0, 1.0) if s in seconds]].gt(0).any(axis=1)
    if seconds.empty:
        out.append(_anatomy.STEP_TIMERS_WANTED)
    elif not computing.any():
        out.append("a timer above zero of a stage that computes (timing_s/gen, old_log_prob, ref, update_actor)")
    elif not tokens.empty and seconds.index[computing].intersection(tokens.index).empty:
        out.append("tokens per step in the steps that have timers")
    return tuple(out)


def _step_ledger(
    facts: RunFacts,
    sec: Mapping[str, np.ndarray],
    flops: Mapping[str, np.ndarray],
    *,
    tail: np.ndarray | float,
    busy_share: np.ndarray,
    rollout_s: np.ndarray,
) -> list[LedgerEntry]:
    """The steps' ledger, each entry an array over the steps: ``tail`` share of generation, and when
    pooled the rollout pool's busy time: the measured ``rollout_s`` (at most the step), or under
    async streaming ``busy_share`` of the step (see :func:`topology.async_busy_share`), the tail
    being hidden."""
    peak = float(facts.peak_flops or math.nan)
    if not facts.is_pooled:
        n = int(facts.n_gpus or 0)
        return ledger(sec, flops, tail_s=tail * sec["gen"], peak=peak, n_rollout=n, n_train=n)
    if facts.kind == "async_streaming":
        rollout_s, tail_s = busy_share * sec["step"], 0.0
    else:
        rollout_s = np.where(sec["step"] < rollout_s, sec["step"], rollout_s)  # min(rollout_s, step), NaN kept
        tail_s = tail * rollout_s
    return ledger(
        sec,
        flops,
        tail_s=tail_s,
        peak=peak,
        n_rollout=int(facts.rollout_gpus or 0),
        n_train=int(facts.train_gpus or 0),
        rollout_s=rollout_s,
    )


def _unsplit(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """A step's ledger whose tail is unknown (charged 0): its generation moved to ``decode_long_tail``."""
    return [dataclasses.replace(e, cause="decode_long_tail") if e.cause == "decode" else e for e in entries]


def _entries_at(entries: list[LedgerEntry], i: int) -> list[LedgerEntry]:
    """Step ``i``'s ledger of Python numbers, of the steps' ledger of arrays (or numbers)."""
    return [LedgerEntry(e.cause, _item(e.gpu_s, i), _item(e.useful_gpu_s, i)) for e in entries]


def _item(value: np.ndarray | float, i: int) -> float:
    return float(value[i]) if isinstance(value, np.ndarray) else float(value)


def _efficiencies(entries: list[LedgerEntry]) -> dict[str, np.ndarray]:
    """Per step of the steps' ledger (arrays over the steps), each stage's useful share of its GPU-seconds."""
    by = {e.cause: e for e in entries}

    def eta(*causes: str) -> np.ndarray:
        gpu_s = sum(by[c].gpu_s for c in causes)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(gpu_s > 0, sum(by[c].useful_gpu_s for c in causes) / gpu_s, math.nan)

    return {
        "eta_gen": eta("decode", "long_tail"),
        "eta_thr": eta("decode"),
        "eta_forward": eta("forward"),
        "eta_training": eta("training"),
    }


def verl_stage_mfu(steps: pd.DataFrame) -> dict[str, float]:
    """verl's own MFU of each stage it measures (``perf/mfu/*``, :data:`VERL_MFU_KEYS`), its mean over
    ``steps``: the MFU of that stage alone, not of the whole step. verl logs 0 where it could not
    estimate it (a model it has no FLOP counter for), so zeros are unset; a key with none left is absent."""
    out = {}
    for key in VERL_MFU_KEYS:
        if key in steps:
            mean = float(steps[key].where(steps[key] > 0).mean())
            if mean > 0:
                out[key] = mean
    return out


def _cross_check(verl_stage: Mapping[str, float], ours: pd.DataFrame) -> pd.DataFrame:
    """verl's per-stage MFU (:func:`verl_stage_mfu`) against rlscope's stage efficiency (recent means)."""
    rows = {}
    for key, verl in verl_stage.items():
        stage = VERL_MFU_KEYS[key]
        if stage not in ours:
            continue
        mine = float(ours[stage].mean())
        if mine > 0:
            rows[key] = (stage, verl, mine, verl / mine)
    return pd.DataFrame.from_dict(rows, orient="index", columns=["stage", "verl", "rlscope", "ratio"])


def _tail_clause(r: MFUResult) -> str:
    """What the waterfall finding says of the long tail: the steps it is unknown in, or estimated."""
    estimated = r.tail_estimated and not math.isnan(r.waterfall["long_tail"])  # some step's tail is drawn
    if r.tail_unknown:
        rest = "; the other steps' long tail is estimated from response lengths" if estimated else ""
        return f" ({unknown_tail_note(r.tail_unknown_steps, r.tail_points_max)}{rest})"
    return " (the long tail is estimated from response lengths)" if estimated else ""


def _findings(
    r: MFUResult, *, unknown_split: bool = False, pool_assumed: bool = False, pool_bounded: bool = False
) -> list[Finding]:
    out: list[Finding] = []
    if r.mfu > 1:
        return [
            finding(
                "mfu-impossible",
                Severity.CRITICAL,
                {"mfu": r.mfu},
                "check the active parameters (not the total of a mixture of experts), the GPU count and type, "
                "and the tokens per step; the waterfall is not drawn until MFU is possible",
            )
        ]
    if not math.isnan(r.mfu):
        top = str(r.waterfall.idxmax())
        points = {f"lost_{c}": float(p) for c, p in r.waterfall.items()}
        out.append(
            finding(
                "mfu-waterfall",
                Severity.INFO,
                {
                    "mfu": r.mfu,
                    "top_cause": top,
                    "top_label": cause_label(top, r.tail_estimated),
                    "top_points": float(r.waterfall[top]),
                    "tail_estimated": r.tail_estimated,
                    "tail_unknown": r.tail_unknown,
                    "tail_points_max": r.tail_points_max,
                    "tail_unknown_steps": list(r.tail_unknown_steps),
                    "scaled": r.scaled,
                    "rollout_pool_assumed_busy": pool_assumed,
                    "uncounted": list(r.uncounted),
                    "rollout_pool_busy_upper_bound": pool_bounded,
                    **points,
                },
                "100% -> "
                + " ".join(f"-{p:.1f} {cause_label(c, r.tail_estimated)}" for c, p in r.waterfall.items() if p >= 0.05)
                + f" = {r.mfu:.1%}: attack {cause_label(top, False)} first, and judge every change by "
                "step time, not MFU"
                + _tail_clause(r)
                + (
                    f". The critic's size is not in meta.json, so its stages ({', '.join(r.uncounted)}) count no "
                    f"FLOPs and the MFU is a lower bound: give it with {_CRITIC_HINT}"
                    if r.uncounted
                    else ""
                )
                + (
                    ". The phases take more GPU time than the steps hold"
                    + (
                        " (generation beside the step, with no usable rollout:train split in meta.json to charge each pool "
                        "its own time)"
                        if unknown_split
                        else " (stage timers that overlap)"
                    )
                    + ": every cause's lost points are scaled alike to fit"
                    if r.scaled
                    else ""
                )
                + (
                    ". The rollout pool is charged busy the whole step (its busy time, verl's "
                    "dynamic_resource/rollout_resource_utilization or fully_async/rollouter/idle_ratio, is not logged), "
                    "so decode throughput holds whatever time it idled"
                    if pool_assumed
                    else ""
                )
                + (f". The decode charge holds the part-occupied drain: {BUSY_BOUND_NOTE}" if pool_bounded else ""),
            )
        )
    for key, row in r.cross_check.iterrows():
        if not 1 / MFU_CROSSCHECK_RATIO <= row["ratio"] <= MFU_CROSSCHECK_RATIO:
            out.append(
                finding(
                    "mfu-cross-check-mismatch",
                    Severity.WARN,
                    {"verl_key": key, "stage": row["stage"], "verl": row["verl"], "rlscope": row["rlscope"]},
                    f"verl's {key} is {row['ratio']:.2g}x rlscope's estimate: check the active parameter count, "
                    "GPU peak FLOP/s and GPU count in meta.json",
                )
            )
    return out
