"""The Enlace decoder-only transformer: model, generation, checkpoints and export."""

from importlib.metadata import version as _version

__version__ = _version("enlace-model")
