"""Conversations: the format and the data made of them.

- `format.py`: Enlace's conversation format, written once (`render`, `normalize_conversation`,
  `parse_tool_calls`); its Jinja twin, `CHAT_TEMPLATE`, travels with the tokenizer
  (enlace_data.tokenizer.chat_template);
- `loader.py`: the exactly resumable loader of packed conversations (data.kind chat);
- `builtin.py`: the Spanish conversation set built into the package;
- `household_requests.py`: its household requests alone (with short searches and plain
  questions), the reading warm-up's data;
- `tools.py`: the tool specs a set offers (read from a file, checked);
- `cmd.py`: `enlace-data chat SOURCE OUT_DIR`.

`from enlace_data.chat import render, ...` names the format.
"""

from enlace_data.chat.format import (
    EXPECT_KEYS,
    ROLES,
    ChatTokenizer,
    Rendered,
    ToolCall,
    normalize_conversation,
    parse_tool_calls,
    render,
    render_text,
)
from enlace_data.tokenizer.chat_template import CHAT_TEMPLATE

__all__ = [
    "CHAT_TEMPLATE",
    "EXPECT_KEYS",
    "ROLES",
    "ChatTokenizer",
    "Rendered",
    "ToolCall",
    "normalize_conversation",
    "parse_tool_calls",
    "render",
    "render_text",
]
