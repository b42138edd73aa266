"""The analyzers' formulas against DOMAIN.md's worked numbers, each golden worked out by hand.

The 8B reasoning example: 64 x H100, generation 602 s = T_thr 406 + T_tail 196, forward 72 s,
training 136 s (T_t = 208 s), colocated step 810 s. Tolerances are stated where DOMAIN.md
rounds (to whole seconds, 1% of MFU, 0.01x of speedup).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rlscope.advice import CATALOGUE, Finding, Severity, finding
from rlscope.analyzers import longtail, mfu, staleness, sync_balance, topology
from rlscope.analyzers._data import (
    RunFacts,
    imported_job_firsts,
    meta_problems,
    placed_step_rows,
    timer_finiteness,
    topology_kind,
    trend,
    usable_step_rows,
    wide_steps,
)
from rlscope.analyzers.gpus import PEAK_BF16_DENSE_FLOPS, gpu_model, peak_flops
from rlscope.trace import simulator

H100 = 989e12
EIGHT_B = topology.StepModel(t_thr_s=406, t_tail_s=196, t_train_s=208, n_gpus=64)


# -- MFU -------------------------------------------------------------------------------


def test_8b_full_step_mfu_from_phase_efficiencies():
    # (602 * 0.028 + 72 * 0.5 + 136 * 0.4) / 810 = (16.856 + 36 + 54.4) / 810 = 107.256 / 810 = 0.13242
    got = mfu.mfu_from_etas({"gen": 602, "forward": 72, "train": 136}, {"gen": 0.028, "forward": 0.5, "train": 0.4})
    assert got == pytest.approx(0.13242, abs=1e-5)
    assert round(got * 100) == 13


def test_8b_flops_per_token_and_mfu_from_flops():
    n = 8e9
    per = mfu.flops_per_token(n)
    # 2N + 2N + 2N + 6N = 12N
    assert per == {"gen": 2 * n, "old_log_prob": 2 * n, "ref": 2 * n, "update_actor": 6 * n}
    assert sum(per.values()) == 12 * n
    # 8192 sequences of 512 prompt + 8192 response tokens = 71,303,168 tokens;
    # 12 * 8e9 * 71,303,168 = 6.845e18 FLOPs (DOMAIN's seed: "one step 6.8 EFLOP");
    # / (810 s * 64 * 989e12 = 5.1270e19) = 13.35%, "13%"
    tokens = 8192 * (512 + 8192)
    assert 12 * n * tokens / (810 * 64 * H100) == pytest.approx(0.1335, abs=5e-4)
    # the phase efficiencies DOMAIN quotes follow: forward 4N * tokens / (72 * 64 * peak) = 0.50,
    # training 6N * tokens / (136 * 64 * peak) = 0.40, decode over the throughput part 2N / 406 s = 4%
    assert 4 * n * tokens / (72 * 64 * H100) == pytest.approx(0.5, abs=0.01)
    assert 6 * n * tokens / (136 * 64 * H100) == pytest.approx(0.4, abs=0.01)
    assert 2 * n * tokens / (406 * 64 * H100) == pytest.approx(0.04, abs=0.005)


def test_critic_adds_its_own_flops():
    per = mfu.flops_per_token(8e9, critic_params=1e9)
    assert per["values"] == 2e9 and per["update_critic"] == 6e9


def test_8b_waterfall_attributes_every_lost_point_once():
    # GPU-seconds per GPU (x64 on both sides cancels); generation does 602 * 0.028 = 16.856 s of
    # peak-rate work, all of it charged to the 406 s throughput part.
    entries = [
        mfu.LedgerEntry("decode", 406 * 64, 602 * 0.028 * 64),
        mfu.LedgerEntry("long_tail", 196 * 64),
        mfu.LedgerEntry("forward", 72 * 64, 72 * 0.5 * 64),
        mfu.LedgerEntry("training", 136 * 64, 136 * 0.4 * 64),
    ]
    fall = mfu.waterfall(entries, 810 * 64)
    lost = fall.lost
    assert list(lost.index) == list(mfu.CAUSES)
    assert lost["decode"] == pytest.approx(100 * (406 - 16.856) / 810)  # 48.04
    assert lost["long_tail"] == pytest.approx(100 * 196 / 810)  # 24.20
    assert lost["forward"] == pytest.approx(100 * 36 / 810)  # 4.44
    assert lost["training"] == pytest.approx(100 * 81.6 / 810)  # 10.07
    assert lost[["weight_sync", "switching", "idle_other"]].sum() == pytest.approx(0.0)
    assert fall.mfu == pytest.approx(0.13242, abs=1e-5)
    assert lost.sum() == pytest.approx(100 - 100 * fall.mfu)


def test_waterfall_charges_unledgered_time_to_idle_and_scales_an_overfull_ledger_to_the_step():
    fall = mfu.waterfall([mfu.LedgerEntry("training", 50, 25)], 100)
    assert fall.lost["training"] == pytest.approx(25) and fall.lost["idle_other"] == pytest.approx(50)
    assert fall.mfu == pytest.approx(0.25)
    # 120 GPU-s charged to a 100 GPU-s step: MFU is still useful / (n x step) = 12 / 100, and the
    # 88 GPU-s the step leaves after the useful work are all decode's
    over = mfu.waterfall([mfu.LedgerEntry("decode", 120, 12)], 100)
    assert over.mfu == pytest.approx(0.12) and over.lost["decode"] == pytest.approx(88)
    assert over.lost["idle_other"] == pytest.approx(0)
    # two causes share the 100 - 12 = 88 lost points in proportion to their lost GPU-s, 108 : 60
    two = mfu.waterfall([mfu.LedgerEntry("decode", 120, 12), mfu.LedgerEntry("training", 60)], 100)
    assert two.mfu == pytest.approx(0.12)
    assert (two.lost["decode"], two.lost["training"]) == (pytest.approx(88 * 108 / 168), pytest.approx(88 * 60 / 168))


def test_32b_pooled_waterfall_has_the_domain_shape():
    # DOMAIN's 32B example (80:48 on 128 GPUs, ~1170 s, MFU ~20%) loses, from 100%: 64 points to
    # decode, 13 to the long tail, 4 to sync, 0.1 to other. Its numbers cannot all hold in a
    # GPU-second ledger (the 80 rollout GPUs are only 62.5% of the budget, less than 64 + 13),
    # so this checks the shape on a ledger built to have DOMAIN's tail and sync points:
    # budget 128 * 1170 = 149,760 GPU-s; tail 13% = 19,468.8 GPU-s = 243.36 s on 80 GPUs;
    # sync 4% = 5,990.4 GPU-s = 124.8 s on 48 GPUs; forward 250 s + training 795 s + sync 124.8 s
    # = 1169.8 s leaves 0.2 s * 48 = 9.6 GPU-s (0.006 points) idle on the training pool.
    n, step = 128, 1170.0
    budget = n * step
    entries = mfu.ledger(
        {"gen": 0, "old_log_prob": 250, "ref": 0, "values": 0, "update_actor": 795, "update_critic": 0}
        | {"weight_sync": 124.8, "switching": 0},
        {"gen": 0.04 * 80 * (step - 243.36) * H100, "old_log_prob": 0.5 * 48 * 250 * H100}
        | {"update_actor": 0.45 * 48 * 795 * H100},
        tail_s=243.36,
        peak=H100,
        n_rollout=80,
        n_train=48,
        rollout_s=step,
    )
    fall = mfu.waterfall(entries, budget)
    lost = fall.lost
    assert lost["long_tail"] == pytest.approx(13.0) and lost["weight_sync"] == pytest.approx(4.0)
    assert lost["idle_other"] == pytest.approx(0.0064, abs=1e-4)
    assert lost["decode"] > lost["long_tail"] > lost["weight_sync"] > lost["idle_other"]
    assert lost.sum() == pytest.approx(100 - 100 * fall.mfu)


# -- topology --------------------------------------------------------------------------


def test_8b_colocated_is_the_sum_of_phases():
    assert topology.step_time(EIGHT_B, "colocated") == 810  # 406 + 196 + 208


def test_8b_separated_sync_at_46_18():
    # 406 * 64 / 46 + 196 = 564.87 + 196 = 760.87 ("761"); 208 * 64 / 18 = 739.56 ("740");
    # sum 1500.43 ("1501")
    assert topology.step_time(EIGHT_B, "separated_sync", 46) == pytest.approx(1501, abs=1)
    assert 406 * 64 / 46 + 196 == pytest.approx(761, abs=0.5)
    assert 208 * 64 / 18 == pytest.approx(740, abs=0.5)


def test_8b_one_step_overlap_balances_at_46_18():
    # max(760.87, 739.56) = 760.87 at 46:18; 45:19 gives max(577.42 + 196, 700.63) = 773.42,
    # 47:17 gives max(748.85, 783.06) = 783.06, so 46:18 is the best integer split.
    best = topology.best_split(EIGHT_B, "one_step_overlap")
    assert (best.n_rollout, best.n_train) == (46, 18)
    assert best.step_s == pytest.approx(761, abs=0.5)
    # DOMAIN's "~761-764 s": plus a ~3 s cross-machine weight sync
    with_sync = topology.StepModel(406, 196, 208, 64, t_sync_s=3)
    assert topology.step_time(with_sync, "one_step_overlap", 46) == pytest.approx(764, abs=0.5)


def test_8b_async_balances_at_42_22():
    # 406 * 64 / 42 = 618.67 vs 208 * 64 / 22 = 605.09 -> 619 s; 43:21 gives 633.9, 41:23 gives 633.8
    best = topology.best_split(EIGHT_B, "async_streaming")
    assert (best.n_rollout, best.n_train) == (42, 22)
    assert best.step_s == pytest.approx(619, abs=0.5)
    assert 208 * 64 / 22 == pytest.approx(605, abs=0.5)
    # balanced ratio n_r / n_t = T_thr / T_t = 406 / 208 = 1.95: 64 * 406 / 614 = 42.3 rollout GPUs
    assert 64 * topology.balanced_ratio(406, 208) / (1 + topology.balanced_ratio(406, 208)) == pytest.approx(
        42.3, abs=0.1
    )


def test_8b_separated_sync_best_split_is_not_the_balanced_one():
    # sum 25984/n_r + 13312/(64-n_r) + 196 is smallest at 37:27: 702.27 + 493.04 + 196 = 1391.31
    best = topology.best_split(EIGHT_B, "separated_sync")
    assert (best.n_rollout, best.step_s) == (37, pytest.approx(1391.31, abs=0.01))


def test_best_splits_of_many_steps_at_once():
    # the 8B model's three pooled bests (46:18, 42:22, 37:27 above) and, on 3 GPUs with T_thr = T_t = 1,
    # separated sync's tie: 3/1 + 3/2 = 3/2 + 3/1 = 4.5 at 1:2 and 2:1, where the fewer rollout GPUs win
    for topo, want_r, want_s in (
        ("one_step_overlap", 46, 761),
        ("async_streaming", 42, 619),
        ("separated_sync", 37, 1391.31),
    ):
        rollout, step_s = topology.best_splits([406, 1.0], [196, 0.0], [208, 1.0], [0.0, 0.0], 64, topo)
        assert (rollout[0], step_s[0]) == (want_r, pytest.approx(want_s, abs=0.5))
    rollout, step_s = topology.best_splits([406, 1.0], [196, 0.0], [208, 1.0], [0.0, 0.0], 3, "separated_sync")
    assert (rollout[1], step_s[1]) == (1, 4.5)
    with pytest.raises(ValueError, match="no split of 64 GPUs"):
        topology.best_splits([math.nan], [0.0], [1.0], [0.0], 64, "async_streaming")
    with pytest.raises(ValueError, match="cannot be split"):
        topology.best_splits([1.0], [0.0], [1.0], [0.0], 1, "async_streaming")


def test_8b_async_speedup():
    # f = 196 / 602; f * T_gen / (T_gen + T_t) = 196 / 810; 1 / (1 - 196/810) = 810 / 614 = 1.319 ("1.3x")
    got = topology.async_speedup(196 / 602, 602, 208)
    assert got == pytest.approx(810 / 614)
    assert round(got, 1) == 1.3
    # and the integer split's prediction DOMAIN's recommendation quotes: 810 / 618.67 = 1.309 ("1.31x")
    assert 810 / topology.best_split(EIGHT_B, "async_streaming").step_s == pytest.approx(1.31, abs=0.005)


def test_tail_sensitivity_10_to_70_percent():
    # f = T_tail / (T_thr + T_tail) with T_thr = 406 and T_t = 208 held fixed, so
    # T_tail = 406 f / (1 - f) and speedup = (406 + T_tail + 208) / (406 + 208):
    #   f = 0.1: T_tail = 45.11, 659.11 / 614 = 1.0735 ("1.07x")
    #   f = 0.7: T_tail = 947.33, 1561.33 / 614 = 2.5429 ("2.55x" in DOMAIN.md)
    # No other reading of f reproduces both ends (f as share of the whole step gives 1.11x at 10%;
    # holding T_gen = 602 fixed gives 2.08x at 70%; the integer 42:22 split gives 2.52x). 2.55x
    # needs T_thr + T_t <= 613.5 s; with 614 s the exact value is 2.543, within 0.01 of 2.55.
    table = topology.tail_sensitivity(406, 208, [0.1, 0.7])
    assert table.loc[0.1, "speedup"] == pytest.approx(1.07, abs=0.005)
    assert table.loc[0.7, "speedup"] == pytest.approx(2.55, abs=0.01)
    assert table.loc[0.7, "t_tail_s"] == pytest.approx(947.33, abs=0.01)
    # the closed form agrees: 1 / (1 - f T_gen / (T_gen + T_t)) with T_gen = 406 + T_tail
    for f, row in table.iterrows():
        gen = 406 + row["t_tail_s"]
        assert topology.async_speedup(f, gen, 208) == pytest.approx(row["speedup"])


def test_overlap_bound():
    # (R + L) / max(R, L): 8B colocated (602 + 208) / 602 = 1.346; only R = L reaches 2x
    assert topology.overlap_bound(602, 208) == pytest.approx(1.3455, abs=1e-4)
    assert topology.overlap_bound(300, 300) == 2.0
    assert topology.overlap_bound(1000, 100) == pytest.approx(1.1)


def test_overlap_bound_of_a_pooled_run_takes_each_side_on_its_own_pool():
    # 8B separated at 46:18: R = 406 * 64/46 + 196 = 760.9 s, L = 208 * 64/18 = 739.6 s (DOMAIN's
    # 761 and 740); the bound (761 + 740) / 761 = 1.97x is what one-step overlap nearly reaches
    rollout, learner = topology.sides_now(EIGHT_B, 46, 18)
    assert (rollout, learner) == (pytest.approx(760.87, abs=0.01), pytest.approx(739.56, abs=0.01))
    assert topology.overlap_bound(rollout, learner) == pytest.approx(1.972, abs=1e-3)
    # colocated, both sides are on all 64 GPUs
    assert topology.sides_now(EIGHT_B, None, None) == (602, 208)
    # async at 42:22 overlaps the tail: R = 406 * 64/42 = 618.7 s, L = 208 * 64/22 = 605.1 s (DOMAIN's 619 and 605)
    rollout, learner = topology.sides_now(EIGHT_B, 42, 22, "async_streaming")
    assert (rollout, learner) == (pytest.approx(618.67, abs=0.01), pytest.approx(605.09, abs=0.01))


def test_split_table_and_bad_arguments():
    table = topology.split_table(EIGHT_B)
    assert list(table.index) == list(range(1, 64)) and (table["n_train"] == 64 - table.index).all()
    assert table.loc[46, "separated_sync"] == pytest.approx(1500.43, abs=0.01)
    with pytest.raises(ValueError):
        topology.step_time(EIGHT_B, "async_streaming", 64)
    with pytest.raises(ValueError):
        topology.step_time(EIGHT_B, "pipelined")


@pytest.mark.parametrize(
    ("wording", "expected"),
    [
        ("colocated", "colocated"),
        ("separated", "separated_sync"),
        ("disaggregated", "separated_sync"),
        ("one-step overlap", "one_step_overlap"),
        ("separate_async", "async_streaming"),
        ("colocate_async", "async_streaming"),
    ],
)
def test_topology_wording(wording, expected):
    assert topology_kind(wording) == expected


# -- long tail -------------------------------------------------------------------------


def test_t90_is_the_time_by_which_90_percent_have_finished():
    # 10 trajectories finishing at 1..10 s: 9 of them (90%) are done at 9 s
    s = longtail.tail_split([5, 3, 1, 2, 4, 6, 7, 8, 9, 10])
    assert (s.rollout_s, s.t_thr_s, s.t_tail_s) == (10, 9, 1)
    assert s.tail_share == pytest.approx(0.1)


def test_t90_uses_integer_ceil():
    # 70 trajectories: ceil(0.9 * 70) = 63 (float 0.9 * 70 = 63.00000000000001 would give 64)
    assert longtail.tail_split(range(1, 71)).t_thr_s == 63
    # 11 trajectories: ceil(9.9) = 10 -> the 10th smallest
    assert longtail.tail_split(range(1, 12)).t_thr_s == 10


def test_under_10_trajectories_the_tail_is_read_off_the_last_two_finishes():
    # 9 trajectories: the slowest 10% is 0.9 of one, and ceil(0.9 * 9) = 9 would be the slowest
    # itself (no tail ever). t90 is read at 0.9 n = 8.1, between the 8th (44 s) and the 9th (300 s):
    # T_tail = 0.1 n (t_n - t_(n-1)) = 0.9 x 256 = 230.4 s, T_thr = 69.6 s
    s = longtail.tail_split([30, 32, 34, 36, 38, 40, 42, 44, 300])
    assert (s.rollout_s, s.t_thr_s, s.t_tail_s) == (300, pytest.approx(69.6), pytest.approx(230.4))
    assert s.tail_share == pytest.approx(230.4 / 300)
    # no straggler, finishes spread evenly: 10% whatever the count, as with many trajectories
    for n in (2, 3, 5, 9, 10, 20):
        assert longtail.tail_split([100 * i / n for i in range(1, n + 1)]).tail_share == pytest.approx(0.1)
    # one trajectory: nothing waits for it, no tail to measure
    one = longtail.tail_split([7.0])
    assert one.rollout_s == 7.0 and math.isnan(one.t_tail_s) and math.isnan(one.tail_share)
    # the simulator's ground truth keeps the same convention
    assert simulator.t90([30, 32, 34, 36, 38, 40, 42, 44, 300]) == pytest.approx(69.6)
    assert simulator.t90(range(1, 11)) == 9 and math.isnan(simulator.t90([7.0]))
    # the infinite one left out: 3 and 9 s, t90 = 9 - 0.1 x 2 x (9 - 3) = 7.8
    assert simulator.t90([3, 9, math.inf]) == longtail.tail_split([3, 9, math.inf]).t_thr_s == pytest.approx(7.8)


def test_tail_split_ignores_missing_and_handles_empty():
    assert longtail.tail_split([1.0, None, float("nan"), 2.0]).rollout_s == 2.0
    assert math.isnan(longtail.tail_split([]).rollout_s)


def test_tail_share_estimate_from_lengths():
    # L90 = 8000 * ln 10 = 18420.7; f = 1 - 18420.7 / 32000 = 0.4243
    assert longtail.estimate_tail_share(8000, 32000) == pytest.approx(0.4243, abs=1e-4)
    # more than 10% of responses hit the limit: the slowest 10% all stop at the limit together, no tail
    assert longtail.estimate_tail_share(8000, 32000, clip_ratio=0.15) == 0.0
    assert math.isnan(longtail.estimate_tail_share(0, 256))


def test_an_estimate_the_lengths_cannot_give_is_unknown_not_zero():
    # mean x ln 10 = 460.5 reaches the max 256: the lengths are bunched near the max, not spread as
    # the exponential assumes, and the tail is anywhere from 0 to its bound
    assert math.isnan(longtail.estimate_tail_share(200, 256))
    # exactly 10% at the cap: 1 of 10 responses, and the 9th of 10 (t90) can be shorter: no 0
    lengths = [100] * 9 + [1000]
    assert longtail.tail_split(lengths).tail_share == pytest.approx(0.9)  # finish time = length
    assert longtail.estimate_tail_share(8000, 32000, clip_ratio=0.1) == pytest.approx(0.4243, abs=1e-4)
    # 2 of 10 at the cap: t90 is the cap, as the estimate says
    assert longtail.tail_split([100] * 8 + [1000, 1000]).tail_share == 0.0


def test_tail_share_bound_from_mean_min_and_max():
    # mean <= 0.9 L90 + 0.1 max: f <= (max - mean) / (0.9 max); 256 - 239 = 17 over 230.4 = 0.0738
    assert longtail.tail_share_bound(239, 256) == pytest.approx(17 / 230.4)
    # and L90 >= min: f <= 1 - min / max. Mean 210: (256 - 210) / 230.4 = 0.1997, below 1 - 200 / 256 =
    # 0.2188, so the mean's bound holds; with min 220, 1 - 220 / 256 = 0.1406 is the lower
    assert longtail.tail_share_bound(210, 256, 200) == pytest.approx(46 / 230.4)
    assert longtail.tail_share_bound(210, 256, 220) == pytest.approx(0.140625)
    # nine at 100 and one at 1000: mean 190, true f = 0.9, and the bound (1000 - 190) / 900 = 0.9 is met
    lengths = [100] * 9 + [1000]
    bound = longtail.tail_share_bound(np.mean(lengths), max(lengths), min(lengths))
    assert bound == pytest.approx(0.9) == longtail.tail_split(lengths).tail_share
    # any lengths, finish time = length: the true share never passes the bound
    rng = np.random.default_rng(0)
    for _ in range(200):
        x = rng.lognormal(5, rng.uniform(0.1, 2), size=int(rng.integers(10, 300)))
        assert longtail.tail_split(x).tail_share <= longtail.tail_share_bound(x.mean(), x.max(), x.min()) + 1e-12
    assert math.isnan(longtail.tail_share_bound(0, 256))


# -- engine balance, sync bubble, staleness ---------------------------------------------


def test_dressage_engine_balance():
    # 8 engines, 128 trajectories: balanced each runs 1600 equivalent steps (12800 in all); with
    # the tail the heaviest runs 2600 and the other seven share 10200.
    loads = pd.Series([2600] + [10200 / 7] * 7)
    b = sync_balance.engine_balance(loads)
    assert b.n_engines == 8 and b.mean_load == pytest.approx(1600) and b.max_load == 2600
    # utilisation 1600 / 2600 = 61.5%; throughput 800 * 0.615 = 492 steps/s; batch 16 s -> 26 s
    assert b.utilisation == pytest.approx(0.615, abs=5e-4)
    assert 800 * b.utilisation == pytest.approx(492, abs=0.5)
    assert 16 / b.utilisation == pytest.approx(26)
    # CV: deviations +1000 once and -142.857 seven times; variance (1e6 + 7 * 20408.2) / 8 = 142857.1;
    # std 377.96; CV = 377.96 / 1600 = 0.2362
    assert b.cv == pytest.approx(0.2362, abs=1e-4)
    assert sync_balance.engine_balance({"a": 5, "b": 5}).cv == 0.0


def test_sync_bubble():
    # T_sync / (k T_mb + T_sync): 13 s sync after 4 mini-batches of 10 s = 13 / 53 = 0.2453
    assert sync_balance.sync_bubble(13, 10, 4) == pytest.approx(0.2453, abs=1e-4)
    # delta sync (21x less: 13 -> 0.62 s) nearly removes it: 0.62 / 40.62 = 1.5%
    assert sync_balance.sync_bubble(13 / 21, 10, 4) == pytest.approx(0.0152, abs=1e-4)


def test_expected_staleness():
    # floor((95 + 10) / 30) = floor(3.5) = 3; a 20 s answer with no wait: floor(0.67) = 0
    assert staleness.expected_staleness(95, 10, 30) == 3
    assert staleness.expected_staleness(np.array([20, 95, 300]), 0, 30).tolist() == [0, 3, 10]


def test_expected_lag_against_generation_and_wait():
    # weight syncs every 100 s; submitted at 0 and taken at 100, 200, 300 s: 1, 2, 3 versions expected
    e = staleness.expected_lag(np.array([1, 2, 3]), np.zeros(3), np.array([100.0, 200.0, 300.0]), 100.0)
    assert (e.mean_observed, e.mean_expected, e.excess, e.within_one) == (2.0, 2.0, 0.0, 1.0)
    # lags of 3 where 100 s and 200 s of generation and wait explain 1 and 2: only the second is within one
    e = staleness.expected_lag(np.array([3, 3]), np.array([0.0, 50.0]), np.array([100.0, 250.0]), 100.0)
    assert (e.mean_expected, e.excess, e.within_one) == (1.5, 1.5, 0.5)
    # an unknown time leaves the sample out; no sync interval, no check
    e = staleness.expected_lag(np.array([1, 9]), np.array([0.0, np.nan]), np.array([100.0, 100.0]), 100.0)
    assert (e.mean_observed, e.mean_expected) == (1.0, 1.0)
    assert staleness.expected_lag(np.array([1]), np.zeros(1), np.ones(1), float("nan")) is None


def test_drop_length_bias():
    # lags 0..9 with lengths 100..1000: dropping lag > 8 removes one sample of 1000 tokens,
    # keeps nine averaging (100 + ... + 900) / 9 = 500: bias 2.0, 10% dropped
    d = staleness.drop_length_bias(np.arange(10), np.arange(1, 11) * 100, 8)
    assert (d.dropped_share, d.mean_len_dropped, d.mean_len_kept, d.bias) == (0.1, 1000, 500, 2.0)
    none = staleness.drop_length_bias(np.zeros(4), np.ones(4), 8)
    assert none.dropped_share == 0 and math.isnan(none.bias)
    # every sample over: all of them dropped, none kept
    every = staleness.drop_length_bias(np.array([9, 12]), np.array([100, 300]), 8)
    assert (every.dropped_share, every.mean_len_dropped) == (1.0, 200.0) and math.isnan(every.mean_len_kept)
    # a lag not known is never over the threshold: that sample is kept
    unknown = staleness.drop_length_bias(np.array([np.nan, 9.0]), np.array([100, 300]), 8)
    assert (unknown.dropped_share, unknown.mean_len_dropped, unknown.mean_len_kept) == (0.5, 300.0, 100.0)


# -- GPUs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "flops"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 989e12),
        ("NVIDIA H100 PCIe", "H100 PCIe", 756e12),
        ("NVIDIA H200", "H200", 989e12),
        ("NVIDIA H20", "H20", 148e12),
        ("NVIDIA A100-SXM4-80GB", "A100", 312e12),
        ("NVIDIA B200", "B200", 2.25e15),
        ("NVIDIA L40S", "L40S", 362e12),
        ("NVIDIA L40", "L40", 181e12),
        ("NVIDIA L4", "L4", 121e12),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 165e12),
    ],
)
def test_gpu_names_resolve_to_peaks(name, model, flops):
    assert gpu_model(name) == model
    assert peak_flops(name) == flops


def test_gpu_overrides_and_unknown_parts():
    assert peak_flops("Tesla K80") is None
    assert peak_flops("Tesla K80", {"Tesla K80": 8.7e12}) == 8.7e12
    assert peak_flops("NVIDIA H100 80GB HBM3", {"H100 SXM": 900e12}) == 900e12
    assert all(v > 1e13 for v in PEAK_BF16_DENSE_FLOPS.values())


# -- data helpers and advice ------------------------------------------------------------


def test_a_step_row_without_a_key_says_nothing():
    # a row with no key names no metric: it must not be read as any other key's value
    table = pa.table(
        {
            "step": [1, 1, 2],
            "time": [1.0, 1.0, 2.0],
            "key": pa.array(["timing_s/gen", None, "timing_s/step"]),
            "value": [10.0, 99.0, 30.0],
        }
    )
    for steps in (table, table.to_pandas()):
        usable = usable_step_rows(steps)
        assert usable["key"].tolist() == ["timing_s/gen", "timing_s/step"]
        assert usable["value"].tolist() == [10.0, 30.0]
        wide = wide_steps(steps)
        assert wide["timing_s/gen"].tolist()[0] == 10.0 and math.isnan(wide["timing_s/step"][1])


def test_timers_of_a_batch_whose_rows_have_no_key_are_none():
    # the live dashboard judges each batch of rows read on its own: a batch of rows without a key
    # (the column is nullable) holds no timer, finite or not, and must not stop its refresh
    rows = pd.DataFrame({"step": [1, 2], "key": pd.Series([None, None], dtype=object), "value": [np.inf, 3.0]})
    assert timer_finiteness(rows).empty
    mixed = rows.assign(key=[None, "timing/gen"])  # an older verl's spelling, canonicalised
    got = timer_finiteness(mixed)
    assert got[["step", "key", "finite"]].values.tolist() == [[2, "timing_s/gen", True]]


def test_wide_steps_keeps_the_latest_attempt_whole():
    long = pd.DataFrame(
        {
            "step": [1, 1, 1, 1, 2],
            "attempt": [0, 0, 1, 0, 0],
            "time": [1.0, 1.0, 5.0, 2.0, 3.0],
            "key": ["timing/gen", "a", "timing_s/gen", "b", "actor/lr(1e-4)"],
            "value": [10.0, 1.0, 20.0, None, 0.1],
        }
    )
    wide = wide_steps(long)
    # step 1: attempt 1 replaces attempt 0 entirely (its "a" is gone); null values dropped
    assert wide.loc[1, "timing_s/gen"] == 20.0
    assert not {"a", "b", "timing/gen"} & set(wide.columns)
    # old spellings are renamed and rescaled by rlscope.collectors.verl_metrics: lr(1e-4) 0.1 = 1e-5
    assert wide.loc[2, "actor/lr"] == pytest.approx(1e-5)


def test_a_resumed_runs_validation_of_its_checkpoint_step_keeps_that_steps_training():
    # steps 1-2 trained and validated; the run resumes from step 2's checkpoint, validates it
    # again (verl's val_before_train: a record of validation keys alone, attempt 1), trains on
    long = pd.DataFrame(
        {
            "step": [1, 2, 2, 2, 2, 3],
            "attempt": [0, 0, 0, 0, 1, 1],
            "time": [1.0, 2.0, 2.0, 2.0, 9.0, 10.0],
            "key": ["timing_s/step", "timing_s/step", "actor/pg_loss", "val-core/acc", "val-core/acc", "timing_s/step"],
            "value": [10.0, 20.0, 0.5, 0.6, 0.7, 30.0],
        }
    )
    wide = wide_steps(long)
    assert wide.loc[2, "timing_s/step"] == 20.0 and wide.loc[2, "actor/pg_loss"] == 0.5  # training kept
    assert wide.loc[2, "val-core/acc"] == 0.7  # validation from the latest attempt


def _resumed_at_step_4(record: dict[str, float]) -> pd.DataFrame:
    """Steps 4 and 5 trained (step 4 validated, timed and checkpointed), then a restart from step 4's
    checkpoint logs ``record`` for step 4 and trains step 5 again; no row has a time, as an
    importer's have none: attempts alone tell them apart."""
    rows = [
        *[(4, 0, k, v) for k, v in {"timing_s/step": 40.0, "timing_s/gen": 20.0, "actor/pg_loss": 0.5}.items()],
        *[(4, 0, k, v) for k, v in {"timing_s/testing": 6.0, "timing_s/save_checkpoint": 3.0}.items()],
        *[(4, 0, k, v) for k, v in {"val-core/x": 0.2, "val-aux/y": 0.1}.items()],
        *[(5, 0, k, v) for k, v in {"timing_s/step": 50.0, "timing_s/update_actor": 7.0, "val-core/x": 0.9}.items()],
        *[(4, 1, k, v) for k, v in record.items()],
        *[(5, 1, k, v) for k, v in {"timing_s/step": 55.0, "timing_s/gen": 25.0}.items()],
    ]
    step, attempt, key, value = zip(*rows, strict=True)
    return pd.DataFrame({"step": step, "attempt": attempt, "time": math.nan, "key": key, "value": value})


