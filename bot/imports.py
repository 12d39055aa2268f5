"""Importing the object a ``package.module:attr`` setting names (``SIGNOFF_APP``, tools)."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from runtime import ConfigurationError


def import_object(spec: str, where: str) -> Any:
    """Import ``package.module:attr`` (``attr`` may be dotted); the working directory is
    importable.

    Raises:
        ConfigurationError: The module cannot be imported or has no such attribute.
    """
    module_name, _, attr_path = spec.partition(":")
    module_name, attr_path = module_name.strip(), attr_path.strip()
    if not module_name or not attr_path:
        raise ConfigurationError(f"{where}: expected package.module:attr, got {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigurationError(
                f"{where}: cannot import module {module_name!r} (no module named {exc.name!r})"
            ) from exc
        raise ConfigurationError(f"{where}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise ConfigurationError(
            f"{where}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(
                f"{where}: module {module_name!r} has no attribute {attr_path!r}"
            ) from None
    return target


__all__ = ["import_object"]
