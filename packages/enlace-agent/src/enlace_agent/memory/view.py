"""One person's memory as the assistant's loop sees it for one turn: what enters the prompt, what
the tools may write or erase, and which memories an answer used. Only that person's memories and
the household's are within reach."""

from __future__ import annotations

from dataclasses import dataclass

from enlace_agent.memory.store import Memory, MemoryStore
from enlace_agent.shared import one_line


def quoted(text: str) -> str:
    """A memory as the prompt quotes it: one line between «», its own « and » made plain quotes
    (it cannot close the quotation and write outside it)."""
    return "«" + one_line(text).replace("«", '"').replace("»", '"') + "»"


def prompt_line(number: int, memory: Memory, person: str) -> str:
    """The memory's line in the system prompt (`assistant.prompt.memory_block`):
    `3. [familia] «La abuela vive en Soria»`, `4. [Ana] «…»`."""
    whose = "familia" if memory.scope == "familia" else person
    return f"{number}. [{whose}] {quoted(memory.text)}"


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
        """The memories for the prompt of `question`, measured as their prompt lines."""
        return self.memories.recall(
            self.person, question, lambda n, m: len(prompt_line(n, m, self.person)) + 1
        )

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