@pytest.mark.parametrize(
    ("record", "testing"),
    [
        ({"val-core/x": 0.3}, 6.0),  # verl's val_before_train: validation metrics alone
        ({"val-core/x": 0.3, "timing_s/testing": 4.0}, 4.0),  # a trainer that times it
        ({"val-core/x": 0.3, "timing_s/testing": 4.0, "timing_s/step": 0.0}, 4.0),  # and a step timer of nothing
    ],
    ids=["untimed", "timed", "zero-step-timer"],
)
def test_a_resumed_runs_record_that_trains_nothing_replaces_only_what_it_holds_of_the_step(record, testing):
    wide = wide_steps(_resumed_at_step_4(record))
    # step 4's training stays attempt 0's, its checkpoint timer too; its validation is attempt 1's
    # whole (val-aux/y, of attempt 0 alone, is gone), with the testing timer the record took, if any
    assert wide.loc[4].dropna().to_dict() == {
        "timing_s/step": 40.0,
        "timing_s/gen": 20.0,
        "actor/pg_loss": 0.5,
        "timing_s/save_checkpoint": 3.0,
        "timing_s/testing": testing,
        "val-core/x": 0.3,
    }


def test_a_step_trained_again_replaces_the_earlier_training_whole_its_validation_too():
    wide = wide_steps(_resumed_at_step_4({"val-core/x": 0.3}))
    # step 5 trained again under attempt 1: nothing of attempt 0 (update_actor, its validation) is left
    assert wide.loc[5].dropna().to_dict() == {"timing_s/step": 55.0, "timing_s/gen": 25.0}


