"""Where the agent's settings come from: package defaults, a user's YAML file, the environment.

- Defaults: the schema in enlace-config carries them (a pip install has no `configs/` folder).
- User file: `--config PATH`, else `$XDG_CONFIG_HOME/enlace/<name>.yaml` (~/.config/... when unset)
  if it exists (`search.yaml`, `assistant.yaml`).
- Overrides (command-line flags, library arguments) on top, validated by the same schema: the one
  home of every limit. `InvalidOptions.keys` names what was refused, for the caller to explain.
- Secrets: only from the environment, optionally loaded from `--env-file PATH`, else
  `$XDG_CONFIG_HOME/enlace/.env` if it exists. Variables already set in the environment win.

Every `SettingsError` message is Spanish: the person running the assistant reads it. enlace-config
words its problems in English (for the developer tools); `spanish_problems` re-words them here,
and the English original goes to the debug log (`--debug`).
"""

from __future__ import annotations

import errno
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

if TYPE_CHECKING:
    from enlace_config import ConfigError
    from enlace_config.errors import Problem

log = logging.getLogger("enlace_agent.settings")


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


def settings_file(
    file_name: str, path: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The file a setting is read from: `path` when given, else `$XDG_CONFIG_HOME/enlace/<name>`
    (`search.yaml`, `assistant.yaml`, `.env`). Messages name it, so a person can act on it."""
    return path if path is not None else config_dir(environ) / file_name


_OS_REASONS = {
    errno.EACCES: "no hay permiso",
    errno.EPERM: "no hay permiso",
    errno.ENOENT: "no existe",
    errno.EISDIR: "es una carpeta",
    errno.ENOTDIR: "una parte de la ruta no es una carpeta",
    errno.ENOSPC: "no queda espacio en el disco",
    errno.EROFS: "el disco es de solo lectura",
    errno.EADDRINUSE: "ya está en uso",
    errno.EADDRNOTAVAIL: "esa dirección no es de este equipo",
}


def os_reason(exc: OSError) -> str:
    """What an operating-system error means, in Spanish, for a message to the person (the
    system's own text is English)."""
    return _OS_REASONS.get(exc.errno or 0, f"error del sistema {exc.errno}")


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
    path = settings_file(".env", env_file, env)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if env_file is not None:
            raise error(f"no existe el fichero de claves {env_file}") from None
        return env
    except (OSError, UnicodeDecodeError) as exc:
        log.debug("cannot read env file %s: %s", path, exc)
        why = "no está en UTF-8" if isinstance(exc, UnicodeDecodeError) else os_reason(exc)
        raise error(f"no se puede leer el fichero de claves {path}: {why}") from None
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
        from enlace_config.errors import hide_secrets
        from enlace_config.schema.base import FieldProblems

        log.debug("invalid options: %s", hide_secrets(str(exc)))
        lines: list[str] = []
        for e in exc.errors():
            cause = e.get("ctx", {}).get("error")
            if isinstance(cause, FieldProblems):
                lines.extend(f"  {p.key}: {_message_es(p.message)}" for p in cause.problems)
            else:
                where = ".".join(str(p) for p in e["loc"]) or "(todo)"
                expected = _expected_es(e["msg"].removeprefix("Input should be "))
                lines.append(f"  {where}: se esperaba {expected}")
        raise InvalidOptions(invalid_keys(exc), hide_secrets("\n".join(lines))) from None


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
    file = settings_file(file_name, path, environ)
    if path is not None or file.is_file():
        if not file.is_file():
            raise error(f"no existe el fichero de configuración {file}")
        from enlace_config import ConfigError
        from enlace_config import load_config as load_config_file

        try:
            config = load_config_file(file, schema=schema).config
        except ConfigError as exc:
            log.debug("%s", exc)  # enlace-config's English wording, for --debug
            raise error(spanish_problems(exc)) from None
    return with_overrides(config, overrides)


# ---------------------------------------------------------------- config problems, in Spanish
# enlace-config's phrases (and pydantic's, after its "Input should be" -> "expected") -> Spanish.
# A phrase not listed here is described generically; its English original is in the debug log.
_EXPECTED_ES: tuple[tuple[str, str], ...] = (
    (r"greater than or equal to (.+)", r"un número mayor o igual que \1"),
    (r"less than or equal to (.+)", r"un número menor o igual que \1"),
    (r"greater than (.+)", r"un número mayor que \1"),
    (r"less than (.+)", r"un número menor que \1"),
    (r"a valid integer.*", "un número entero"),
    (r"a finite number.*", "un número finito"),
    (r"a valid number.*", "un número"),
    (r"a valid boolean.*", "true o false"),
    (r"a valid string.*", "un texto"),
    (r"a valid list.*", "una lista"),
    (r"a valid (?:dictionary|mapping).*", "una sección (claves con sus valores)"),
    (r"at least (\d+) characters?", r"un texto de al menos \1 caracteres"),
    (r"at most (\d+) characters?", r"un texto de como mucho \1 caracteres"),
    (r"at least (\d+) items?.*", r"al menos \1 elementos"),
    (r"at most (\d+) items?.*", r"como mucho \1 elementos"),
    (
        r"text matching the pattern .*https\?://.*",
        "una dirección que empiece por http:// o https://",
    ),
    (
        r"(?:text matching the pattern|String should match pattern) .*",
        "otra forma (mira el ejemplo en la documentación)",
    ),
)
# The schema's own sentences (enlace_config.schema.agent), whole.
_SENTENCES_ES: tuple[tuple[str, str], ...] = (
    (r"(\S+) \((.+)\) must not exceed (\S+) \((.+)\)", r"\1 (\2) no puede pasar de \3 (\4)"),
    (
        r"keepalive_s \((.+)\) must be below stall_timeout_s \((.+)\),.*",
        r"keepalive_s (\1) tiene que ser menor que stall_timeout_s (\2): si no, una respuesta "
        r"que va bien parecería atascada",
    ),
    (
        r"the top level of .* must be a mapping of keys.*",
        "el fichero tiene que ser una sección de claves (líneas «clave: valor»), no una lista "
        "ni un valor suelto",
    ),
    (r"names repeated: (.+)", r"nombres repetidos: \1"),
    (r"lists (.+) more than once", r"\1 aparece más de una vez"),
    (
        r"(.+) has no token_env: listening on (\S+) .*",
        r"\1 no tiene token_env: escuchar en \2 (más allá de este equipo) exige una clave de "
        r"acceso para cada persona",
    ),
    (
        r"this looks like a key itself.*",
        "el nombre de una variable de entorno, no la clave: pon la clave en el entorno (o en el "
        "fichero .env) y aquí el nombre de la variable",
    ),
    (
        r"text matching the pattern '\^\[A-Za-z_\]\[A-Za-z0-9_\]\*\$'",
        "el nombre de una variable de entorno (letras, cifras y _), no la clave",
    ),
)
_CHOICES = re.compile(r"(?:'[^']*'(?:, | or ))*'[^']*'")
_DID_YOU_MEAN = re.compile(r";? did you mean '([^']*)'\?")
_KEYS_HERE = re.compile(r" \(the keys here are: (.*)\)$")
_SECRET_VALUE = re.compile(r"a value of (\d+) characters, not shown \(it may be a secret\)")


def _expected_es(text: str) -> str:
    text = text.removeprefix("Value error, ")
    for pattern, spanish in (*_SENTENCES_ES, *_EXPECTED_ES):
        if re.fullmatch(pattern, text):
            return re.sub(pattern, spanish, text)
    if _CHOICES.fullmatch(text):
        return "uno de estos: " + ", ".join(re.findall(r"'([^']*)'", text))
    return "otro valor"


def _value_es(text: str) -> str:
    text = _SECRET_VALUE.sub(
        r"un valor de \1 caracteres que no se muestra (puede ser una clave)", text
    )
    text = re.sub(r"\((\d+) chars\)$", r"(\1 caracteres)", text)
    return "una sección" if text == "a mapping" else text


def _message_es(message: str) -> str:
    hint = _DID_YOU_MEAN.search(message)
    tail = f"; ¿querías decir «{hint.group(1)}»?" if hint else ""
    message = _DID_YOU_MEAN.sub("", message)
    if message.startswith("unknown key"):
        keys = _KEYS_HERE.search(message)
        return "clave desconocida" + (f" (las claves aquí son: {keys.group(1)})" if keys else tail)
    if message.startswith("missing:"):
        return "falta: esta clave es obligatoria"
    got = re.fullmatch(r"got (.+): expected (.+)", message, re.DOTALL)
    if got:
        return f"{_value_es(got.group(1))} no vale: se esperaba {_expected_es(got.group(2))}{tail}"
    for pattern, spanish in _SENTENCES_ES:
        if re.fullmatch(pattern, message, re.DOTALL):
            return re.sub(pattern, spanish, message, flags=re.DOTALL)
    if message.startswith("YAML"):
        return "el fichero no es YAML válido (revisa la sangría, los dos puntos y las comillas)"
    if "is empty" in message:
        return "el fichero está vacío: escribe las claves que quieras cambiar"
    return "este valor no es válido aquí (el detalle técnico, en inglés, con --debug)"


def _problem_es(problem: Problem, subject: str | None) -> str:
    from enlace_config.errors import display_path

    origin, where = problem.origin, list[str]()
    if origin is not None and origin.kind == "file" and origin.file is not None:
        shown = display_path(origin.file)
        if shown != subject:
            where.append(shown)
        if origin.line is not None:
            where.append(f"línea {origin.line}")
    elif origin is not None and origin.kind == "override":
        where.append("en la línea de órdenes")
    head = ", ".join([*where, *([problem.key] if problem.key else [])])
    related = ", ".join(k for k, _ in problem.related)
    text = _message_es(problem.message) + (f" (junto con {related})" if related else "")
    return f"{head}: {text}" if head else text


def spanish_problems(exc: ConfigError) -> str:
    """The problems of a config file as the person reads them: «hay 2 problemas en FILE:» and
    one line each (where, which key, what is wrong), in Spanish; no secret shown."""
    from enlace_config.errors import MAX_OF_A_KIND, hide_secrets

    n = len(exc.problems)
    head = f"hay {n} problema{'s' * (n != 1)} en {exc.subject or 'la configuración'}:"
    lines = [f"  - {_problem_es(p, exc.subject)}" for p in exc.problems[:MAX_OF_A_KIND]]
    if n > MAX_OF_A_KIND:
        lines.append(f"  ... y {n - MAX_OF_A_KIND} más")
    return hide_secrets("\n".join([head, *lines]))
