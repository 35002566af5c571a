"""The family assistant: a tool loop over a model served by any OpenAI-compatible server (README,
«Como biblioteca»); `enlace-assistant` (`enlace_agent.cli.assistant`) is the terminal chat."""

from enlace_agent.assistant.client import (
    BudgetExceeded,
    ChatClient,
    Completion,
    ContextExceeded,
    ModelError,
    ModelLoading,
    ModelNotFound,
    ModelRefused,
    ModelResponseError,
    ModelServerFailed,
    ModelTimeout,
    ModelUnavailable,
    StreamCut,
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
    "ContextExceeded",
    "Event",
    "ModelError",
    "ModelLoading",
    "ModelNotFound",
    "ModelRefused",
    "ModelResponseError",
    "ModelServerFailed",
    "ModelTimeout",
    "ModelUnavailable",
    "StreamCut",
    "TextDelta",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "TurnEnd",
    "build_assistant",
    "build_client",
    "load_config",
]
