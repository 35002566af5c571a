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
from enlace_agent.toolkit import Tool, ToolContext
from enlace_agent.tools import REGISTRY

# Defaults, then the user's `assistant.yaml` (or a path), then overrides.
load_config = partial(load_settings, AssistantConfig, "assistant.yaml")


def build_client(config: AssistantConfig, env: Mapping[str, str]) -> ChatClient:
    key = env.get(config.api_key_env, "").strip()
    return ChatClient(config, Secret(key) if key else None)


def search_file(config: AssistantConfig) -> Path | None:
    """The search settings file `search_config` names (None: the user's search.yaml)."""
    return Path(config.search_config) if config.search_config else None


def assistant_tools(
    config: AssistantConfig,
    env: Mapping[str, str],
    *,
    chain: SearchChain | None = None,
    build_chain: bool = True,
) -> list[Tool]:
    """The tools every turn offers, from the registry (`enlace_agent.tools`): all but the
    personal ones (`recordar`, `olvidar`, made for each person's turn), none when
    `max_tool_rounds` is 0. With `build_chain` the search chain is built now, so a missing search
    key fails at start-up, not mid-conversation; without it (to list the specs) no key is read."""
    if config.max_tool_rounds == 0:
        return []
    if chain is None and build_chain:
        chain = SearchChain(load_search_config(search_file(config), environ=env), env=env)
    context = ToolContext(chain=chain)
    return [e.make(context) for e in REGISTRY if e.offered(config) and not e.personal]


def build_assistant(
    config: AssistantConfig, env: Mapping[str, str], *, chain: SearchChain | None = None
) -> Assistant:
    """The assistant with its tools (`assistant_tools`), its chain built now."""
    tools = assistant_tools(config, env, chain=chain)
    return Assistant(build_client(config, env), tools=tools, config=config)
