"""The Enlace trainer: hardware validation, schedules, mixed precision, exact resumption."""

from importlib.metadata import version as _version

__version__ = _version("enlace-train")