def test_placing_new_rows_beside_rows_placed_before_is_placing_them_all_in_any_order():
    # the live dashboard places what it read before again with each new batch: a resume's record
    # of a step read before that step's training (a late flush) must come out as a fresh read's
    rows = usable_step_rows(_resumed_at_step_4({"val-core/x": 0.3, "timing_s/testing": 4.0}))
    whole = placed_step_rows(rows).set_index(["step", "key"])["value"].sort_index()
    trains_last = rows.iloc[
        np.argsort(rows["key"].isin(["timing_s/step", "timing_s/gen", "actor/pg_loss"]), kind="stable")
    ]
    rng = np.random.default_rng(0)
    # no key twice in an attempt, so any order is one rows could be read in; each cut is a batch
    for order in [trains_last, *(rows.iloc[rng.permutation(len(rows))] for _ in range(5))]:
        for cut in range(1, len(rows)):
            placed = placed_step_rows(pd.concat([placed_step_rows(order[:cut]), order[cut:]]))
            pd.testing.assert_series_equal(placed.set_index(["step", "key"])["value"].sort_index(), whole)


def test_wide_steps_drops_stage_timers_no_clock_could_measure():
    long = pd.DataFrame(
        {
            "step": [1, 1, 1, 1],
            "key": ["timing_s/gen", "timing_s/update_actor", "timing_s/ref", "actor/pg_loss"],
            "value": [20.0, -5.0, float("inf"), -0.3],
        }
    )
    wide = wide_steps(long)
    # negative and infinite seconds are unknown; a negative loss is a value like any other
    assert wide.loc[1].to_dict() == {"timing_s/gen": 20.0, "actor/pg_loss": -0.3}


