"""One job's settings: frozen dataclasses (``model``), read from YAML and command-line
overrides and validated once (``parse``)."""

from .model import (
    ANNOTATION_FILES,
    FORMATS,
    LABEL_MODES,
    LOCAL_WORKERS_PER_CORE,
    RESIZE_MODES,
    AnnotationConfig,
    Config,
    ImageConfig,
    OutputConfig,
    RunConfig,
    SourceConfig,
    StageConfig,
    StorageConfig,
    TileConfig,
    check_paths,
    check_workers,
    machine_cores,
)
from .parse import config_from_settings, load_config

__all__ = ["ANNOTATION_FILES", "FORMATS", "LABEL_MODES", "LOCAL_WORKERS_PER_CORE", "RESIZE_MODES",
           "AnnotationConfig", "Config", "ImageConfig", "OutputConfig", "RunConfig",
           "SourceConfig", "StageConfig", "StorageConfig", "TileConfig", "check_paths",
           "check_workers", "config_from_settings", "load_config", "machine_cores"]
