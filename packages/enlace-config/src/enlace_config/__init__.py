"""Configuration schemas and layered YAML composition for Enlace (no torch)."""

from importlib.metadata import version as _version

__version__ = _version("enlace-config")
