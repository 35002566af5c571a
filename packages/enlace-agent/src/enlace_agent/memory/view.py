"""One person's memory as the assistant's loop sees it for one turn: what enters the prompt, what
the tools may write or erase, and which memories an answer used. Only that person's memories and
the household's are within reach."""

from __future__ import annotations

from dataclasses import dataclass

from enlace_agent.memory.store import Memory, MemoryStore


@dataclass(frozen=True)
class MemoryView:
    memories: MemoryStore
    person: str
    conversation_id: str | None = None  # where what the model remembers comes from
    source: str = "assistant"

    def active(self) -> bool:
        """Whether the memory is read and written in this turn (on, and not paused)."""
        return self.memories.config.enabled and not self.memories.paused(self.person)

    def recall(self, question: str) -> list[Memory]:
        return self.memories.recall(self.person, question)

    def used(self, recalled: list[Memory], question: str, answer: str) -> list[Memory]:
        return self.memories.used(self.person, recalled, question, answer)

    def remember(self, text: str, scope: str) -> tuple[Memory, bool]:
        return self.memories.add(
            self.person, text, scope, source=self.source, conversation_id=self.conversation_id
        )

    def find(self, words: str) -> Memory | None:
        found = self.memories.search(self.person, words, 1)
        return found[0] if found else None

    def forget(self, memory_id: int) -> Memory | None:
        return self.memories.forget(self.person, memory_id)
