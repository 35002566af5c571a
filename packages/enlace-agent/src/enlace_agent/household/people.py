"""The family as the settings name it: each person's access token from the environment, checked
before anything listens (a listening page never runs with a missing or short token). No web
framework here: `doctor` checks the tokens without the page."""

from __future__ import annotations

from collections.abc import Mapping

from enlace_config.schema.agent import LOOPBACK_HOSTS, WebConfig


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
