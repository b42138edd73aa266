"""Peak dense bf16 tensor FLOP/s of common accelerators: the denominator of every MFU.

Before believing a utilisation figure, know its denominator: these are vendor datasheet
numbers for dense (not 2:4 sparse) bf16 matrix math with fp32 accumulate, per GPU. A run
states its own peak in ``meta.json`` (``gpu.peak_bf16_flops``), which wins over this table;
``overrides`` lets a caller supply numbers for parts the table lacks or clocks it differs on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["PEAK_BF16_DENSE_FLOPS", "gpu_model", "peak_flops"]

PEAK_BF16_DENSE_FLOPS: dict[str, float] = {
    "H100 SXM": 989e12,
    "H100 PCIe": 756e12,
    "H100 NVL": 835e12,
    "H800": 989e12,
    "H200": 989e12,
    "H20": 148e12,
    "GB200": 2.5e15,
    "B200": 2.25e15,
    "B100": 1.75e15,
    "A100": 312e12,
    "A800": 312e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "A10": 125e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "RTX A6000": 155e12,
    "MI300X": 1307e12,
    "MI325X": 1307e12,
    "MI250X": 383e12,
}

# Checked in order: specific variants before the family name (H100 PCIe before H100).
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (model, re.compile(pattern))
    for model, pattern in (
        ("H100 PCIe", r"\bH100\b.*\bPCIE\b"),
        ("H100 NVL", r"\bH100\b.*\bNVL\b"),
        ("H100 SXM", r"\bH100\b"),
        ("H800", r"\bH800\b"),
        ("H200", r"\bH200\b"),
        ("H20", r"\bH20\b"),
        ("GB200", r"\bGB200\b"),
        ("B200", r"\bB200\b"),
        ("B100", r"\bB100\b"),
        ("A100", r"\bA100\b"),
        ("A800", r"\bA800\b"),
        ("L40S", r"\bL40S\b"),
        ("L40", r"\bL40\b"),
        ("L4", r"\bL4\b"),
        ("A10", r"\bA10\b"),
        ("RTX 4090", r"\b4090\b"),
        ("RTX 3090", r"\b3090\b"),
        ("RTX A6000", r"\bA6000\b"),
        ("MI300X", r"\bMI300X\b"),
        ("MI325X", r"\bMI325X\b"),
        ("MI250X", r"\bMI250X\b"),
    )
)


def gpu_model(name: str) -> str | None:
    """The table's name for a GPU as NVML or a user spells it ("NVIDIA H100 80GB HBM3" -> "H100 SXM")."""
    text = re.sub(r"[^A-Z0-9]+", " ", name.upper())
    for model, pattern in _PATTERNS:
        if pattern.search(text):
            return model
    return None


def peak_flops(name: str, overrides: Mapping[str, float] | None = None) -> float | None:
    """Peak dense bf16 FLOP/s per GPU, or None for an unknown part.

    ``overrides`` maps a table name or the exact ``name`` given to a number, and wins.
    """
    overrides = overrides or {}
    if name in overrides:
        return float(overrides[name])
    model = gpu_model(name)
    if model is None:
        return None
    return float(overrides.get(model, PEAK_BF16_DENSE_FLOPS[model]))