def test_trend_first_last_quarter_and_slope():
    t = trend(pd.Series([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], index=range(8)))
    # quarters of 8 steps are 2 steps: mean(0.1, 0.2) = 0.15, mean(0.7, 0.8) = 0.75; slope 0.1 per step
    assert (t.first, t.last) == (pytest.approx(0.15), pytest.approx(0.75))
    assert t.change == pytest.approx(0.6) and t.slope_per_step == pytest.approx(0.1)
    assert math.isnan(trend(pd.Series([0.5], index=[3])).slope_per_step)


def test_severity_orders_by_urgency_and_findings_serialise():
    assert Severity.INFO < Severity.WARN < Severity.CRITICAL
    assert max([Severity.WARN, Severity.CRITICAL, Severity.INFO]) is Severity.CRITICAL
    f = finding("long-tail-dominates", Severity.WARN, {"tail_share": 0.45, "basis": "measured"}, "do x")
    assert isinstance(f, Finding) and f.title == "the slowest 10% of trajectories take 45% of rollout time (measured)"
    assert f.to_dict() == {
        "id": "long-tail-dominates",
        "severity": "warn",
        "title": f.title,
        "evidence": {"tail_share": 0.45, "basis": "measured"},
        "recommendation": "do x",
    }
    with pytest.raises(KeyError):
        finding("no-such-finding", Severity.INFO, {}, "")


