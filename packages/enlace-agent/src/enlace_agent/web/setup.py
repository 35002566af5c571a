"""Building the page from the assistant's settings: the people's tokens
(`household.people.resolve_tokens`), the household's store, the app."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp

from enlace_agent.assistant import Assistant
from enlace_agent.household.database import store_for
from enlace_agent.household.paths import HouseholdPaths
from enlace_agent.household.people import resolve_tokens
from enlace_agent.web.app import create_app
from enlace_agent.web.openai_api import api_routes


def build_app(
    assistant: Assistant, env: Mapping[str, str], paths: HouseholdPaths | None = None
) -> ASGIApp:
    """The page over the household `paths` says (None: as the assistant's settings place it)."""
    from enlace_agent.snapshot import before_migration, household

    config = assistant.config.web
    paths = paths or HouseholdPaths.of(assistant.config, env)
    hook = before_migration(household(assistant.config, env, paths=paths))
    store = store_for(config, env, hook)
    tokens = resolve_tokens(config, env)
    return create_app(config, assistant, store, tokens, env, paths, api_routes)
