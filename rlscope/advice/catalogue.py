"""Every finding id rlscope can emit, with its title template and runbook text.

The id is the contract: alert rules link ``runbook#<id>``, reports group by it, and tests
check that analyzers emit only ids listed here. ``title`` is a ``str.format`` template over
the finding's evidence; ``runbook`` says what the finding means, how to confirm it and
what to change, in that order.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlscope.advice.finding import Finding, Severity, fmt_last_steps, fmt_seconds, fmt_steps

__all__ = ["CATALOGUE", "Entry", "finding"]


@dataclass(frozen=True)
class Entry:
    """One catalogue row: the stable id, a title template and the runbook section."""

    id: str
    title: str
    runbook: str


_ENTRIES = (
    Entry(
        "generation-dominates",
        "generation takes {generation_share:.0%} of each step",
        "Rollout is the bulk of wall-clock (60-80% in public reports) because decode is memory-bound. "
        "Confirm with the step anatomy over the last quarter of the run. Levers: a larger KV pool "
        "(gpu_memory_utilization), fewer tensor-parallel ranks per engine, cutting the long tail "
        "(see long-tail-dominates), or overlapping rollout with training (async-recommended).",
    ),
    Entry(
        "generation-share-growing",
        "generation share grew from {first:.0%} to {last:.0%} of the step",
        "Responses get longer during training, and generation time grows faster than training time, "
        "so the best rollout:train split drifts towards rollout (2:1 towards 3:1 or 4:1). Check "
        "response_length/mean over the run. For separated or async runs, re-run the topology what-if "
        "and move GPUs to rollout; for colocated runs, expect the async speedup to grow.",
    ),
    Entry(
        "untracked-time",
        "{other_share:.0%} of step time is outside every verl stage timer",
        "timing_s/step minus the named stages is time nobody measured: data loading, logging, "
        "checkpoint hooks, Ray object-store traffic or custom code between stages. Add spans around the "
        "suspects (Recorder.span) or profile one step before tuning anything else.",
    ),
    Entry(
        "switching-costly",
        "switching memory between trainer and engine takes {switching_share:.0%} of each step",
        "Colocated switching normally costs under 2% of a step (32B on 8 GPUs: ~130 GB, 6.5 s). More "
        "means offload paths are slow (pageable instead of pinned memory, CPU contention). Check the "
        "offload settings; the larger hidden cost of colocation is the smaller KV pool, not the switch.",
    ),
    Entry(
        "long-tail-dominates",
        "the slowest 10% of trajectories take {tail_share:.0%} of rollout time ({basis})",
        "Generation is a throughput part (all sequences decoding) plus a tail (fewer and fewer sequences "
        "while the GPUs wait for the longest). Adding GPUs shrinks only the throughput part. Levers: async "
        "streaming or partial rollout (the trainer stops waiting for the last trajectories), a lower "
        "max response length or turn limit, or over-sampling and dropping the slowest requests. Under async "
        "streaming on separate pools the trainer already does not wait for them: there the longest answers "
        "are the stalest samples, and partial rollout or a lower length limit shortens them.",
    ),
    Entry(
        "long-tail-growing",
        "tail share grew from {first:.0%} to {last:.0%} of rollout time ({basis})",
        "Responses are getting longer and more spread out (or environment waits are growing). The gain "
        "from async streaming grows with the tail (under async streaming, so does the staleness of the "
        "longest answers); re-run the topology what-if with recent steps. Judged only where the recent "
        "tail share is known (steps whose estimate is unknown are left out of the trend): a run whose "
        "recent estimate is unknown is not evaluated, as rlscope compare says. An estimate from response "
        "lengths reads 0 in a step where over 10% of responses hit the length cap (its slowest 10% stop "
        "there together): that is the cap cutting the tail short, not no tail, so such steps are left out "
        "of the trend and named, and a run whose recent steps are at the cap, or with one step below it, "
        "is not evaluated.",
    ),
    Entry(
        "mfu-waterfall",
        "whole-step MFU {mfu:.1%}; the largest loss is {top_label} ({top_points:.1f} points)",
        "The waterfall starts at 100% of peak FLOP/s over every GPU for the whole step and charges each "
        "lost point to exactly one cause. Judge changes by wall-clock, not MFU alone: a PPO value model "
        "raises MFU while making steps slower. MFU is always useful FLOPs over n GPUs x step x peak; where the "
        "phases hold more GPU time than the step (overlapping timers, or an overlapped run without its split), "
        "every cause's points are scaled alike to fit.",
    ),
    Entry(
        "stage-timers-overlap",
        "stage timers add up to more than the step in {steps} of {of_steps:steps}",
        "verl times each stage on its own; when one timer is nested in another, or two stages run at the same "
        "time, their sum exceeds timing_s/step (the log cannot tell which). The step time stays the wall "
        "clock's, so the phases' shares of it add up to more than 100%; the MFU waterfall charges the stages' "
        "sum, and the what-if treats the stages as sequential.",
    ),
    Entry(
        "mfu-impossible",
        "whole-step MFU is {mfu:.3g}x the GPUs' peak FLOP/s: a fact it rests on is wrong",
        "No job does more FLOPs than its GPUs' peak. The active parameter count is too high (a total "
        "instead of active parameters, or a wrong unit), the GPU count too low, the peak FLOP/s too low "
        "(the wrong GPU type), or the tokens per step too many. Fix meta.json or the command-line options; "
        "until then the waterfall and the what-if's FLOP-based numbers mean nothing.",
    ),
    Entry(
        "mfu-cross-check-mismatch",
        "verl {verl_key} says {verl:.1%}, rlscope's estimate for {stage} is {rlscope:.1%}",
        "Two MFU estimates of the same stage disagree by more than a factor of 2. Check meta.json: "
        "active parameter count, GPU type and peak FLOP/s, GPU count; and whether verl counts PPO epochs "
        "or attention FLOPs that rlscope's 2N/6N-per-token estimate leaves out.",
    ),
    Entry(
        "split-imbalanced",
        "rollout:train split {n_rollout}:{n_train} is unbalanced; {best_rollout}:{best_train} predicts {speedup:.2f}x",
        "The split must balance time, not FLOPs. The recommended split is the one with the shortest "
        "predicted step for the run's topology, with times measured on the same GPUs. Async streaming: where "
        "both sides take the same time without the tail it overlaps, n_r/n_t = T_thr/T_train. One-step "
        "overlap: where T_thr n/n_r + T_tail = T_train n/n_t (the tail does not shrink with GPUs). Separated "
        "and run one after the other: where their sum is least, n_r/n_t = sqrt(T_thr/T_train). "
        "Move the GPUs the recommendation names and re-check after a few steps; the balance drifts as "
        "responses grow.",
    ),
    Entry(
        "split-drift",
        "the balanced rollout:train split drifted from {first_rollout}:{first_train} to {last_rollout}:{last_train}",
        "Responses lengthen during training; generation time grows 2-4x while training grows 2x, so the split "
        "that balanced the two sides at the start no longer does (2:1 drifting towards 3:1 or 4:1). The "
        "recommendation names how many GPUs to move and the step time the ledger predicts before and after; "
        "for async runs verl's idle ratios are the measured check (rollouter idle high and trainer idle low: "
        "move GPUs to the trainer; the reverse: to rollout). Move a node at a time and re-measure.",
    ),
    Entry(
        "async-idle-imbalanced",
        "rollouter idle {rollouter_idle:.0%}, trainer idle {trainer_idle:.0%}: move GPUs to the {target}",
        "verl's rule for async runs: a rollouter that idles while the trainer is busy has too many GPUs, "
        "and the reverse. Move GPUs in small steps (a node at a time where pools come by the node) and "
        "watch both idle ratios; the recommendation says whether the topology model agrees.",
    ),
    Entry(
        "separated-sync",
        "separated pools run one after the other: {step_now:secs} s a step, as modelled",
        "Separating rollout and training without overlapping them is the worst arrangement: at any moment "
        "one pool idles. Enable one-step overlap or async streaming, or go back to colocation.",
    ),
    Entry(
        "async-recommended",
        "async streaming at {best_rollout}:{best_train} predicts {step_async:secs} s a step, {speedup:.2f}x {baseline}",
        "Async streaming is colocation minus the long tail: the trainer never waits for the last "
        "trajectories. The price is off-policy samples (staleness), which needs importance-sampling "
        "correction and a staleness bound (s <= 2-4 is reported lossless). Try verl's async trainer "
        "(separate_async on separate pools; a colocate_async run, whose GPUs take turns, is told what "
        "separate pools would give) and compare reward curves. For separated pools the "
        "prediction starts from the current topology at its best split (see split-imbalanced), so async is "
        "credited only with what rebalancing alone would not give.",
    ),
    Entry(
        "engine-imbalanced",
        "rollout engines are unevenly loaded: CV {cv:.0%}, utilisation {utilisation:.0%}",
        "The synchronous rollout waits for the heaviest engine, so mean utilisation is mean/max load. "
        "Balance per step (route by outstanding tokens, not request count) or steal work between engines; "
        "online balancing has cut the CV from 38% to under 2%.",
    ),
    Entry(
        "sync-bubble",
        "weight sync takes {bubble:.0%} of the trainer's update-and-sync time ({t_sync_s:secs} s per sync, "
        "after {k:steps} of {t_mb_s:secs} s updates)",
        "The sync bubble is T_sync / (k T_mb + T_sync). Shrink T_sync (multi-source or delta sync, "
        "bucketed transfers) or sync less often (larger k), at the price of staler samples.",
    ),
    Entry(
        "staleness-high",
        "90% of samples are up to {p90:.0f} policy versions stale (max {max:.0f})",
        "Samples s <= 2-4 versions stale with correction are reported lossless; beyond that check the "
        "importance-weight clipping rate and the reward curve. Lower the staleness bound or sync more often.",
    ),
    Entry(
        "staleness-unexplained",
        "samples are {mean_observed:.1f} versions stale where generation and wait explain {mean_expected:.1f}",
        "A sample's staleness should be about (generation time + wait) / T_sync: the weight syncs that "
        "happen between its submission and the trainer taking its batch. More than that means samples "
        "queue past their own step, or versions are stamped at the wrong moment. Less means syncs are rarer "
        "than the step times suggest. Either way, fix the cause before tuning the staleness bound on these "
        "figures.",
    ),
    Entry(
        "reward-no-signal",
        "every sample of {steps:last_steps} got reward {reward:g}",
        "Policy-gradient RL learns from differences in reward. When every sample of a step scores the "
        "same (verl's critic/score max equals min), a group-relative advantage is 0 for every token, and "
        "with advantages logged as all 0 no estimator learns anything. A reward stuck at 0 is almost "
        "always a format or parser mismatch between the model's answers and the reward function, or a "
        "reward service that never scores; compare a few generated answers with what the reward function "
        "expects. Stuck at the maximum, the data is too easy: filter solved prompts.",
    ),
    Entry(
        "stale-drop-length-bias",
        "dropping samples staler than {threshold} versions removes answers {bias:.2f}x longer than kept",
        "Staleness grows with generation time, so dropping stale samples systematically removes long "
        "answers and biases training towards short ones. Prefer the 'wait' strategy or partial rollout.",
    ),
    # signals: GPU idle, log-prob mismatch, rewards by source
    Entry(
        "gpu-idle-in-training",
        "{role} GPUs are idle for {idle_share:.0%} of each recent step",
        "NVML says the learner GPUs sit below the idle utilisation for much of each step: the sawtooth "
        "of synchronous RL, where the trainer waits for rollout (49.5% of each step in ThunderSyncRL's "
        "SWE-smith runs, up to 81% elsewhere). Check the per-phase idle table: idle during gen means the "
        "trainer waits for the tail. Overlap rollout and training, or cut the tail. A run that already "
        "overlaps them (one-step overlap, async streaming on separate pools) waits because its rollout pool is "
        "too slow for the trainer: move GPUs to rollout (one-step overlap also still waits for the tail).",
    ),
    Entry(
        "logprob-mismatch-high",
        "trainer-rollout log-prob mismatch for {precision}: {gap}",
        "Per-token |log p_trainer - log p_rollout| is larger than the rollout precision explains (dense "
        "bf16 ~1e-3, FP8 ~1e-2; MoE routing flips can exceed 1 for single tokens). Check that weight sync "
        "finished before generation, that both sides use the same weights, dtype, kernels, tokenizer and "
        "sampling parameters, and keep truncated importance sampling on.",
    ),
    Entry(
        "moe-routing-flips",
        "{flip_share:.3%} of tokens differ by more than 1 in log-prob (MoE routing flips)",
        "In a mixture-of-experts model a tiny numeric difference can route a token to another expert, and "
        "then trainer and rollout disagree by more than 1 in log-prob for that token. That is expected for "
        "MoE; truncated importance sampling (min(w, 2)) bounds the damage. Watch the clip share: if it "
        "grows, consider routing replay (recording the rollout's expert choices for the trainer).",
    ),
    Entry(
        "is-clip-high",
        "{clip_share:.1%} of tokens hit the importance-weight cap",
        "Truncated importance sampling caps w = p_trainer / p_rollout at 2; every clipped token loses "
        "part of its gradient. Reduce the mismatch (rollout precision, staleness) before raising the cap.",
    ),
    Entry(
        "reward-source-failing",
        "the reward service for {source!r} failed on {error_rate:.0%} of samples in {steps_text}",
        "Samples whose reward call failed carry no signal. Reward services must return error codes, and "
        "rewards must be monitored per source. Triage: data -> version -> async -> implementation; fix or "
        "scale the service before touching the policy.",
    ),
    Entry(
        "reward-source-zero-collapse",
        "{source!r} scores 0 on {zero_share:.0%} of recent samples without errors",
        "A reward of 0 is legal, so an all-zero source is not an outage: the service answers. Check the "
        "data (answer format) and the reward function's version (parser) before assuming the policy "
        "collapsed.",
    ),
)


CATALOGUE: dict[str, Entry] = {e.id: e for e in _ENTRIES}


def finding(
    id: str,
    severity: Severity,
    evidence: Mapping[str, Any],
    recommendation: str,
) -> Finding:
    """A Finding for a catalogued id, its title formatted from ``evidence`` (KeyError if unknown)."""
    entry = CATALOGUE[id]
    return Finding(id, severity, _TITLES.format(entry.title, **evidence), dict(evidence), recommendation)


class _TitleFormatter(string.Formatter):
    """``str.format`` plus the specs ``secs``, seconds as recommendations write them
    (:func:`fmt_seconds`), so a title and its recommendation show a time alike, and ``steps``,
    a count of steps with its noun (:func:`fmt_steps`), and ``last_steps``, the most recent ones
    (:func:`fmt_last_steps`)."""

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "secs":
            return fmt_seconds(value)
        if format_spec == "steps":
            return fmt_steps(value)
        if format_spec == "last_steps":
            return fmt_last_steps(value)
        return super().format_field(value, format_spec)


_TITLES = _TitleFormatter()
