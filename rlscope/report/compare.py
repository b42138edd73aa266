"""Two runs side by side, and the differences explained in seconds.

The step-time difference is split into the phases that make it up (recent means), and
the generation difference further into throughput part and tail, so "B is 15% slower"
becomes "B is 120 s slower: generation +100 s, of which the tail +80 s".
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from rlscope.advice.finding import Severity, fmt_steps
from rlscope.advice.thresholds import RECENT_FRACTION
from rlscope.analyzers._data import steps_text
from rlscope.analyzers.anatomy import STEP_TIMERS_WANTED
from rlscope.analyzers.gpus import gpu_model
from rlscope.report._format import (
    MFU_DIGITS,
    is_current_best,
    measured_aside,
    mfu_missing,
    mfu_uncounted,
    pct,
    secs,
    signed_secs,
    topology_name,
)

__all__ = ["COMPARE_SCHEMA", "compare_documents"]

COMPARE_SCHEMA = "rlscope.compare/1"  # bumped when a field is renamed or changes meaning
_MIN_PHASE_S = 0.5  # phase differences smaller than this are not worth a line
_SAME_STEP = 0.005  # steps within 0.5% of each other take as long
_SAME_PARAMS = 0.02  # active parameters within 2% of each other are one model's, rounded
# what the runs ran, and on what, beside the model
_SETUP = (
    ("GPUs", "gpu_count"),
    ("GPU type", "gpu_type"),
    ("prompts a step", "batch_size"),
    ("samples a prompt", "group_size"),
)


def _get(doc: dict[str, Any], *path: str) -> Any:
    node: Any = doc
    for p in path:
        node = node.get(p) if isinstance(node, dict) else None
    return node


def _recent_count(steps: int) -> int:
    """How many of a run's last steps its recent means (the headline's) are taken over."""
    return max(1, math.ceil(steps * RECENT_FRACTION))


def _recent_steps(doc: dict[str, Any]) -> int:
    """How many of the run's last steps its recent means are taken over."""
    return _recent_count(_get(doc, "run", "steps") or 0)


def _steps(doc: dict[str, Any]) -> str | None:
    """The run's steps and, in brackets, how many of them the recent means rest on: "40 (10)";
    "0" for a run of no training step (a validation only)."""
    n = _get(doc, "run", "steps")
    if n is None:
        return None
    return f"{n} ({_recent_count(n)})" if n else "0"


def _recent_phase_seconds(doc: dict[str, Any]) -> dict[str, float]:
    """Mean seconds a recent step of the phases the run timed in its recent steps, ``other`` and ``step_s``,
    a step that did not time a phase counting 0 s of it (its time, if any, is in that step's other): so
    the phases and other add up to the step, and their differences to the step's. An untimed
    phase's zero is no measurement, so it is left out (shown as n/a); so is ``other`` where no
    recent step has a step timer (the step is then the phases' sum, and other 0 by definition)."""
    rows = _get(doc, "phases", "seconds_per_step") or []
    if not rows:
        return {}
    recent = rows[len(rows) - _recent_count(len(rows)) :]
    summed = _get(doc, "headline", "step_s_basis") == "sum of stage timers"
    timed = _get(doc, "phases", "logged_recent")  # timed in the steps the means are taken over
    timed = _get(doc, "phases", "logged") if timed is None else timed
    logged = {*(timed or []), "step_s", *(() if summed else ("other",))}
    keys = [k for k in recent[0] if k in logged]
    return {k: sum((r.get(k) or 0.0) for r in recent) / len(recent) for k in keys}


def _partly_timed(doc: dict[str, Any]) -> dict[str, int]:
    """The phases the run timed in some of its recent steps but not all, and in how many; ``other``
    too, measured in the steps a step timer holds (0 s by definition in the rest)."""
    n = _recent_steps(doc)
    counts = {**(_get(doc, "phases", "timed_recent") or {}), "other": _get(doc, "phases", "step_timed_recent") or 0}
    return {p: k for p, k in counts.items() if 0 < k < n}


