"""Patch verl functions where verl looks them up, now or as soon as their module is imported.

The hook is imported while ``import verl`` runs, before the trainer, the agent loop or the
tracking module exist; importing them early would change verl's import order and cost
seconds in every Ray worker. Instead a finder at the front of ``sys.meta_path`` notices the
import of each target module and patches it the moment its code has run, before any other
module can ``from ... import`` the original. Modules already imported are patched at once,
and module-level functions are also replaced where other verl modules hold them by name.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rlscope.collectors.verl._hook import Hook

__all__ = ["MARK", "Target", "install_targets"]

MARK = "__rlscope_verl_hook__"  # set on every wrapper, so a target is never wrapped twice


@dataclass(frozen=True)
class Target:
    """One attribute to wrap: ``module`` then a dotted ``attr`` (``Class.method`` or ``function``)."""

    feature: str  # what it records; faults are counted per feature
    module: str
    attr: str
    wrap: Callable[[Hook, Any], Any]  # (hook, original) -> wrapper
    rebind: bool = False  # also replace the original in verl modules that imported it by name

    @property
    def key(self) -> str:
        return f"{self.module}:{self.attr}"


def _owners(obj: Any, name: str) -> list[Any]:
    """Where ``obj.name`` must be replaced. For a ``@ray.remote`` class (an ActorClass) that is
    the user's class and also Ray's subclass of it, which holds its own (tracing) copy of every
    method taken when the decorator ran, and is what Ray pickles and runs."""
    modified = getattr(getattr(obj, "__ray_metadata__", None), "modified_class", None)
    plain = getattr(modified, "__ray_actor_class__", None)
    if plain is None:
        return [obj]
    return [plain, modified] if name in vars(modified) else [plain]


def _wrap_attr(hook: Hook, target: Target, owner: Any, name: str) -> bool:
    original = getattr(owner, name, None)
    if original is None:
        return False
    if not getattr(original, MARK, False):
        wrapper = target.wrap(hook, original)
        setattr(wrapper, MARK, True)
        setattr(owner, name, wrapper)
        if target.rebind:
            for mod in list(sys.modules.values()):
                if (
                    getattr(mod, "__name__", "").startswith("verl.")
                    and getattr(mod, "__dict__", {}).get(name) is original
                ):
                    setattr(mod, name, wrapper)
    return True


def _apply(hook: Hook, target: Target, module: ModuleType) -> None:
    owner: Any = module
    *path, name = target.attr.split(".")
    for part in path:
        owner = getattr(owner, part, None)
    found = [_wrap_attr(hook, target, o, name) for o in _owners(owner, name)] if owner is not None else []
    if found and all(found):
        hook.patches[target.key] = "patched"
        return
    hook.patches[target.key] = "missing"
    hook.warn_once(
        f"missing:{target.key}",
        "rlscope verl hook: verl %s has no %s; %s is not recorded, the rest is",
        getattr(sys.modules.get("verl"), "__version__", "?"),
        target.key,
        target.feature,
    )


def _apply_guarded(hook: Hook, targets: Sequence[Target], module: ModuleType) -> None:
    for target in targets:
        try:
            _apply(hook, target, module)
        except Exception as exc:  # noqa: BLE001 - a patch that fails leaves verl as it was
            hook.patches[target.key] = f"failed: {type(exc).__name__}: {exc}"
            hook.fault("install", exc)


class _PatchAfterExec(importlib.abc.Loader):
    """Runs the real loader, then the patches; the module keeps its real loader afterwards."""

    def __init__(self, loader: Any, after: Callable[[ModuleType], None]):
        self._loader = loader
        self._after = after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... for tools that ask
        return getattr(self._loader, name)


class _Watcher(importlib.abc.MetaPathFinder):
    """Finds target modules through the other finders and wraps their loader."""

    def __init__(self, hook: Hook, waiting: dict[str, list[Target]]):
        self._hook = hook
        self._waiting = waiting
        self._busy = threading.local()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._waiting or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchAfterExec(spec.loader, functools.partial(self._patch, fullname))
        return spec

    def _patch(self, fullname: str, module: ModuleType) -> None:
        """Once the module's code has run (a spec that is only looked at, never executed, leaves
        its targets waiting for the real import): patch it, and stop watching when all are done."""
        targets = self._waiting.pop(fullname, None)
        if targets:
            _apply_guarded(self._hook, targets, module)
        if not self._waiting and self in sys.meta_path:
            sys.meta_path.remove(self)


def install_targets(hook: Hook, targets: Sequence[Target]) -> None:
    """Patch every target's module now if imported, else when it is."""
    waiting: dict[str, list[Target]] = {}
    for target in targets:
        waiting.setdefault(target.module, []).append(target)
    for name in list(waiting):
        module = sys.modules.get(name)
        if module is not None:
            _apply_guarded(hook, waiting.pop(name), module)
        else:
            for target in waiting[name]:
                hook.patches[target.key] = "pending"
    if waiting:
        sys.meta_path.insert(0, _Watcher(hook, waiting))
