"""shardsmith: turn a tree of huge industrial images into training-ready shards."""

__version__ = "0.1.0"

from .config import Config, load_config  # noqa: E402
from .pipeline import PackResult, pack  # noqa: E402

__all__ = ["Config", "PackResult", "__version__", "load_config", "pack"]
