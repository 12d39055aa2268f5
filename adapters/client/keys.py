"""Idempotency keys derived from the caller's own ids."""

from __future__ import annotations

import hashlib
import json


def derive_key(*parts: str | int) -> str:
    """An idempotency key derived from ids the caller already has.

    The same parts always give the same key, so a caller that restarts and asks again
    (for the same run, conversation, tool call …) gets the same approval, never a
    second card. Parts are joined unambiguously: ``("a", "bc")`` and ``("ab", "c")``
    give different keys.

    Args:
        *parts: The ids, e.g. the framework's run or thread id and the tool call id.

    Returns:
        64 hexadecimal digits (sha256).

    Raises:
        ValueError: No parts were given.
    """
    if not parts:
        raise ValueError("derive_key needs at least one part")
    joined = json.dumps([str(part) for part in parts], ensure_ascii=False)
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()
