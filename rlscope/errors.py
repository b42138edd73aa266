"""Errors that rlscope reports to users as one line, never as a traceback."""

from __future__ import annotations

__all__ = ["MetaError", "RLScopeError", "RunDirError", "UsageError"]


class RLScopeError(Exception):
    """Base class: the CLI prints ``rlscope: <message>`` and exits with ``exit_code``."""

    exit_code = 1


class RunDirError(RLScopeError):
    """The run directory is missing, is not a directory, or holds no rlscope data."""


class MetaError(RLScopeError):
    """``meta.json`` is missing, unreadable or not the object rlscope expects."""


class MetaMalformedError(MetaError):
    """``meta.json`` is there and read, but is no meta a writer could merge into: not JSON (a
    typo, a truncated write), not an object, or a ``schema_version`` that is not a whole number."""


class UsageError(RLScopeError):
    """The command line asks for something that cannot be done (bad option value)."""

    exit_code = 2
