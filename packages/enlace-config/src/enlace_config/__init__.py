"""Configuration schemas and layered YAML composition for Enlace (no torch).

    from enlace_config import load_run_config
    resolved = load_run_config("configs/runs/smoke-cpu.yaml", ["train.lr=3e-4"])
    resolved.config.train.lr       # the validated RunConfig
    resolved.origins["train.lr"]   # command line override `train.lr=3e-4`

Errors raise ConfigError (a ValueError) listing every problem with its key, value, expectation and
source. See README.md for the layering rules.
"""

from enlace_config.compose import (
    LoadedConfig,
    ResolvedConfig,
    check_file,
    find_configs_root,
    kind_of,
    load_config,
    load_run_config,
)
from enlace_config.errors import ConfigError, Origin, Problem
from enlace_config.registry import known_folders, schema_for
from enlace_config.schema import RunConfig

__version__: str  # from the installed metadata, read on first access (see __getattr__)


def __getattr__(name: str) -> str:
    # Read lazily: importlib.metadata's scan of installed distributions costs more than the rest of
    # a `check` run, and the CLI never needs the version.
    if name == "__version__":
        from importlib.metadata import version

        return version("enlace-config")
    raise AttributeError(f"module 'enlace_config' has no attribute {name!r}")


__all__ = [
    "ConfigError",
    "LoadedConfig",
    "Origin",
    "Problem",
    "ResolvedConfig",
    "RunConfig",
    "__version__",
    "check_file",
    "find_configs_root",
    "kind_of",
    "known_folders",
    "load_config",
    "load_run_config",
    "schema_for",
]