def _timed_means(doc: dict[str, Any], per_step: dict[str, float]) -> dict[str, float]:
    """The rows' phase seconds: a phase timed in some recent steps only is the mean of those steps,
    what it takes when it is timed, not that spread over steps that did not time it."""
    n = _recent_steps(doc)
    partly = _partly_timed(doc)
    return {p: v * n / partly[p] if p in partly else v for p, v in per_step.items()}


def _by_change(pa_: dict[str, float], pb: dict[str, float]) -> list[str]:
    """The phases of either run, the most changed first; alike changes by name, so that the order
    does not hang on the set's, which changes with each process's string hash seed."""
    return sorted(set(pa_) | set(pb), key=lambda p: (-abs(pb.get(p, 0.0) - pa_.get(p, 0.0)), p))


def _split(doc: dict[str, Any]) -> str | None:
    split = _get(doc, "run", "split")
    return f"{split['rollout']}:{split['train']}" if split else None


def _tail_source(head: dict[str, Any]) -> str | None:
    if _tail_unknown(head):
        bounded = head.get("tail_share_max") is not None
        return "response lengths (no estimate: a bound only)" if bounded else "response lengths (no estimate, no bound)"
    if head["tail_share"] is None:
        return None
    return "response lengths (estimated)" if head["tail_estimated"] else "trajectories"


def _tail_unknown(head: dict[str, Any]) -> bool:
    """An estimated tail the response lengths give no share of: only its bound ``tail_share_max``, if that."""
    return head["tail_share"] is None and head["tail_estimated"]


