"""Where the agent's settings come from: package defaults, a user's YAML file, the environment.

- Defaults: the schema in enlace-config carries them (a pip install has no `configs/` folder).
- User file: `--config PATH`, else `$XDG_CONFIG_HOME/enlace/<name>.yaml` (~/.config/... when unset)
  if it exists (`search.yaml`, `assistant.yaml`).
- Overrides (command-line flags, library arguments) on top, validated by the same schema: the one
  home of every limit. `InvalidOptions.keys` names what was refused, for the caller to explain.
- Secrets: only from the environment, optionally loaded from `--env-file PATH`, else
  `$XDG_CONFIG_HOME/enlace/.env` if it exists. Variables already set in the environment win.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError


class SettingsError(ValueError):
    """A settings file, env file or override cannot be used."""


class InvalidOptions(SettingsError):
    """Overrides (command-line flags, library arguments) the schema refused; `keys` names them."""

    def __init__(self, keys: tuple[str, ...], message: str) -> None:
        self.keys = keys
        super().__init__(message)


C = TypeVar("C", bound=BaseModel)

_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def _xdg_dir(variable: str, fallback: str, environ: Mapping[str, str] | None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get(variable) or str(Path.home() / fallback)) / "enlace"


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    return _xdg_dir("XDG_CONFIG_HOME", ".config", environ)


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """What Enlace may lose (the search cool-downs)."""
    return _xdg_dir("XDG_CACHE_HOME", ".cache", environ)


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where Enlace keeps what it must not lose (the web page's histories)."""
    return _xdg_dir("XDG_DATA_HOME", ".local/share", environ)


def parse_env_file(text: str) -> dict[str, str]:
    """`KEY=value` lines (`export` allowed, `#` comments, optional single or double quotes).

    No interpolation, no multi-line values: a tiny subset of the dotenv format."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ENV_LINE.match(line)
        if match is None:
            continue
        key, value = match.group(1), match.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        else:
            value = re.split(r"\s+#", value, maxsplit=1)[0].strip()
        values[key] = value
    return values


def load_env(
    env_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    error: type[SettingsError] = SettingsError,
) -> dict[str, str]:
    """The environment the tools see: the env file's values under the real environment's."""
    env = dict(os.environ if environ is None else environ)
    path = env_file if env_file is not None else config_dir(env) / ".env"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if env_file is not None:
            raise error(f"env file {env_file} does not exist") from None
        return env
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read env file {path}: {exc}") from None
    return {**parse_env_file(text), **env}


def invalid_keys(exc: ValidationError) -> tuple[str, ...]:
    """The top-level keys a validation error is about (cross-field problems included)."""
    from enlace_config.schema.base import FieldProblems

    keys: list[str] = []
    for err in exc.errors():
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblems):
            keys.extend(k.split(".")[0] for p in cause.problems for k in (p.key, *p.related))
        elif err["loc"]:
            keys.append(str(err["loc"][0]))
    return tuple(dict.fromkeys(keys))


def with_overrides(config: C, overrides: Mapping[str, Any] | None) -> C:
    """`config` with the non-None `overrides` applied, validated by its schema."""
    changes = {k: v for k, v in (overrides or {}).items() if v is not None}
    if not changes:
        return config
    try:
        return type(config).model_validate({**config.model_dump(), **changes})
    except ValidationError as exc:
        lines = "\n".join(
            f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise InvalidOptions(invalid_keys(exc), f"invalid option:\n{lines}") from None


def load_settings(
    schema: type[C],
    file_name: str,
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    error: type[SettingsError] = SettingsError,
) -> C:
    """Defaults, then the user's file (explicit `path` or the XDG one), then `overrides`.

    The file is read by enlace-config's loader (every problem reported with its line)."""
    config = schema()
    file = path if path is not None else config_dir(environ) / file_name
    if path is not None or file.is_file():
        if not file.is_file():
            raise error(f"{file_name.removesuffix('.yaml')} config {file} does not exist")
        from enlace_config import ConfigError
        from enlace_config import load_config as load_config_file

        try:
            config = load_config_file(file, schema=schema).config
        except ConfigError as exc:
            raise error(str(exc)) from None
    return with_overrides(config, overrides)
