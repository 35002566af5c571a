"""Tools for the Enlace family assistant, starting with private web search (no torch).

`__version__` comes from the installed metadata, read on first use: importing importlib.metadata
costs more than the rest of `enlace-search`'s start-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    __version__: str


def __getattr__(name: str) -> str:
    if name == "__version__":
        from importlib.metadata import version

        value = version("enlace-agent")
        globals()["__version__"] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
