"""Number formats and headline phrases shared by the text, Markdown and HTML reports."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from rlscope.advice.finding import fmt_count, fmt_seconds
from rlscope.analyzers.longtail import capped_note
from rlscope.analyzers.mfu import uncounted_note, unknown_tail_note

__all__ = [
    "HEADLINE_TITLE",
    "MFU_DIGITS",
    "REWARD_COLUMNS",
    "WHAT_IF_COLUMNS",
    "findings_count",
    "generation",
    "generation_beside",
    "gpus",
    "headline_rows",
    "is_current_best",
    "measured_aside",
    "mfu_missing",
    "mfu_uncounted",
    "pct",
    "reward_rows",
    "secs",
    "shown",
    "signed_secs",
    "step_range",
    "tail_unknown_note",
    "topology_name",
    "verl_stage_mfu",
    "what_if_rows",
]

# the headline's window: its figures are means over the last quarter of steps unless a row says otherwise
HEADLINE_TITLE = "Headline (the last quarter of steps, unless a row says otherwise)"
WHAT_IF_COLUMNS = ("topology", "best split", "step", "speedup")  # each topology at its best split
REWARD_COLUMNS = (
    "source",
    "samples",
    "error rate",
    "zero share of scored",
    "error rate, recent",
    "zero share of scored, recent",
    "mean reward, recent",
)


# decimals of MFU, which sits at a few tens of percent and moves by tenths; shares of time (generation,
# the tail, idle GPUs) are read to the whole percent. Every report and compare round them so.
MFU_DIGITS = 1


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode's Cc: what drives a terminal, not text


def shown(text: Any) -> str:
    """``text`` with control characters written out (``\\x1b``) and line breaks as spaces, so a
    string from the data cannot recolour a terminal or break a line of the report; other
    characters (CJK spaces, joiners in emoji and Persian) are text and stay."""
    return _CONTROL.sub(lambda m: " " if m.group() in "\r\n\t" else f"\\x{ord(m.group()):02x}", str(text))


def pct(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}%}" if abs(x) < 10 else f"{100 * x:.3g}%"  # an absurd value stays short


def secs(x: float | None) -> str:
    """Seconds as every report writes them, as the findings do (:func:`fmt_seconds`): 1,449 s, 41.3 s."""
    return "n/a" if x is None or not math.isfinite(x) else f"{fmt_seconds(x)} s"


def signed_secs(x: float) -> str:
    """A change in seconds: +41.3 s, -1,449 s."""
    if not math.isfinite(x):
        return "n/a"
    return secs(abs(x)) if fmt_seconds(x) == "0" else ("+" if x >= 0 else "-") + secs(abs(x))  # never "-0 s"


def topology_name(name: str) -> str:
    """A topology as every report words it ("one step overlap"); the JSON keeps verl's identifier."""
    return name.replace("_", " ")


def generation_beside(share: float) -> str:
    """Generation beside the step (one-step overlap, async) against the step's length: a factor, as a
    share of the step it would exceed 100%; a part of it where it is much shorter (not "0.0x")."""
    if share < 0.95:
        return f"beside the step ({share:.0%} of its length)"
    return f"beside the step ({share:.1f}x its length)"


def generation(head: dict[str, Any]) -> str:
    """Generation's part of the step; when it runs beside the step (one-step overlap, async), a
    share of the step would exceed 100%, so its seconds per batch are set against the step."""
    share, step, seconds = head["generation_share"], head["step_s"], head.get("generation_s")
    if share is None and step:  # steps, but none of the recent ones timed generation
        return "n/a (no generation timer, timing_s/gen, in the recent steps)"
    if not head.get("generation_overlapped") or seconds is None or not step:
        return f"{pct(share)} of each step"
    return f"{secs(seconds)} per batch, {generation_beside(seconds / step)}"


def step_range(run: dict[str, Any]) -> str | None:
    """The run's timed steps as every format says them, "2..122 (4 timed)": a log may time only
    some of the steps in its range, and the recent means rest on those. None when none are timed."""
    if not run.get("steps"):
        return None
    return f"{run['first_step']}..{run['last_step']} ({run['steps']} timed)"