def test_catalogue_ids_are_anchor_safe_and_documented():
    for key, entry in CATALOGUE.items():
        assert key == entry.id and entry.id == entry.id.lower()
        assert all(c.isalnum() or c == "-" for c in entry.id)
        assert len(entry.runbook) > 80


def test_run_facts_from_meta_spellings():
    f = RunFacts.from_meta({"gpu": {"type": "NVIDIA H20"}, "topology": "separated", "split": "46:18"})
    # no GPU count: the pools add up to it; no peak: the GPU table's
    assert (f.n_gpus, f.rollout_gpus, f.train_gpus, f.peak_flops) == (64, 46, 18, 148e12)
    assert f.kind == "separated_sync" and f.is_pooled and not f.overlapped
    sim = {"gpu": {"count": 8, "peak_flops": 1e15}, "topology": "colocated", "split": {"rollout": 8, "train": 8}}
    f = RunFacts.from_meta(sim | {"model": {"active_params": 1.5e9}, "batch_size": 128, "group_size": 8})
    assert (f.n_gpus, f.peak_flops, f.active_params, f.sequences_per_step) == (8, 1e15, 1.5e9, 1024)
    assert not f.is_pooled
    # verl's colocate_async: async in its samples, but its engines generate while the step waits in
    # gen (trainer_colocate_async.py: on_sample_end puts them to sleep): not overlapped, not pooled
    f = RunFacts.from_meta({"gpu": {"count": 8}, "topology": "colocate_async", "split": {"rollout": 8, "train": 8}})
    assert f.shares_gpus and f.kind == "async_streaming" and not f.overlapped and not f.is_pooled
    assert (
        meta_problems({"gpu": {"count": 8}, "topology": "colocate_async", "split": "8:8"}) == []
    )  # as verl's hook writes
    assert meta_problems({"topology": "colocate_async", "split": "8:8"}) == []  # no count: the split gives it
    # a split of half the GPUs each is no pool either, and is said to be wrong
    halves = {"gpu": {"count": 8}, "topology": "colocate_async", "split": "4:4"}
    assert not RunFacts.from_meta(halves).is_pooled
    assert meta_problems(halves) == ["split 4:4 of a colocate_async run, whose rollout and training share all 8 GPUs"]


