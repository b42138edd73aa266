"""What a verl run's config says about it, as ``meta.json`` fields (docs/run-directory.md).

The batch shape, GPU count and model are what turn phase seconds into MFU and topology
what-ifs, and verl states them in three places a collector can see:

- the resolved config ``Tracking.__init__`` receives (the verl hook);
- the config dump ``main_ppo`` pprints at start (``pprint(OmegaConf.to_container(config))``),
  which a console log keeps;
- the launch command's Hydra overrides (``python3 -m verl.trainer.main_ppo
  data.train_batch_size=128 ...``), which a log of a ``set -x`` script keeps.

verl also prints each model's size as it builds it (``verl/utils/model.py``,
``print_model_size``: ``Qwen2ForCausalLM contains 494.03M parameters``). The causal LM is the
actor (its reference copy prints the same, later); the first ``...ForTokenClassification`` is
the critic (a reward model, built after it, prints the same class).
A mixture of experts prints its total parameters, not the active ones MFU needs, so its
size is not taken.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["config_from_overrides", "meta_from_config", "meta_from_model_size"]

_SIZE = re.compile(r"\b([A-Za-z_]\w*) contains (\d+(?:\.\d+)?)([KMB]?) parameters\b")
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9}
# model classes whose parameter count is not the active count per token
_MIXTURE = re.compile(r"moe|mixtral|deepseekv[23]|dbrx|jamba|gptoss|arctic|grok", re.I)
_KEY = re.compile(r"^[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+$")


def _get(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def meta_from_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The meta.json fields a verl PPO config states outright; anything it does not state stays absent."""
    meta: dict[str, Any] = {}
    batch = _int(_get(cfg, "data.train_batch_size"))
    group = _int(_get(cfg, "actor_rollout_ref.rollout.n"))
    max_response = _int(_get(cfg, "data.max_response_length")) or _int(
        _get(cfg, "actor_rollout_ref.rollout.response_length")
    )
    nodes, per_node = _int(_get(cfg, "trainer.nnodes")), _int(_get(cfg, "trainer.n_gpus_per_node"))
    model = _get(cfg, "actor_rollout_ref.model.path")
    if batch:
        meta["batch_size"] = batch
    if group:
        meta["group_size"] = group
    if max_response:
        meta["max_response_length"] = max_response
    if nodes and per_node:
        meta["gpu"] = {"count": nodes * per_node}
    if isinstance(model, str):
        meta["model"] = {"name": model}
    config = {
        key: value
        for key, value in {
            "project_name": _get(cfg, "trainer.project_name"),
            "experiment_name": _get(cfg, "trainer.experiment_name"),
            "use_v1": _get(cfg, "trainer.use_v1"),
            "trainer_mode": _get(cfg, "trainer.v1.trainer_mode"),
            "adv_estimator": _get(cfg, "algorithm.adv_estimator"),
            "rollout_name": _get(cfg, "actor_rollout_ref.rollout.name"),
            "actor_strategy": _get(cfg, "actor_rollout_ref.actor.strategy"),
        }.items()
        if isinstance(value, (str, bool, int, float))
    }
    if config:
        meta["config"] = config
    return meta


def _override_value(text: str) -> Any:
    """A Hydra override's value as YAML would read the simple cases; anything else stays text."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def config_from_overrides(tokens: Iterable[str]) -> dict[str, Any]:
    """A nested config from the ``a.b.c=value`` tokens of a launch command (``+``/``++`` prefixes
    allowed); other tokens are ignored. A later override of the same key wins, as in Hydra."""
    cfg: dict[str, Any] = {}
    for token in tokens:
        key, eq, raw = token.lstrip("+").partition("=")
        if not eq or not _KEY.match(key):
            continue
        *parents, leaf = key.split(".")
        node = cfg
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[leaf] = _override_value(raw)
    return cfg


def meta_from_model_size(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(meta fields, model class)`` from a ``print_model_size`` line; ``(None, None)`` if it is not one.

    The fields are ``{"model": {"active_params": N}}`` for the actor (a causal LM) or
    ``{"model": {"critic_params": N}}`` for a critic; empty for a mixture of experts.
    """
    match = _SIZE.search(text)
    if match is None:
        return None, None
    cls, number, scale = match.groups()
    params = float(number) * _SCALE[scale]
    if cls.endswith("ForTokenClassification"):
        return {"model": {"critic_params": params}}, cls
    if _MIXTURE.search(cls):
        return {}, cls
    return {"model": {"active_params": params}}, cls
