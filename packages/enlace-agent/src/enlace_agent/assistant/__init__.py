"""The family assistant: a tool loop over a model served by any OpenAI-compatible server.

    from enlace_agent.assistant import build_assistant, load_config
    assistant = build_assistant(load_config(), dict(os.environ))
    history = []
    for event in assistant.turn(history, "¿Qué día es hoy?"):
        ...
    history = list(event.messages)  # the last event is a TurnEnd

`enlace-assistant` (`enlace_agent.cli.assistant`) is the terminal chat built on it.
"""

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
