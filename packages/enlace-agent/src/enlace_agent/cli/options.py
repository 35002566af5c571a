"""The options that build the assistant and the building itself, shared by the terminal chat
(`enlace-assistant`, cli/assistant.py) and the page (`enlace-assistant serve`, cli/web.py): both
import this module, neither imports the other. Standard library only at the top (imported before
the arguments are parsed)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import DEBUG_HELP

if TYPE_CHECKING:
    from enlace_config.schema.agent import AssistantConfig

    from enlace_agent.assistant import Assistant
    from enlace_agent.search.errors import MissingCredential

FLAGS = {
    "base_url": "--base-url",
    "model": "--model",
    "max_tool_rounds": "--max-tool-rounds",
    "time_budget_s": "--time-budget",
    "stream": "--no-stream",
}


def add_assistant_options(parser: argparse.ArgumentParser) -> None:
    """The options that build the assistant (shared with `enlace-assistant serve`)."""
    parser.add_argument("--config", type=Path, metavar="RUTA", help="fichero assistant.yaml")
    parser.add_argument("--env-file", type=Path, metavar="RUTA", help="fichero .env con las claves")
    parser.add_argument("--base-url", metavar="URL", help="servidor compatible con OpenAI (…/v1)")
    parser.add_argument("--model", metavar="NOMBRE", help="modelo que pedir al servidor")
    parser.add_argument(
        "--max-tool-rounds", type=int, metavar="N", help="rondas de búsquedas por pregunta"
    )
    parser.add_argument(
        "--time-budget", type=float, metavar="SEGUNDOS", help="tiempo máximo por pregunta"
    )
    parser.add_argument(
        "--no-stream", action="store_true", help="no mostrar la respuesta mientras se escribe"
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)


def setup_assistant(
    args: argparse.Namespace, secrets: list[str]
) -> tuple[Assistant, dict[str, str]] | str:
    """The assistant and the environment it read (the env file's values included), or the
    Spanish explanation of why it cannot start."""
    # Deferred for start-up: pydantic, httpx and the config schema load only once the arguments
    # are read (`--help` and usage errors stay standard-library only).
    from enlace_agent.assistant import build_assistant, load_config
    from enlace_agent.cli.search import KEY_ENV
    from enlace_agent.search.errors import MissingCredential
    from enlace_agent.settings import InvalidOptions, SettingsError, load_env
    from enlace_agent.shared import redact

    overrides: dict[str, Any] = {
        "base_url": args.base_url,
        "model": args.model,
        "max_tool_rounds": args.max_tool_rounds,
        "time_budget_s": args.time_budget,
        "stream": False if args.no_stream else None,
    }
    try:
        env = load_env(args.env_file)
        config: AssistantConfig = load_config(args.config, overrides=overrides)
        secrets.extend(k for k in (env.get(config.api_key_env, ""), env.get(KEY_ENV, "")) if k)
        try:
            return build_assistant(config, env), env
        except MissingCredential as exc:
            return missing_search_key(exc, config, env)
    except InvalidOptions as exc:
        flags = ", ".join(FLAGS.get(k, k) for k in exc.keys)
        return f"opción no válida: {flags}.\n{exc}"
    except SettingsError as exc:
        return f"configuración no válida.\n{redact(str(exc), secrets)}"


def missing_search_key(
    exc: MissingCredential, config: AssistantConfig, env: Mapping[str, str]
) -> str:
    """What to do about the search key the chain of `config` lacks (Spanish)."""
    from enlace_agent.cli.search import missing_key_message, only_duckduckgo_in
    from enlace_agent.household import HouseholdPaths

    file = HouseholdPaths.of(config, env).search_file
    return missing_key_message(exc.provider, exc.env_var, env, only_duckduckgo_in(file))
