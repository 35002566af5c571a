"""Building an assistant from its settings: `assistant.yaml` (or defaults) plus overrides, the
model's key from the environment, and the search tool with the user's search settings."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path

from enlace_config.schema.agent import AssistantConfig

from enlace_agent.assistant.client import ChatClient
from enlace_agent.assistant.loop import Assistant
from enlace_agent.search.chain import SearchChain
from enlace_agent.search.settings import load_config as load_search_config
from enlace_agent.settings import load_settings
from enlace_agent.shared import Secret
from enlace_agent.tools import made
from enlace_agent.tools.protocol import Services, Tool, TurnContext

# Defaults, then the user's `assistant.yaml` (or a path), then overrides.
load_config = partial(load_settings, AssistantConfig, "assistant.yaml")


def build_client(config: AssistantConfig, env: Mapping[str, str]) -> ChatClient:
    key = env.get(config.api_key_env, "").strip()
    return ChatClient(config, Secret(key) if key else None)


def search_file(config: AssistantConfig) -> Path | None:
    """The search settings file `search_config` names (None: the user's search.yaml)."""
    return Path(config.search_config) if config.search_config else None


def search_chain(config: AssistantConfig, env: Mapping[str, str]) -> SearchChain | None:
    """The search chain of `config` (its `search_config`, or the user's search.yaml) with the keys
    in `env`, built now, so a missing key fails at start-up, not mid-conversation; None when no
    tool is offered (`max_tool_rounds` 0). The one place a chain is built from the settings."""
    if config.max_tool_rounds == 0:
        return None
    return SearchChain(load_search_config(search_file(config), environ=env), env=env)


def assistant_tools(config: AssistantConfig, services: Services) -> list[Tool]:
    """The tools every turn offers, from the registry (`enlace_agent.tools`): those that need
    nothing of the turn (the household's and the memory's are made for each turn); none when
    `max_tool_rounds` is 0."""
    return made(TurnContext(config, services), "nothing")


def build_assistant(
    config: AssistantConfig, env: Mapping[str, str], *, chain: SearchChain | None = None
) -> Assistant:
    """The assistant with its tools (`assistant_tools`) and its services, the chain built now
    (`search_chain`) unless given."""
    services = Services(chain or search_chain(config, env))
    tools = assistant_tools(config, services)
    return Assistant(build_client(config, env), tools=tools, config=config, services=services)
