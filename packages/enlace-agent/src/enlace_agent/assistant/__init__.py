"""The family assistant: a tool loop over a model served by any OpenAI-compatible server (README,
«Como biblioteca»); `enlace-assistant` (`enlace_agent.cli.assistant`) is the terminal chat."""

from enlace_agent.assistant.client import (
    BudgetExceeded,
    ChatClient,
    Completion,
    ModelError,
    ModelNotFound,
    ModelRefused,
    ModelResponseError,
    ModelTimeout,
    ModelUnavailable,
    ToolCall,
)
from enlace_agent.assistant.loop import (
    Assistant,
    Event,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEnd,
)
from enlace_agent.assistant.setup import build_assistant, build_client, load_config

__all__ = [
    "Assistant",
    "BudgetExceeded",
    "ChatClient",
    "Completion",
    "Event",
    "ModelError",
    "ModelNotFound",
    "ModelRefused",
    "ModelResponseError",
    "ModelTimeout",
    "ModelUnavailable",
    "TextDelta",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnEnd",
    "build_assistant",
    "build_client",
    "load_config",
]
