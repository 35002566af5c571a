"""What Enlace remembers of the family (README, «La memoria»): memories in the history file, one
person's or the household's, read into each prompt under a budget, written and erased by the
person (page, CLI) or by the model (`recordar`, `olvidar`), never holding a secret."""

from enlace_agent.memory.secrets import configured_secrets, secret_kind
from enlace_agent.memory.store import (
    ImportProblems,
    Memory,
    MemoryRefused,
    MemoryStore,
    Scope,
)
from enlace_agent.memory.view import MemoryView

__all__ = [
    "ImportProblems",
    "Memory",
    "MemoryRefused",
    "MemoryStore",
    "MemoryView",
    "Scope",
    "configured_secrets",
    "secret_kind",
]
