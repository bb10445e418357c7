"""shardsmith: turn a tree of huge industrial images into training-ready shards.

Public API: ``load_config``, ``pack``, ``stage``, ``verify``.  The heavy parts (image
libraries) load on first use, so ``shardsmith stage`` and ``verify`` start fast.
"""

from __future__ import annotations

from typing import Any

from .config import Config, load_config

__version__ = "0.1.0"

_LAZY = {
    "pack": ("pipeline", "pack"),
    "PackResult": ("pipeline", "PackResult"),
    "stage": ("stage", "stage"),
    "verify": ("verify", "verify"),
}

__all__ = ["Config", "__version__", "load_config", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attribute)
    raise AttributeError(f"module 'shardsmith' has no attribute {name!r}")
