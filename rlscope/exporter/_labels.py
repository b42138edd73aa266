"""Label values that are safe to export: cleaned, length-capped, and bounded in number.

Label values come from the run (data sources, error codes, host names), so a buggy
collector could send control characters, megabyte strings or millions of distinct
values. Every series multiplies Prometheus's memory, so each label is capped: the first
``limit`` distinct values keep their own series and later ones share :data:`OTHER`.
"""

from __future__ import annotations

import hashlib
import unicodedata

__all__ = ["MAX_LABEL_LENGTH", "OTHER", "UNKNOWN", "LabelCap", "sanitize_label"]

OTHER = "__other__"
UNKNOWN = "unknown"
MAX_LABEL_LENGTH = 64


def sanitize_label(value: object, max_length: int = MAX_LABEL_LENGTH) -> str:
    """``value`` as a label: control and format characters removed, trimmed, at most ``max_length``.

    A value cut short keeps a hash of the whole so that two long values stay two series.
    """
    text = "" if value is None else str(value)
    text = "".join(ch for ch in text if unicodedata.category(ch)[0] != "C").strip()
    if not text:
        return UNKNOWN
    if len(text) > max_length:
        digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:8]
        text = f"{text[: max_length - 9]}~{digest}"
    return text


class LabelCap:
    """Maps raw values to sanitised labels; after ``limit`` distinct labels, new ones become OTHER."""

    def __init__(self, limit: int, max_length: int = MAX_LABEL_LENGTH):
        self.limit = limit
        self.max_length = max_length
        self._kept: dict[object, str] = {}
        self._labels: set[str] = set()

    def __call__(self, raw: object) -> str:
        label = self._kept.get(raw)
        if label is not None:
            return label
        label = sanitize_label(raw, self.max_length)
        if label not in self._labels:
            if len(self._labels) >= self.limit:
                return OTHER
            self._labels.add(label)
        self._kept[raw] = label
        return label