def test_an_importer_s_job_first_steps_that_are_no_step_attempt_pairs_are_named_and_ignored():
    # meta.json["importer"]["job_first_steps"]: [step, attempt] of each resumed job's first training
    # record where the log gave no time; a hand-edited value that is none is said once and left out
    good = {"importer": {"job_first_steps": [[4, 1], [7, 1]]}}
    assert imported_job_firsts(good) == [(4, 1), (7, 1)] and meta_problems(good) == []
    bad = {"importer": {"job_first_steps": [[4, 1], [7], ["8", 0], [True, 0]]}}
    assert imported_job_firsts(bad) == [(4, 1)]
    assert meta_problems(bad) == [
        "importer.job_first_steps is [[4, 1], [7], ['8', 0], [True, 0]], not a list of [step, attempt] pairs"
    ]
    assert imported_job_firsts({"importer": {"job_first_steps": "4:1"}}) == []
    assert imported_job_firsts({"importer": "verl-log"}) == [] and meta_problems({"importer": "verl-log"}) == []


def test_recommendations_keep_three_figures_of_short_times():
    from rlscope.advice import fmt_seconds

    # a 4.86 s rollout's 2.19 s tail is not "2 s of 5 s" (40%, against a title of 45%)
    assert (fmt_seconds(2.19), fmt_seconds(4.86), fmt_seconds(9.449)) == ("2.19", "4.86", "9.45")
    assert (fmt_seconds(1449.4), fmt_seconds(99.6), fmt_seconds(float("nan"))) == ("1,449", "100", "?")


def test_mfu_waterfall_title_shows_points_as_the_waterfall_does():
    from rlscope.advice import Severity
    from rlscope.advice.catalogue import finding

    # the waterfall prints 47.8 points for decode; the title must not say 48
    f = finding(
        "mfu-waterfall", Severity.INFO, {"mfu": 0.133, "top_label": "decode throughput", "top_points": 47.8}, ""
    )
    assert f.title == "whole-step MFU 13.3%; the largest loss is decode throughput (47.8 points)"


def test_a_rounded_time_keeps_its_third_figure_when_that_is_a_zero():
    from rlscope.advice import fmt_seconds

    # a 48.03 s modelled step beside a 48.7 s measured one reads "48.0 s", not "48 s" (a rounding slip);
    # a time that is exactly 8 s or 0.5 s has no figure to keep
    assert (fmt_seconds(48.03), fmt_seconds(47.98), fmt_seconds(68.04)) == ("48.0", "48.0", "68.0")
    assert (fmt_seconds(8.0), fmt_seconds(0.5), fmt_seconds(-20.0)) == ("8", "0.5", "-20")
    assert (fmt_seconds(0.1 + 0.2), fmt_seconds(3 * 0.002)) == ("0.3", "0.006")  # float noise is no figure
