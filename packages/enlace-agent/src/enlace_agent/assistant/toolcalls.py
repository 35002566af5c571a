"""Tool calls written inside the text, in the chat format's own blocks (Hermes, as Qwen and the
Enlace chat model write them), for servers that do not parse them into `tool_calls`:

    <tool_call>
    {"name": "buscar_en_internet", "arguments": {"consulta": "tiempo en Soria"}}
    </tool_call>

`TextCallFilter` takes the streamed text and lets through only what the family should read; the
blocks it holds back become `ToolCall`s (with a Spanish `problem` when one cannot be read).
"""

from __future__ import annotations

from enlace_config.contracts import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

from enlace_agent.assistant.client import ToolCall
from enlace_agent.shared import loads_object

OPEN, CLOSE = TOOL_CALL_OPEN, TOOL_CALL_CLOSE


class TextCallFilter:
    def __init__(self) -> None:
        self._buffer = ""
        self._inside = False
        self.blocks: list[str] = []
        self.unclosed: str | None = None

    def feed(self, text: str) -> str:
        """The visible part of `text`: tool-call blocks removed, and a trailing piece that may be
        the start of one held back until the next piece tells."""
        self._buffer += text
        shown: list[str] = []
        while (at := self._buffer.find(tag := CLOSE if self._inside else OPEN)) >= 0:
            (self.blocks if self._inside else shown).append(self._buffer[:at])
            self._buffer = self._buffer[at + len(tag) :]
            self._inside = not self._inside
        if not self._inside:
            keep = len(self._buffer) - _partial_tag(self._buffer)
            shown.append(self._buffer[:keep])
            self._buffer = self._buffer[keep:]
        return "".join(shown)

    def flush(self) -> str:
        """The end of the text: what was held back, unless it is an unclosed block."""
        rest, self._buffer = self._buffer, ""
        if self._inside:
            self.unclosed = rest
            return ""
        return rest

    def calls(self, prefix: str) -> list[ToolCall]:
        """The blocks as calls, ids `{prefix}_{n}`; an unclosed one is a broken call."""
        calls = [parse_block(block, f"{prefix}_{i}") for i, block in enumerate(self.blocks)]
        if self.unclosed is not None:
            problem = f"el bloque {OPEN} no se cerró con {CLOSE}."
            calls.append(ToolCall(f"{prefix}_{len(calls)}", "", "{}", problem))
        return calls


def _partial_tag(text: str) -> int:
    """Length of the longest end of `text` that is a beginning of OPEN."""
    for size in range(min(len(OPEN) - 1, len(text)), 0, -1):
        if OPEN.startswith(text[-size:]):
            return size
    return 0


def parse_block(block: str, call_id: str) -> ToolCall:
    data = loads_object(block)
    if data is None:
        example = f'{OPEN}{{"name": ..., "arguments": {{...}}}}{CLOSE}'
        return ToolCall(call_id, "", "{}", f"la llamada no es JSON válido; escribe {example}.")
    return ToolCall.parse({"id": call_id, "function": data}, call_id)
