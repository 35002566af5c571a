"""The configuration schemas, one module per section of a run file.

Each section's module is owned by the package that consumes it (model.py by enlace-model, data.py by
enlace-data, ...), but all of them live here so that validating a config never imports torch.
"""

from enlace_config.schema.data import DataConfig
from enlace_config.schema.hardware import HardwareConfig
from enlace_config.schema.model import ModelConfig
from enlace_config.schema.run import RunConfig, RunSection
from enlace_config.schema.train import TrainConfig

__all__ = ["DataConfig", "HardwareConfig", "ModelConfig", "RunConfig", "RunSection", "TrainConfig"]