def gpus(run: dict[str, Any]) -> str | None:
    """ "8 x H100", or "8 GPUs (type not stated)" when the count is known but the model is not."""
    if not run.get("gpu_count"):
        return None
    kind = run.get("gpu_type")
    count = run["gpu_count"]
    return f"{count} x {kind}" if kind else f"{fmt_count(count, 'GPU')} (type not stated)"


def measured_aside(head: dict[str, Any]) -> str:
    """`` (N s measured)`` where the model's step now is more than 10% off the measured one: a
    speedup is model against model, and the reader should see how far the model is off."""
    model, measured = head.get("step_s_model"), head.get("step_s")
    return f" ({secs(measured)} measured)" if model and measured and abs(model - measured) > 0.1 * measured else ""


def is_current_best(doc: dict[str, Any], best: dict[str, Any]) -> bool:
    """Whether the best topology is the run's own, at its own split."""
    split = doc["run"].get("split") or {}
    same_split = best["n_rollout"] is None or (best["n_rollout"], best["n_train"]) == (
        split.get("rollout"),
        split.get("train"),
    )
    return best["topology"] == doc["topology"]["current"] and same_split


def headline_rows(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """The headline as (measure, value) rows, the same in every format."""
    head = doc["headline"]
    tail = f"{pct(head['tail_share'])} of rollout"
    if head["t_thr_s"] is not None and head["t_tail_s"] is not None:
        tail += f" (T_thr {secs(head['t_thr_s'])} + T_tail {secs(head['t_tail_s'])})"
    estimated = " [estimated]" if head["tail_estimated"] else ""
    if head["tail_share"] == 0 and head["tail_estimated"]:
        estimated = (
            " [estimated: over 10% of responses hit the length cap and finish together, if all decode in one wave]"
        )
    elif head.get("tail_capped_steps") and head["tail_share"] is not None:  # the cap's 0s in a recent mean
        estimated = f" [estimated; {capped_note(head['tail_capped_steps'])}, if all decode in one wave]"
    if head["tail_share"] is None and head.get("tail_share_max") is not None:
        tail = (
            f"at most {pct(head['tail_share_max'])} of rollout (if all decode in one wave; no estimate: mean x ln 10 "
            "reaches the max, the lengths are bunched near it)"
        )
    elif head["tail_share"] is None and head["tail_estimated"]:  # logged, but a mean above the max, or none above 0
        estimated = ""
        tail = "n/a (response lengths logged, but they give neither an estimate nor a bound)"
    elif head["tail_share"] is None:
        estimated = ""
        tail = "n/a (needs trajectory finish times, or response_length/mean, response_length/max and timing_s/gen)"
        measured = [r["n"] for r in doc["long_tail"]["per_step"] if r.get("n") is not None]
        if measured and max(measured) <= 1:
            tail = "n/a (one trajectory a step: no slowest 10% to wait for)"
        elif doc["long_tail"].get("clock_time_steps"):  # finish times logged, but read as not measured
            tail = (
                "n/a (trajectory times logged as a clock's: see the warnings; or response_length/mean, "
                "response_length/max and timing_s/gen)"
            )
    basis = {
        "sum of stage timers": "; the sum of its stage timers, no timing_s/step",
        "mixed": "; timing_s/step, else the sum of the stage timers",
    }.get(head.get("step_s_basis") or "", "")
    rows = [
        ("step time", f"{secs(head['step_s'])} (recent mean{basis})"),
        ("generation", generation(head)),
        ("slowest 10%", tail + estimated),
        ("whole-step MFU", pct(head["mfu"], MFU_DIGITS) + mfu_missing(doc) + mfu_uncounted(doc)),
    ]
    verl = doc["mfu"].get("verl_stage_mfu") or []  # absent from a document of an older rlscope
    if head["mfu"] is None and verl:
        rows.append(("verl's stage MFU", verl_stage_mfu(verl)))
    if head["trainer_gpu_idle_share"] is not None:
        rows.append(("learner GPUs idle", f"{pct(head['trainer_gpu_idle_share'])} of each step, whole run (NVML)"))
    best = head["best_topology"]
    missing = doc["topology"].get("missing")
    if missing:
        rows.append(("best topology", f"n/a ({missing})"))
    if best:
        split = f" at {best['n_rollout']}:{best['n_train']}" if best["n_rollout"] else ""
        model = head.get("step_s_model")
        # verl's colocate_async is the colocated row in GPU time, but is not a synchronous colocated run
        shared = doc["topology"].get("shared") and best["topology"] == "colocated"
        what = f"{'colocate async' if shared else topology_name(best['topology'])}{split}: {secs(best['step_s'])}"
        if best.get("improves", True):
            speed = f", {best['speedup']:.2f}x the {secs(model)} it models now" if best.get("speedup") and model else ""
            rows.append(("best topology", what + speed + (measured_aside(head) if speed else "")))
        elif is_current_best(doc, best):
            # modelled, beside a measured step time two rows up: said, so the two are not taken for one
            aside = measured_aside(head)
            rows.append(
                ("best topology", f"{what} modelled{aside}, as the run is now: the fastest option the model sees")
            )
        else:
            rows.append(("best topology", f"no gain predicted: {what}, against the {secs(model)} it models now"))
    if best and doc["topology"].get("tail_unknown"):
        label, value = rows[-1]
        rows[-1] = (label, value + no_tail_modelled(head))
    return rows


def no_tail_modelled(head: dict[str, Any]) -> str:
    """What the what-if leaves out when the estimated tail is unknown, and the async gain's range."""
    most = head.get("async_speedup_max")
    upper = (
        f"; overlapping the tail would add up to {most:.2f}x more (at its bound, if all decode in one wave)"
        if most is not None
        else "; the response lengths give no bound either"
    )
    return " [no long tail modelled, its estimate unknown: async streaming's gain is a lower bound" + upper + "]"


def what_if_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each topology at its best split, its predicted step and speedup over the modelled current step."""
    rows = []
    for row in doc["topology"]["what_if"] or []:
        split = f"{row['n_rollout']:.0f}:{row['n_train']:.0f}" if row.get("n_rollout") else "all GPUs"
        speed = f"{row['speedup']:.2f}x" if row.get("speedup") else "n/a"
        rows.append((topology_name(row["topology"]), split, secs(row["step_s"]), speed))
    return rows


def reward_rows(doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per data source: whole-run error rate and zero share, then the last quarter's (source names are data)."""
    rows = []
    for row in (doc.get("rewards") or {}).get("by_source") or []:
        mean = "n/a" if row["recent_mean_reward"] is None else f"{row['recent_mean_reward']:.3f}"
        rows.append(
            (
                str(row["source"]),
                f"{row['samples']:,}",
                pct(row["error_rate"], 1),
                pct(row["zero_share"]),
                pct(row["recent_error_rate"], 1),
                pct(row["recent_zero_share"]),
                mean,
            )
        )
    return rows


def verl_stage_mfu(records: Sequence[dict[str, Any]]) -> str:
    """verl's own per-stage MFU as what it is: each stage's alone, not the whole step's, which is
    shown where the whole-step MFU is not known (the hardware or model not stated)."""
    each = ", ".join(f"{r['stage']} {pct(r['mfu'], MFU_DIGITS)} ({r['key']})" for r in records)
    which = "that stage" if len(records) == 1 else "each stage"
    return f"{each}: verl's own MFU of {which} alone, recent mean; not a whole-step MFU"


def mfu_missing(doc: dict[str, Any]) -> str:
    """Why MFU is n/a: the facts it lacks and how to give them ('' when it is known)."""
    missing = doc["mfu"].get("missing") or []
    return f" (needs {'; '.join(missing)})" if doc["headline"]["mfu"] is None and missing else ""


def mfu_uncounted(doc: dict[str, Any]) -> str:
    """Why a known MFU is a lower bound: a timed critic of unknown size ('' when all is counted)."""
    uncounted = doc["mfu"].get("uncounted") or []
    return f" ({uncounted_note(uncounted)})" if doc["headline"]["mfu"] is not None and uncounted else ""


def tail_unknown_note(steps: Sequence[int], points_max: float | None) -> str:
    """The sentence under a waterfall that has a "decode + long tail (split unknown)" bar."""
    note = unknown_tail_note(steps, points_max)
    return note[0].upper() + note[1:] + "."


def findings_count(counts: dict[str, int]) -> str:
    """How many findings of each severity, most severe first: "1 critical, 3 warn" (or "none")."""
    return ", ".join(f"{counts[s]} {s}" for s in ("critical", "warn", "info") if counts.get(s)) or "none"
