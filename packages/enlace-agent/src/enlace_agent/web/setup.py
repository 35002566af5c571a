"""Building the page from the assistant's settings: each person's token from the environment
(checked at start-up: a listening page never runs with a missing or short token), the history
store, the app."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from enlace_config.schema.agent import LOOPBACK_HOSTS, WebConfig
from starlette.types import ASGIApp

from enlace_agent.assistant import Assistant
from enlace_agent.web.app import create_app
from enlace_agent.web.store import Store, default_path


class WebSetupError(ValueError):
    """The page cannot start as configured; the message says what to change (in Spanish)."""


def resolve_tokens(config: WebConfig, env: Mapping[str, str]) -> dict[str, str | None]:
    """Each person's access token (None: signs in by name, only on 127.0.0.1)."""
    if not config.people:
        raise WebSetupError(
            "no hay nadie en web.people de assistant.yaml: añade a la familia, por ejemplo "
            "«people: [{name: Ana}, {name: Luis}]» (con token_env si la página escucha en la red)."
        )
    tokens: dict[str, str | None] = {}
    for person in config.people:
        if person.token_env is None:
            tokens[person.name] = None
            continue
        value = env.get(person.token_env, "").strip()
        if len(value) < config.min_token_chars:
            state = "no está definida" if not value else "es demasiado corta"
            raise WebSetupError(
                f"la clave de acceso de {person.name} ({person.token_env}) {state}: define "
                f"{person.token_env} en el entorno o en ~/.config/enlace/.env con al menos "
                f"{config.min_token_chars} caracteres (por ejemplo, la salida de "
                "«python -c 'import secrets; print(secrets.token_urlsafe(24))'»)."
            )
        tokens[person.name] = value
    # WebConfig refuses this too, but a config changed with model_copy(update=...) skips
    # validation, and this is the last gate before the page listens.
    if config.host not in LOOPBACK_HOSTS and None in tokens.values():
        raise WebSetupError(f"escuchar en {config.host} exige una clave para cada persona.")
    return tokens


def store_for(
    config: WebConfig,
    env: Mapping[str, str],
    before_migration: Callable[[Path, int], None] | None = None,
) -> Store:
    """The history store; the default folder is Enlace's own (made 0700 even when it exists)."""
    path = Path(config.database) if config.database else default_path(env)
    return Store(
        path,
        before_migration,
        private_folder=config.database is None,
        timeout_s=config.database_timeout_s,
    )


def build_app(assistant: Assistant, env: Mapping[str, str]) -> ASGIApp:
    from enlace_agent.snapshot import before_migration, household

    config = assistant.config.web
    hook = before_migration(household(assistant.config, env))
    store = store_for(config, env, hook)
    return create_app(config, assistant, store, resolve_tokens(config, env), env)
