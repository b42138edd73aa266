"""What a verl run's config says about it, as ``meta.json`` fields (docs/run-directory.md).

The batch shape, GPU count and model are what turn phase seconds into MFU and topology
what-ifs, and verl states them in three places a collector can see:

- the resolved config ``Tracking.__init__`` receives (the verl hook);
- the config dump ``main_ppo`` pprints at start (``pprint(OmegaConf.to_container(config))``),
  which a console log keeps;
- the launch command's Hydra overrides (``python3 -m verl.trainer.main_ppo
  data.train_batch_size=128 ...``), which a log of a ``set -x`` script keeps.

The fully async and one-step-off trainers give rollout its own pool (a top-level ``rollout``
section with its own ``nnodes`` and ``n_gpus_per_node``), and so does the v1 trainer's
``trainer.v1.trainer_mode=separate_async`` (``actor_rollout_ref.rollout.nnodes`` and
``n_gpus_per_node``): the GPU count is then both pools, and the split and topology follow
(``async_training`` marks the fully async trainer). ``colocate_async`` is async on the
trainer's GPUs, which rollout and training take in turns: topology ``colocate_async``, both
sides of the split all GPUs.

verl also prints each Hugging Face model's size as it builds it (``verl/utils/model.py``,
``print_model_size``: ``Qwen2ForCausalLM contains 494.03M parameters``). The first causal LM
is the actor (its reference copy prints the same, later); a ``...ForTokenClassification`` is
the critic when the estimator uses one (GAE), else a reward model. A mixture of experts prints
its total parameters, not the active ones MFU needs, and Megatron prints a wrapper's shard
(``DistributedDataParallel``): neither is taken.
"""

from __future__ import annotations

import ast
import math
import re
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["MAX_LAUNCH_CHARS", "LogFacts", "config_from_overrides", "meta_from_config"]

# "<class> contains <n with 2 decimals><K|M|B|> parameters", matched from " contains " outwards
_SIZE_NUMBER = re.compile(r"(\d+\.\d\d)([KMB]?) parameters\b")
_SIZE_CLASS = re.compile(r"(?<!\w)([A-Z]\w*)$")
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9}
_ACTOR_CLASS = ("ForCausalLM", "ForConditionalGeneration", "LMHeadModel")
_CRITIC_CLASS = "ForTokenClassification"
# model classes whose parameter count is not the active count per token
_MIXTURE = re.compile(
    r"moe|mixtral|deepseek|dbrx|jamba|gptoss|arctic|grok|llama4|qwen3next|dots1|minimax|longcat", re.I
)
_KEY = re.compile(r"^[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)+$")
# a trainer's entry point, as a module (-m verl.trainer.main_ppo) or a script (main_ppo.py);
# generation and evaluation are not trainers
_DOTTED = re.compile(r"[\w.]+")
_NOT_TRAINERS = ("main_generation", "main_eval")
MAX_LAUNCH_CHARS = 1 << 16  # a longer line is not read as a launch command
_MAX_COUNT = 1 << 31  # a batch or GPU count beyond this is not a count


