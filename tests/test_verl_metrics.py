"""The verl metric dictionary: every old spelling maps to verl's current name, in its unit."""

from __future__ import annotations

import math

import pytest

from rlscope.collectors import verl_metrics as vm


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("timing/gen", "timing_s/gen"),
        ("timing(s)/update_actor", "timing_s/update_actor"),
        ("timing_s/gen", "timing_s/gen"),
        ("timing_per_token(ms)/gen", "timing_per_token_ms/gen"),
        ("mfu/actor", "perf/mfu/actor"),
        ("mfu/critic", "perf/mfu/critic"),
        ("perf/mfu/actor", "perf/mfu/actor"),
        ("critic/kl", "actor/reward_kl_penalty"),
        ("critic/kl_coeff", "actor/reward_kl_penalty_coeff"),
        ("trainer/idle_ratio", "fully_async/trainer/idle_ratio"),
        ("fully_async/trainer/idle_ratio", "fully_async/trainer/idle_ratio"),
        ("rollouter/idle_ratio", "fully_async/rollouter/idle_ratio"),
        ("rollouter/active_time", "fully_async/rollouter/active_time"),
        ("rollouter/validate_time", "rollouter/validate_time"),  # never renamed by verl
        ("timing_s/ref_log_prob", "timing_s/ref"),
        ("timing_s/timing_s/param_sync", "timing_s/param_sync"),  # fully_async_trainer.py's timer name
        ("timing/ref", "timing_s/ref"),
        ("actor/entropy_loss", "actor/entropy_loss"),  # logged again by verl's model-engine workers
        ("val-core/gsm8k/acc/mean@1", "val-core/gsm8k/acc/mean@1"),
        ("my/custom(metric)", "my/custom(metric)"),
    ],
)
def test_canonical_names(old, new):
    assert vm.canonical(old) == new


@pytest.mark.parametrize(
    ("old", "value", "new", "expected"),
    [
        ("actor/lr(1e-4)", 0.010, "actor/lr", 1e-6),  # logged as lr * 1e4 before v0.2
        ("critic/lr(1e-4)", 0.100, "critic/lr", 1e-5),
        ("timing_per_token/gen", 0.00088, "timing_per_token_ms/gen", 0.88),  # seconds -> milliseconds
        ("timing/gen", 21.47, "timing_s/gen", 21.47),
    ],
)
def test_canonical_metric_converts_units(old, value, new, expected):
    name, converted = vm.canonical_metric(old, value)
    assert name == new and converted == pytest.approx(expected)


def test_canonical_metric_keeps_nan_and_inf():
    assert math.isnan(vm.canonical_metric("timing/gen", math.nan)[1])
    assert vm.canonical_metric("actor/lr(1e-4)", math.inf)[1] == math.inf


def test_every_alias_lands_on_a_fixed_point():
    olds = list(vm.RENAMED_KEYS) + [p + "gen" for p in vm.RENAMED_PREFIXES]
    for old in olds:
        new = vm.canonical(old)
        assert new != old and vm.canonical(new) == new, old


@pytest.mark.parametrize(
    ("key", "stage", "phase"),
    [
        ("timing_s/gen", "gen", "generation"),
        ("timing/gen", "gen", "generation"),
        ("timing_s/generate_sequences", "generate_sequences", "generation"),
        ("timing_s/agent_loop/tool_calls/max", "agent_loop", "generation"),
        ("timing_s/reward", "reward", "reward"),
        ("timing_s/old_log_prob", "old_log_prob", "forward"),
        ("timing_s/ref", "ref", "forward"),
        ("timing_s/ref_log_prob", "ref", "forward"),
        ("timing/values", "values", "forward"),
        ("timing_s/adv", "adv", "advantage"),
        ("timing_s/update_actor", "update_actor", "training"),
        ("timing_s/update_critic", "update_critic", "training"),
        ("timing_s/update_weights", "update_weights", "weight_sync"),
        ("timing_s/param_sync", "param_sync", "weight_sync"),
        ("timing_s/timing_s/param_sync", "param_sync", "weight_sync"),
        ("timing_s/wait_last_valid", "wait_last_valid", "wait"),
        ("timing_s/wait_for_something_new", "wait_for_something_new", "wait"),
        ("timing_s/save_checkpoint", "save_checkpoint", "checkpoint"),
        ("timing_s/testing", "testing", "validation"),
        ("timing_s/step", "step", "step"),
        ("timing_s/brand_new_stage", "brand_new_stage", "other"),
        ("timing_per_token_ms/gen", "gen", "generation"),
    ],
)
def test_timing_stage_and_phase(key, stage, phase):
    assert vm.timing_stage(key) == stage
    assert vm.timing_phase(key) == phase
    assert phase in vm.PHASES


@pytest.mark.parametrize("key", ["actor/pg_loss", "perf/mfu/actor", "timing_s/", "rollouter/validate_time"])
def test_non_timing_keys_have_no_phase(key):
    assert vm.timing_phase(key) is None


def test_substages_are_inside_another_stage():
    assert vm.is_substage("timing_s/generate_sequences") and vm.is_substage("timing_s/reshard")
    assert not vm.is_substage("timing_s/gen") and not vm.is_substage("actor/pg_loss")


def test_validation_keys():
    assert vm.is_validation_key("val-core/gsm8k/acc/mean@1")
    assert vm.is_validation_key("val-aux/x") and vm.is_validation_key("val/test_score/gsm8k")
    assert not vm.is_validation_key("validation_time") and not vm.is_validation_key("timing_s/testing")


TRAINED = {"fully_async/count/current_param_version": 1.0, "timing_s/step": 9.0}  # update 2's, verl logs it at 3
WINDOW = {"rollouter/idle_ratio": 0.2, "dynamic_resource/rollout_resource_utilization": 0.8}  # of update 3


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        (TRAINED, [(2, TRAINED)]),  # a sync per update
        # a W&B or TensorBoard step merges the records of one step: the window and validation stay
        (
            {**WINDOW, "rollouter/validate_time": 3.0, **TRAINED},
            [(3, {**WINDOW, "rollouter/validate_time": 3.0}), (2, TRAINED)],
        ),
        ({**TRAINED, "fully_async/count/current_param_version": 2}, None),  # a sync every n > 1 updates
        (WINDOW, None),
        ({"timing_s/step": 9.0}, None),  # any other trainer
        ({"fully_async/count/current_param_version": 5}, None),  # never forward
        ({"fully_async/count/current_param_version": 1.5}, None),  # no version
        ({"fully_async/count/current_param_version": "x"}, None),
        ({"fully_async/count/current_param_version": math.nan}, None),
        ({"fully_async/count/current_param_version": None}, None),
    ],
)
def test_split_record_files_the_fully_async_training_metrics_under_their_update(metrics, expected):
    assert vm.split_record(3, metrics) == (expected or [(3, metrics)])
