"""A crashed and twice resumed async run, for the drift's pipeline-fill steps (diagnose and dashboard)."""

from __future__ import annotations

# An async run 16:16 of 32 GPUs that crashes and resumes twice. Job 1 trains steps 1-5. Job 2 resumes
# from the checkpoint of step 3: validates it (no training), then redoes steps 4 and 5 under attempt 1
# and trains 6 and 7. Job 3 resumes from step 7's checkpoint, logged before the crash: it redoes
# nothing and trains 8-10 under attempt 0. Each job's first training step fills the pipeline again.
RESUMED_JOBS = [
    [(1, 0, "fill"), (2, 0, "steady"), (3, 0, "steady"), (4, 0, "steady"), (5, 0, "steady")],
    [(3, 0, "validation"), (4, 1, "fill"), (5, 1, "steady"), (6, 0, "steady"), (7, 0, "steady")],
    [(8, 0, "fill"), (9, 0, "steady"), (10, 0, "steady")],
]


def resumed_record(kind: str) -> dict[str, float]:
    """Steady: 300 s, rollouter idle 0.5 (busy 150 s on 16 GPUs: T_thr = 75 s on all 32), forward +
    training 150 s on 16 (T_train = 75 s): 75/75 -> 16:16. A fill also holds the trainer's 300 s wait for
    its first batch (rollouter idle 0.25, busy 450 s: T_thr = 225 s, 225/75 -> 24:8 were it a step)."""
    if kind == "validation":
        return {"val-core/acc": 0.5, "timing_s/testing": 20.0}
    fill = kind == "fill"
    return {
        "timing_s/gen": 300.0 if fill else 0.0,
        "timing_s/old_log_prob": 50.0,
        "timing_s/update_actor": 100.0,
        "timing_s/step": 600.0 if fill else 300.0,
        "fully_async/rollouter/idle_ratio": 0.25 if fill else 0.5,
        "fully_async/trainer/idle_ratio": 0.5 if fill else 0.0,
    }


# The same run as a log can tell it: a resume that redoes no step logs no step again, so no log
# shows where it began (job 3 of RESUMED_JOBS). Here job 3 resumes from step 6's checkpoint instead:
# it validates step 6 and redoes step 7 under attempt 1. The fills are steps 1, 4 and 7.
LOGGED_JOBS = [
    *RESUMED_JOBS[:2],
    [(6, 1, "validation"), (7, 1, "fill"), (8, 0, "steady"), (9, 0, "steady"), (10, 0, "steady")],
]