def _get(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < _MAX_COUNT else None


def _gpus(cfg: Mapping[str, Any], section: str) -> int | None:
    nodes, per_node = _int(_get(cfg, f"{section}.nnodes")), _int(_get(cfg, f"{section}.n_gpus_per_node"))
    return nodes * per_node if nodes and per_node else None


def meta_from_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The meta.json fields a verl PPO config states outright; anything it does not state stays absent."""
    meta: dict[str, Any] = {}
    batch = _int(_get(cfg, "data.train_batch_size"))
    group = _int(_get(cfg, "actor_rollout_ref.rollout.n"))
    max_response = _int(_get(cfg, "data.max_response_length")) or _int(
        _get(cfg, "actor_rollout_ref.rollout.response_length")
    )
    model = _get(cfg, "actor_rollout_ref.model.path")
    if batch:
        meta["batch_size"] = batch
    if group:
        meta["group_size"] = group
    if max_response:
        meta["max_response_length"] = max_response
    train = _gpus(cfg, "trainer")
    mode = _get(cfg, "trainer.v1.trainer_mode") if _get(cfg, "trainer.use_v1") is not False else None
    pool: tuple[int | None, str] | None = None  # a rollout pool of its own: (its GPUs, the topology)
    if isinstance(cfg.get("rollout"), Mapping):  # the fully async and one-step-off trainers
        pool = _gpus(cfg, "rollout"), "async" if "async_training" in cfg else "one_step_overlap"
    elif mode == "separate_async":  # v1: a standalone rollout pool beside the trainer's
        nodes = _int(_get(cfg, "actor_rollout_ref.rollout.nnodes"))
        per_node = _int(_get(cfg, "actor_rollout_ref.rollout.n_gpus_per_node")) or _int(
            _get(cfg, "trainer.n_gpus_per_node")  # verl's default for the rollout pool's
        )
        pool = (nodes * per_node if nodes and per_node else None), "async"
    if pool is not None:
        rollout, meta["topology"] = pool
        if train and rollout:
            meta["gpu"] = {"count": train + rollout}
            meta["split"] = {"rollout": rollout, "train": train}
    elif train:
        meta["gpu"] = {"count": train}
        if mode == "colocate_async":  # v1: async, rollout and training take turns on the same GPUs
            meta["topology"] = "colocate_async"
            meta["split"] = {"rollout": train, "train": train}
    if isinstance(model, str) and "$" not in model:
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
        if isinstance(value, (str, bool, int)) or (isinstance(value, float) and math.isfinite(value))
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
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text  # YAML reads "nan" and "inf" as text


def config_from_overrides(tokens: Iterable[str]) -> dict[str, Any]:
    """A nested config from the ``a.b.c=value`` tokens of a launch command (``+``/``++`` prefixes
    allowed); other tokens, and values left to the shell or Hydra (``$X``, ``${...}``), are
    ignored. A later override of the same key wins, as in Hydra."""
    cfg: dict[str, Any] = {}
    for token in tokens:
        key, eq, raw = token.lstrip("+").partition("=")
        if not eq or not _KEY.match(key) or "$" in raw:
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


def _literal(node: ast.AST) -> Any:
    """A pprint-ed value: Python literals, bare ``inf``/``nan``; anything else (a repr) is None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            k = _literal(key) if key is not None else None
            if isinstance(k, (str, int, float, bool)):
                out[k] = _literal(value)
        return out
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
        return None
    if isinstance(node, ast.Name) and node.id in ("inf", "nan"):
        return float(node.id)
    return None


class LogFacts:
    """The run facts a console log states, gathered as its lines are read; :meth:`meta` says them.

    A config dump is the resolved config and wins over launch overrides, whatever the order.
    """

    def __init__(self) -> None:
        self._dump: dict[str, Any] | None = None
        self._overrides: dict[str, Any] = {}
        self._actor: float | None = None
        self._token_classifier: float | None = None

    @staticmethod
    def _entry(text: str) -> tuple[str, list[str]] | None:
        """The trainer entry point of a command line and the words after it, else None."""
        if "main" not in text or len(text) > MAX_LAUNCH_CHARS:
            return None
        words = text.split()
        for i, word in enumerate(words):
            module = words[i + 1] if word == "-m" and i + 1 < len(words) else ""
            script = word.rpartition("/")[2] if word.endswith(".py") else ""
            if (
                module.startswith(("verl.", "recipe."))
                and "main" in module.rpartition(".")[2]
                and _DOTTED.fullmatch(module)
            ):
                entry, rest = module, i + 2
            elif script.startswith("main_") and _DOTTED.fullmatch(script):
                entry, rest = script, i + 1
            else:
                continue
            return None if any(n in entry for n in _NOT_TRAINERS) else (entry, words[rest:])
        return None

    @classmethod
    def is_launch(cls, text: str) -> bool:
        """Whether ``text`` runs a verl trainer (``python3 -m verl.trainer.main_ppo ...``)."""
        return cls._entry(text) is not None

    def launch(self, text: str) -> None:
        """Take the overrides of a launch command (one line, continuations already joined)."""
        found = self._entry(text)
        if found is None:
            return
        entry, words = found
        try:
            tokens = shlex.split(" ".join(words))
        except ValueError:  # an unbalanced quote: the words as they are
            tokens = words
        cfg = config_from_overrides(tokens)
        # the pooled trainers' own config files hold these sections whether or not a flag names them
        if "fully_async" in entry:
            cfg.setdefault("async_training", {})
            cfg.setdefault("rollout", {})
        elif "one_step_off" in entry:
            cfg.setdefault("rollout", {})
        self._overrides = cfg

    def config_dump(self, text: str) -> bool:
        """Take a pprint-ed config (``{'actor_rollout_ref': ...}``); False if it does not parse."""
        try:
            value = _literal(ast.parse(text.strip(), mode="eval").body)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return False
        if not isinstance(value, dict):
            return False
        self._dump = value
        return True

    def model_size(self, text: str) -> tuple[bool, str | None]:
        """Take a ``print_model_size`` line: whether a size was taken, and the class of a
        mixture of experts whose total size was left out."""
        at = text.find(" contains ")
        size = _SIZE_NUMBER.match(text, at + 10) if at > 0 else None
        named = _SIZE_CLASS.search(text, 0, at) if size else None
        if size is None or named is None:
            return False, None
        cls, params = named.group(1), float(size.group(1)) * _SCALE[size.group(2)]
        if cls.endswith(_CRITIC_CLASS) and self._token_classifier is None:
            self._token_classifier = params
            return True, None
        if cls.endswith(_ACTOR_CLASS):
            if _MIXTURE.search(cls):
                return False, cls
            if self._actor is None:
                self._actor = params
                return True, None
        return False, None

    def meta(self) -> dict[str, Any]:
        """The meta.json fields the log stated so far."""
        config = self._dump if self._dump is not None else self._overrides
        meta = meta_from_config(config)
        model: dict[str, Any] = dict(meta.get("model", {}))
        if self._actor is not None:
            model["active_params"] = self._actor
        estimator = _get(config, "algorithm.adv_estimator")
        if self._token_classifier is not None and estimator in (None, "gae"):
            model["critic_params"] = self._token_classifier
        if model:
            meta["model"] = model
        return meta
