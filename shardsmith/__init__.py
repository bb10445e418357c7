"""shardsmith: turn a tree of huge industrial images into training-ready shards.

Public API: ``load_config``, ``pack``, ``stage``, ``verify``.  Everything loads on first use,
so ``shardsmith stage`` and ``verify`` start fast and importing the package costs nothing.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "Config": ("config", "Config"),
    "load_config": ("config", "load_config"),
    "pack": ("packing.pipeline", "pack"),
    "PackResult": ("packing.pipeline", "PackResult"),
    "stage": ("ops.stage", "stage"),
    "verify": ("ops.verify", "verify"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> object:  # no typing import: `shardsmith` runs this first
    if name in _LAZY:
        from importlib import import_module

        module, attribute = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attribute)
    raise AttributeError(f"module 'shardsmith' has no attribute {name!r}")
