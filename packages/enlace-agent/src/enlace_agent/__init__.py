"""Tools for the Enlace family assistant, starting with private web search (no torch)."""

from importlib.metadata import version as _version

__version__ = _version("enlace-agent")