def compare_documents(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Rows of (measure, unit, A, B) and sentences explaining how B differs from A.

    ``unit`` is ``s`` (seconds), ``share`` (a fraction) or ``""`` (text or a count). ``a`` and ``b``
    are documents of this rlscope's :func:`~rlscope.report.document.build_document`: one saved by an
    older rlscope may lack fields added since (``phases.step_timed``), which read as no step timer.
    """
    ha, hb = a["headline"], b["headline"]
    rows = [
        ("steps (recent)", "", _steps(a), _steps(b)),
        ("step time", "s", ha["step_s"], hb["step_s"]),
        ("  step time from", "", ha.get("step_s_basis"), hb.get("step_s_basis")),
        # generation / step: above 100% when generation runs beside the step (one-step overlap, async)
        ("generation / step", "share", ha["generation_share"], hb["generation_share"]),
        ("generation", "s", ha.get("generation_s"), hb.get("generation_s")),
        ("slowest-10% share of rollout", "share", ha["tail_share"], hb["tail_share"]),
        ("T_thr", "s", ha["t_thr_s"], hb["t_thr_s"]),
        ("T_tail", "s", ha["t_tail_s"], hb["t_tail_s"]),
        ("  tail measured from", "", _tail_source(ha), _tail_source(hb)),
    ]
    if _tail_unknown(ha) or _tail_unknown(hb):  # the bound, where a share is not known
        rows.append(("  slowest-10% share at most", "share", ha.get("tail_share_max"), hb.get("tail_share_max")))
    rows += [
        ("whole-step MFU", "share", ha["mfu"], hb["mfu"]),
        *_verl_stage_rows(a, b),
        ("topology", "", a["run"]["topology"], b["run"]["topology"]),
        ("split", "", _split(a), _split(b)),
        ("GPUs", "", a["run"]["gpu_count"], b["run"]["gpu_count"]),
        ("model", "", _model(a), _model(b)),
        ("best topology (what-if)", "", _best(a), _best(b)),
        ("findings (critical/warn/info)", "", _counts(a), _counts(b)),
    ]
    pa_, pb = _recent_phase_seconds(a), _recent_phase_seconds(b)
    ta, tb = _timed_means(a, pa_), _timed_means(b, pb)
    for phase in _by_change(ta, tb):
        if phase != "step_s" and (ta.get(phase) or tb.get(phase)):
            rows.append((f"  {phase}", "s", ta.get(phase), tb.get(phase)))
    return {
        "schema": COMPARE_SCHEMA,
        "runs": [a["run"]["source"], b["run"]["source"]],
        "rows": rows,
        "explanations": _explain(a, b, pa_, pb),
    }


def _verl_stage_rows(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, Any, Any]]:
    """verl's own MFU of each stage (``perf/mfu/*``) where a run's whole-step MFU is n/a, as
    ``diagnose`` shows it then: each stage's alone, labelled so, never a whole-step MFU."""
    if a["headline"]["mfu"] is not None and b["headline"]["mfu"] is not None:
        return []
    # absent from a document of an older rlscope
    a_stages, b_stages = ({r["stage"]: r["mfu"] for r in doc["mfu"].get("verl_stage_mfu") or []} for doc in (a, b))
    stages = list(dict.fromkeys([*a_stages, *b_stages]))
    return [(f"  verl's MFU of {s} alone", "share", a_stages.get(s), b_stages.get(s)) for s in stages]


def _best(doc: dict[str, Any]) -> str | None:
    """The what-if's best topology, its split and predicted step, against the run's own modelled step;
    for a run without a what-if, what it lacks."""
    head = doc["headline"]
    best = head.get("best_topology")
    if not best or best.get("step_s") is None:
        missing = doc.get("topology", {}).get("missing")
        return f"n/a ({missing})" if missing else None
    split = f" {best['n_rollout']}:{best['n_train']}" if best.get("n_rollout") else ""
    aside = measured_aside(head).strip(" ()")  # "102 s measured", or ""
    speed = f" ({best['speedup']:.2f}x{'; ' + aside if aside else ''})" if best.get("speedup") else ""
    if not best.get("improves", True):
        speed = " (as the run is now)" if is_current_best(doc, best) else " (no gain predicted)"
    shared = doc.get("topology", {}).get("shared") and best["topology"] == "colocated"  # colocate_async, as it is
    name = "colocate async" if shared else topology_name(best["topology"])
    return f"{name}{split}: {secs(best['step_s'])}{speed}"


def _model(doc: dict[str, Any]) -> str | None:
    """The model's name and active parameters, as far as the run states them: "big (7.62B active)"."""
    name, params = doc["run"].get("model"), doc["run"].get("active_params")
    size = None
    if params:
        size = f"{params / 1e9:.3g}B active" if params >= 1e9 else f"{params / 1e6:.3g}M active"
    if name and size:
        return f"{name} ({size})"
    return name or size


def _setup(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """The GPUs, batch shape and model where both runs state them and they differ: step time, MFU
    and the tail then move for reasons no phase explains."""

    def differ(key: str) -> bool:
        x, y = a["run"].get(key), b["run"].get(key)
        if x is None or y is None:
            return False
        if key == "gpu_type":  # "H100", nvidia-smi's "NVIDIA H100 80GB HBM3"
            x, y = gpu_model(x) or x, gpu_model(y) or y
        if key == "active_params":  # one model's size stated two ways: 7.6e9, 7.62e9
            return not math.isclose(x, y, rel_tol=_SAME_PARAMS)
        return x != y

    changed = [f"{what} {a['run'][key]} -> {b['run'][key]}" for what, key in _SETUP if differ(key)]
    if differ("model") or differ("active_params"):  # one run's size unstated is no difference
        changed.append(f"model {_model(a)} -> {_model(b)}")
    return f"not like for like: {', '.join(changed)}" if changed else None


def _lower_bounds(ha: dict[str, Any], hb: dict[str, Any]) -> str:
    """What the step comparison must add when a run has no step timer: its step, summed from the
    stage timers, leaves out what none of them held, so it may not be as short as it reads."""
    said = {
        "sum of stage timers": "is the sum of its stage timers (no timing_s/step), a lower bound",
        "mixed": "is the sum of its stage timers where a step has no timing_s/step, a lower bound there",
    }
    bases = {name: head.get("step_s_basis") for name, head in (("A", ha), ("B", hb))}
    if bases["A"] == bases["B"]:
        return ""
    return "".join(f"; {name}'s step time {said[basis]}" for name, basis in bases.items() if basis in said)


def _estimates(ha: dict[str, Any], hb: dict[str, Any]) -> str:
    """Which run's tail is a model of its response lengths rather than measured from finish times:
    a change against it is partly the model's."""
    named = [name for name, head in (("A", ha), ("B", hb)) if head.get("tail_estimated")]
    owners = " and ".join(f"{n}'s" for n in named)
    return f"; {owners} estimated from response lengths" if named else ""


def _mfu_missing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What a run without MFU lacks, as ``diagnose`` says it: the table's n/a does not say why;
    and which run's MFU is a lower bound (a critic of unknown size)."""
    needs = {name: mfu_missing(doc) for name, doc in (("A", a), ("B", b))}
    # a known MFU that leaves out a timed critic's FLOPs: the table's figure is no whole MFU either
    low = [f"{name}'s whole-step MFU{mfu_uncounted(doc)}" for name, doc in (("A", a), ("B", b)) if mfu_uncounted(doc)]
    if needs["A"] and needs["A"] == needs["B"]:
        return [f"neither run has a whole-step MFU{needs['A']}", *low]
    return [f"{name}'s whole-step MFU is n/a{need}" for name, need in needs.items() if need] + low


def _partial_timing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Which phases a run timed in some of its recent steps only: the row is the mean of those
    steps, while the step difference counts 0 s in the others (their time, if any, is in other)."""
    out = []
    for name, doc in (("A", a), ("B", b)):
        partly = _partly_timed(doc)
        if partly:
            n = _recent_steps(doc)
            # other is no timer's: the step timer measures it
            which = ", ".join(
                f"{p}{' (timing_s/step)' if p == 'other' else ''} in {k}" for p, k in sorted(partly.items())
            )
            out.append(
                f"{name} timed {which} of its {n} recent steps: the rows are the means of the steps that timed"
                " them, the step difference counts 0 s in the others"
            )
    return out


def _verdict(sa: float | None, sb: float | None) -> str:
    """B against A by step time, with the step sentence's 0.5% margin: within it they take as long."""
    if sa and sb and abs(sb - sa) < _SAME_STEP * sa:
        return "B takes as long"
    return "B is faster" if (sb or 0) < (sa or 0) else "B is not faster"


def _counts(doc: dict[str, Any]) -> str:
    c = doc["counts"]
    return f"{c['critical']}/{c['warn']}/{c['info']}"


def _explain(a: dict[str, Any], b: dict[str, Any], pa_: dict[str, float], pb: dict[str, float]) -> list[str]:
    ha, hb = a["headline"], b["headline"]
    setup = _setup(a, b)  # first: what differs beside the phases is read before the step difference
    out: list[str] = [setup] if setup else []
    sa, sb = ha["step_s"], hb["step_s"]
    untimed = [name for name, step in (("A", sa), ("B", sb)) if step is None]
    # a run may have timed its validations, checkpoints or profiling only: none of those make a training step
    timers = STEP_TIMERS_WANTED
    if len(untimed) == 2:
        out.append(f"neither run has {timers}: their steps cannot be compared")
    elif untimed:
        out.append(f"{untimed[0]} has no {timers}: its steps cannot be compared")
    if sa and sb:
        delta = sb - sa
        word = "slower" if delta > 0 else "faster"
        # generation beside the trainer's step (one-step overlap, async) is not part of it
        beside = [name for name, head in (("A", ha), ("B", hb)) if head.get("generation_overlapped")]
        inside_a = {k: v for k, v in pa_.items() if not (k == "gen" and ha.get("generation_overlapped"))}
        inside_b = {k: v for k, v in pb.items() if not (k == "gen" and hb.get("generation_overlapped"))}
        parts = []
        for phase in _by_change(inside_a, inside_b):
            if phase not in inside_a or phase not in inside_b:  # timed in one run only: no difference to tell
                continue
            d = inside_b[phase] - inside_a[phase]
            if phase != "step_s" and abs(d) >= _MIN_PHASE_S:
                parts.append(f"{phase} {signed_secs(d)}")
        detail = f": {', '.join(parts[:4])}" if parts else ""
        for name, mine, theirs in (("A", inside_a, pb), ("B", inside_b, pa_)):
            # timed in one run only (gen beside the other's step is timed there too)
            # (other is no timer: where one run lacks it, the lower-bound clause says why)
            alone = sorted(p for p in mine if p not in theirs and p != "other" and mine[p] >= _MIN_PHASE_S)
            if alone:  # the other run's time for them, if any, is in its other
                detail += f" ({', '.join(alone)} timed in {name} only)"
        bounds = _lower_bounds(ha, hb)
        if beside:
            # with one run's generation beside its step, the other's is in its step: part of the difference
            within = [
                f"{name}'s {secs(mine['gen'])} of gen"
                for name, mine in (("A", inside_a), ("B", inside_b))
                if len(beside) == 1 and mine.get("gen", 0.0) >= _MIN_PHASE_S
            ]
            while_ = f", while {within[0]} is" if within else ""
            detail += f" (generation runs beside the step in {' and '.join(beside)}: not counted in it{while_})"
        if abs(delta) < _SAME_STEP * sa:  # within the margin: neither faster nor slower, whatever moved inside
            out.append(f"B's steps take as long as A's ({secs(sa)} against {secs(sb)}){detail}{bounds}")
        else:
            out.append(f"B's steps are {secs(abs(delta))} {word} than A's ({sb / sa - 1:+.0%}){detail}{bounds}")
    out.extend(_partial_timing(a, b))
    if ha["t_tail_s"] is not None and hb["t_tail_s"] is not None and ha["t_thr_s"] and hb["t_thr_s"]:
        dtail, dthr = hb["t_tail_s"] - ha["t_tail_s"], hb["t_thr_s"] - ha["t_thr_s"]
        if abs(dtail) >= _MIN_PHASE_S or abs(dthr) >= _MIN_PHASE_S:
            out.append(
                f"generation's throughput part changed {signed_secs(dthr)} and its tail {signed_secs(dtail)} "
                f"(tail share {pct(ha['tail_share'])} -> {pct(hb['tail_share'])}{_estimates(ha, hb)}); "
                "more GPUs shrink only the throughput part"
            )
    unknown = {name: head for name, head in (("A", ha), ("B", hb)) if _tail_unknown(head)}
    bounded = {name: head for name, head in unknown.items() if head.get("tail_share_max") is not None}
    if bounded:
        bounds = ", ".join(f"{name}'s at most {pct(head['tail_share_max'])}" for name, head in bounded.items())
        out.append(
            f"{' and '.join(bounded)}'s response lengths give no estimate of the tail, only a bound ({bounds} of "
            "rollout, if all decode in one wave): generation's change is not split into throughput part and tail"
        )
    if unbounded := [name for name in unknown if name not in bounded]:
        out.append(
            f"{' and '.join(unbounded)}'s response lengths give no estimate of the tail, nor a bound: generation's "
            "change is not split into throughput part and tail"
        )
    if ha["mfu"] is not None and hb["mfu"] is not None and abs(hb["mfu"] - ha["mfu"]) >= 0.005:
        out.append(
            f"whole-step MFU {pct(ha['mfu'], MFU_DIGITS)} -> {pct(hb['mfu'], MFU_DIGITS)}; judge by step time: {_verdict(sa, sb)}"
        )
    out.extend(_mfu_missing(a, b))
    if _split(a) != _split(b) or a["run"]["topology"] != b["run"]["topology"]:
        words = [
            "topology",
            topology_name(a["run"]["topology"]),
            _split(a),
            "->",
            topology_name(b["run"]["topology"]),
            _split(b),
        ]
        out.append(" ".join(w for w in words if w))
    worst_a, worst_b = _worst(a), _worst(b)
    ids_a, ids_b = set(worst_a), set(worst_b)
    out += _only("B", ids_b - ids_a, "A", a) + _only("A", ids_a - ids_b, "B", b)
    for word, sign in (("more", 1), ("less", -1)):
        moved = [
            f"{i} ({worst_a[i].value} -> {worst_b[i].value})"
            for i in sorted(ids_a & ids_b)
            if sign * (worst_b[i].rank - worst_a[i].rank) > 0
        ]
        if moved:
            out.append(f"{word} severe in B: {', '.join(moved)}")
    for name, doc in (("A", a), ("B", b)):  # what diagnose lists under "Read with warnings"
        out += [f"{name} was read with a warning: {w}" for w in doc["run"].get("warnings") or []]
    return out


def _has_timer(phase: str, recent_only: bool = True) -> Callable[[dict[str, Any]], bool]:
    """Whether a run timed ``phase`` (in its recent steps, as most findings judge it): 0 s untimed judge nothing."""
    return lambda doc: phase in (_get(doc, "phases", "logged_recent" if recent_only else "logged") or [])


def _pooled_what_if(kinds: tuple[str, ...]) -> Callable[[dict[str, Any]], bool]:
    """Whether a run could judge a finding of runs of topology ``kinds`` on pools of a known split:
    one of another topology is clean of it; one of them needs the what-if and its split."""

    def judged(doc: dict[str, Any]) -> bool:
        if _get(doc, "run", "topology") not in kinds:
            return True
        return _get(doc, "topology", "missing") is None and _get(doc, "run", "split") is not None

    return judged


def _no_tail(doc: dict[str, Any]) -> str:
    """Why a run has no recent tail share."""
    clock = _get(doc, "long_tail", "clock_time_steps")
    if not _tail_unknown(doc["headline"]) and clock:  # finish times read as not measured
        return f"no tail: trajectory times logged as a clock's in {fmt_steps(len(clock))}"
    if not _tail_unknown(doc["headline"]):
        return "no tail: no trajectories or response lengths"
    if doc["headline"].get("tail_share_max") is not None:
        return "no tail estimate: response lengths bunched near the max give only a bound"
    return "no tail estimate: its response lengths give neither an estimate nor a bound"


def _no_tail_growth(doc: dict[str, Any]) -> str:
    """Why a run with a recent tail share has no growth of it to judge: the length cap's steps."""
    capped = _get(doc, "headline", "tail_capped_steps")
    if capped:
        return f"no tail growth to judge: recent {steps_text(capped)} at the length cap"
    return "no tail growth to judge: one step below the length cap"


# what a finding is judged from, as the diagnose document shows it: a run without it could not have
# raised the finding, so its absence there is no clean bill (why, in brackets)
_EVIDENCE: dict[str, tuple[Callable[[dict[str, Any]], bool], str | Callable[[dict[str, Any]], str]]] = {
    "timing_s/gen": (_has_timer("gen"), "no timing_s/gen in its recent steps"),
    "timing_s/gen over the run": (_has_timer("gen", recent_only=False), "no timing_s/gen"),
    # a step timer above zero in some step (stage-timers-overlap checks each), in some recent step
    # (untracked-time: other is measured only there, and is judged over the recent steps)
    "timing_s/step": (lambda doc: (_get(doc, "phases", "step_timed") or 0) > 0, "no timing_s/step"),
    "timing_s/step recent": (
        lambda doc: (_get(doc, "phases", "step_timed_recent") or 0) > 0,
        "no timing_s/step in its recent steps",
    ),
    "switching": (_has_timer("switching"), "no switching timer in its recent steps"),
    "tail": (lambda doc: _get(doc, "headline", "tail_share") is not None, lambda doc: _no_tail(doc)),
    # a growth up to now: the recent share known and not the length cap's (a document without
    # `growth_judged` is judged as its tail is)
    "tail growth": (
        lambda doc: (
            _get(doc, "headline", "tail_share") is not None and _get(doc, "long_tail", "growth_judged") is not False
        ),
        lambda doc: _no_tail(doc) if _get(doc, "headline", "tail_share") is None else _no_tail_growth(doc),
    ),
    "mfu": (lambda doc: _get(doc, "mfu", "mfu") is not None, "no MFU"),
    # an MFU above 100% (mfu-impossible) stops the analyzer before it judges verl's phase MFUs
    "verl mfu": (
        lambda doc: bool(_get(doc, "mfu", "cross_check")) and not (_get(doc, "mfu", "mfu") or 0.0) > 1,
        "no verl perf/mfu to check, or an MFU above 100%",
    ),
    # split-imbalanced and separated-sync are of runs on separate pools of a known split: a run on
    # shared GPUs (colocated, colocate_async), or not separated_sync, is clean of them with no what-if
    "split what-if": (
        _pooled_what_if(("one_step_overlap", "separated_sync", "async_streaming")),
        "no topology what-if of its split",
    ),
    "separated what-if": (_pooled_what_if(("separated_sync",)), "no topology what-if of its split"),
    # async-recommended is of a run not yet async, judged against the async_streaming what-if row,
    # which a run without a model, or on one GPU (which cannot be split), lacks
    "async what-if": (
        lambda doc: (
            _get(doc, "run", "topology") == "async_streaming"
            or any(r.get("topology") == "async_streaming" for r in _get(doc, "topology", "what_if") or [])
        ),
        "no async_streaming what-if: no topology model, or one GPU",
    ),
    "split drift": (lambda doc: bool(_get(doc, "split_drift", "per_step")), "no per-step split model"),
    "engines": (lambda doc: _get(doc, "engines", "load_unit") is not None, "no engine column"),
    "weight sync": (lambda doc: _get(doc, "weight_sync", "bubble") is not None, "no weight-sync bubble"),
    # verl's per-step lag means (source "verl") are shown, but no staleness finding is judged from them
    "staleness": (
        lambda doc: _get(doc, "staleness", "source") == "trajectories",
        "no trajectories' policy versions",
    ),
    "rewards": (lambda doc: doc.get("rewards") is not None, "no reward columns"),
    "gpu samples": (lambda doc: doc.get("gpu_idle") is not None, "no NVML samples"),
    "log-probs": (lambda doc: doc.get("logprob_mismatch") is not None, "no log-prob data"),
    "histograms": (
        lambda doc: _get(doc, "logprob_mismatch", "source") == "histogram",
        "no log-prob histograms",
    ),
}
# each catalogued finding id's evidence; those judged from step metrics the document does not
# show (verl's idle ratios, reward scalars) are left out: their absence is taken as it reads
_JUDGED_FROM = {
    "generation-dominates": "timing_s/gen",
    "generation-share-growing": "timing_s/gen over the run",
    "untracked-time": "timing_s/step recent",
    "stage-timers-overlap": "timing_s/step",
    "switching-costly": "switching",
    "long-tail-dominates": "tail",
    "long-tail-growing": "tail growth",
    "mfu-waterfall": "mfu",
    "mfu-impossible": "mfu",
    "mfu-cross-check-mismatch": "verl mfu",
    "split-imbalanced": "split what-if",
    "separated-sync": "separated what-if",
    "async-recommended": "async what-if",
    "split-drift": "split drift",
    "engine-imbalanced": "engines",
    "sync-bubble": "weight sync",
    "staleness-high": "staleness",
    "staleness-unexplained": "staleness",
    "stale-drop-length-bias": "staleness",
    "reward-source-failing": "rewards",
    "reward-source-zero-collapse": "rewards",
    "gpu-idle-in-training": "gpu samples",
    "logprob-mismatch-high": "log-probs",
    "moe-routing-flips": "histograms",
    "is-clip-high": "histograms",
}


def _unjudged(doc: dict[str, Any], finding_id: str) -> str | None:
    """Why the run could not have raised ``finding_id``, or None where it could (or no one can tell)."""
    evidence = _JUDGED_FROM.get(finding_id)
    if evidence is None:
        return None
    has, lacking = _EVIDENCE[evidence]
    if has(doc):
        return None
    return lacking if isinstance(lacking, str) else lacking(doc)


def _only(name: str, ids: set[str], other: str, other_doc: dict[str, Any]) -> list[str]:
    """The findings only run ``name`` has: those the other run was clean of, and those it could not evaluate."""
    why = {i: _unjudged(other_doc, i) for i in sorted(ids)}
    clean = [i for i, reason in why.items() if reason is None]
    unjudged = [f"{i} ({reason})" for i, reason in why.items() if reason is not None]
    out = [f"only {name}: {', '.join(clean)}"] if clean else []
    if unjudged:
        out.append(f"only {name}, as {other} could not evaluate: {', '.join(unjudged)}")
    return out


def _worst(doc: dict[str, Any]) -> dict[str, Severity]:
    """Each finding id's most severe level in the run (a finding may be raised once per reward source)."""
    worst: dict[str, Severity] = {}
    for f in doc["findings"]:
        severity = Severity(f["severity"])
        worst[f["id"]] = max(worst.get(f["id"], severity), severity)
    return worst
