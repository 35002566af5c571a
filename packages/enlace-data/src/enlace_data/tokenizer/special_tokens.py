"""The special tokens, named once for both tokenizers and the chat format.

They follow the Qwen/Hermes conventions so that serving engines recognise Enlace's chat format
without custom code: ChatML turns (`<|im_start|>role\\n...<|im_end|>\\n`), tool calls inside
`<tool_call>...</tool_call>` and tool results inside `<tool_response>...</tool_response>` (vLLM's
`hermes` parser wants `<tool_call>` and `</tool_call>` as single tokens). Every one of them is a
single id that is never produced from text: a user who types "<|im_end|>" gets ordinary tokens.
"""

from __future__ import annotations

from enlace_config.contracts import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

EOT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL, TOOL_CALL_END = TOOL_CALL_OPEN, TOOL_CALL_CLOSE  # the pair the agent reads back
TOOL_RESPONSE = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"

# The named specials in id order after <unk> (SentencePiece) or after the 256 bytes (ByteTokenizer).
NAMED_SPECIALS = (EOT, IM_START, IM_END, TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END)
