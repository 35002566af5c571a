"""Where the search settings come from: package defaults, a user's YAML file, the environment.

- Defaults: `SearchConfig()` (the schema in enlace-config carries them; a pip install has no
  `configs/` folder).
- User file: `--config PATH`, else `$XDG_CONFIG_HOME/enlace/search.yaml` (~/.config/... when unset)
  if it exists.
- Secrets: only from the environment (`BRAVE_SEARCH_API_KEY`), optionally loaded from
  `--env-file PATH`, else `$XDG_CONFIG_HOME/enlace/.env` if it exists. Variables already set in the
  environment win over the file's.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from enlace_config.schema.agent import SearchConfig
from pydantic import ValidationError

from enlace_agent.search.errors import InvalidOptions, SearchConfigError

_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$")


def config_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    return Path(env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")) / "enlace"


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
    env_file: Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment the providers see: the env file's values under the real environment's."""
    env = dict(os.environ if environ is None else environ)
    path = env_file if env_file is not None else config_dir(env) / ".env"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if env_file is not None:
            raise SearchConfigError(f"env file {env_file} does not exist") from None
        return env
    except (OSError, UnicodeDecodeError) as exc:
        raise SearchConfigError(f"cannot read env file {path}: {exc}") from None
    return {**parse_env_file(text), **env}


def invalid_keys(exc: ValidationError) -> tuple[str, ...]:
    """The top-level keys a validation error is about (cross-field problems included)."""
    from enlace_config.schema.base import FieldProblems

    keys: list[str] = []
    for err in exc.errors():
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, FieldProblems):
            keys.extend(p.key.split(".")[0] for p in cause.problems)
        elif err["loc"]:
            keys.append(str(err["loc"][0]))
    return tuple(dict.fromkeys(keys))


def with_overrides(config: SearchConfig, overrides: Mapping[str, Any] | None) -> SearchConfig:
    """`config` with the non-None `overrides` applied, validated by the schema (the one home of
    the limits); `InvalidOptions` names the keys refused, for a caller to explain in its words."""
    changes = {k: v for k, v in (overrides or {}).items() if v is not None}
    if not changes:
        return config
    try:
        return SearchConfig.model_validate({**config.model_dump(), **changes})
    except ValidationError as exc:
        lines = "\n".join(
            f"  {'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}"
            for e in exc.errors()
        )
        raise InvalidOptions(invalid_keys(exc), f"invalid option:\n{lines}") from None


def load_config(
    path: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> SearchConfig:
    """Defaults, then the user's file (explicit `path` or the XDG one), then `overrides`.

    The file is read by enlace-config's loader (YAML 1.2, every problem reported with its line)."""
    config = SearchConfig()
    file = path if path is not None else config_dir(environ) / "search.yaml"
    if path is not None or file.is_file():
        if not file.is_file():
            raise SearchConfigError(f"search config {file} does not exist")
        from enlace_config import ConfigError
        from enlace_config import load_config as load_config_file

        try:
            config = load_config_file(file, schema=SearchConfig).config
        except ConfigError as exc:
            raise SearchConfigError(str(exc)) from None
    return with_overrides(config, overrides)


def parse_providers(value: str | Sequence[str]) -> list[str]:
    """`"duckduckgo,brave"` or a list → a clean list of names (validated later by the schema)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [p.strip().lower() for p in items if p.strip()]
