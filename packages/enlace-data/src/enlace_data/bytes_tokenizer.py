"""The byte-level tokenizer of the smoke runs: token ids are the UTF-8 byte values (vocabulary 256)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from enlace_data.tokenizer_files import byte_tokenizer_json, write_tokenizer_files

BYTE_TOKENIZER_ID = "bytes-utf8-v1"


class ByteTokenizer:
    """UTF-8 bytes as tokens. Same `encode`/`decode` interface as the SentencePiece `Tokenizer`."""

    vocab_size = 256
    tokenizer_id = BYTE_TOKENIZER_ID

    @property
    def special_ids(self) -> dict[str, int]:
        return {}  # bytes have no special tokens

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Iterable[int]) -> str:
        # A model can emit a sequence cut in the middle of a multi-byte character: replace, not raise.
        return bytes(ids).decode("utf-8", errors="replace")

    def info(self) -> dict[str, Any]:
        return {
            "kind": "bytes",
            "tokenizer_id": self.tokenizer_id,
            "vocab_size": self.vocab_size,
            "special_ids": {},
            "eot_id": None,
        }

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write the tokenizer files (a byte-level Hugging Face tokenizer.json whose ids are the
        byte values, and Enlace's description; see tokenizer_files) into `directory`."""
        write_tokenizer_files(
            directory,
            description=self.info(),
            tokenizer_json=byte_tokenizer_json(),
            special_tokens={},
        )

    def __repr__(self) -> str:
        return "ByteTokenizer()"
