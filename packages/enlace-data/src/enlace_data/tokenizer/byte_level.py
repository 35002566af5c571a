"""The byte-level tokenizer of the smoke runs: token ids 0..255 are the UTF-8 byte values, and the
special tokens (special_tokens.py) follow at 256, 257, ... — never produced from text."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from enlace_data.tokenizer.chat_template import CHAT_TEMPLATE
from enlace_data.tokenizer.files import byte_tokenizer_json, write_tokenizer_files
from enlace_data.tokenizer.special_tokens import EOT, NAMED_SPECIALS

BYTE_TOKENIZER_ID = "bytes-utf8-v1"  # text -> ids is unchanged by the specials above 255


class ByteTokenizer:
    """UTF-8 bytes as tokens. Same `encode`/`decode` interface as the SentencePiece `Tokenizer`."""

    vocab_size = 256 + len(NAMED_SPECIALS)
    tokenizer_id = BYTE_TOKENIZER_ID
    special_ids: dict[str, int] = {name: 256 + i for i, name in enumerate(NAMED_SPECIALS)}  # noqa: RUF012
    eot_id = special_ids[EOT]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of `ids`; special tokens decode to nothing. A model can emit a sequence cut in the
        middle of a multi-byte character: replace, not raise."""
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def info(self) -> dict[str, Any]:
        return {
            "kind": "bytes",
            "tokenizer_id": self.tokenizer_id,
            "vocab_size": self.vocab_size,
            "special_ids": self.special_ids,
            "eot_id": self.eot_id,
            "chat_template": CHAT_TEMPLATE,
        }

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the tokenizer files (a byte-level Hugging Face tokenizer.json whose ids are the
        byte values, the special tokens added after them, and Enlace's description with the chat
        template; see files.py) into `directory`."""
        write_tokenizer_files(
            directory,
            description=self.info(),
            tokenizer_json=byte_tokenizer_json(self.special_ids),
            special_tokens={"eos_token": EOT, "pad_token": EOT},
        )

    def __repr__(self) -> str:
        return "ByteTokenizer()"
