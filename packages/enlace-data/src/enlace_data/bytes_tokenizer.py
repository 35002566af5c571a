"""The byte-level tokenizer of the smoke runs: token ids are the UTF-8 byte values (vocabulary 256)."""

from __future__ import annotations

from collections.abc import Iterable

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

    def __repr__(self) -> str:
        return "ByteTokenizer()"
