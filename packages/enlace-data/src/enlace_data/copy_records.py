"""Synthetic copy records: «qwhfk|qwhfk» lines of random letters, where every byte of the second
half is a copy of the byte a few positions back (issue 35).

Books carry little copy signal in a 128-byte window, so a small base trained on them alone never
forms the attention that looks back and copies (benchmarks/CHAT.md). Rows of these records, mixed
into the first steps of pretraining (`train.copy_records_share`, annealed to zero by
`train.copy_records_steps`), give that signal densely; `benchmarks/copy_probe.py` reads a base's
greedy accuracy on held-out rows of them. One generator serves both, so what is trained is what is
measured.
"""

from __future__ import annotations

import random

__all__ = ["LETTERS", "copy_record_row"]

# The Spanish alphabet in lower case with its accented vowels: six of the 32 take two UTF-8 bytes.
LETTERS = "abcdefghijklmnñopqrstuvwxyzáéíóú"
SEPARATOR, END = "|", "\n"
MIN_LETTERS, MAX_LETTERS = 5, 8


def copy_record_row(rng: random.Random, length: int) -> tuple[bytes, list[tuple[int, int]]]:
    """`length` bytes of records «A|A\\n» (A: 5-8 random letters) and the byte spans [start, end)
    of the copies that end inside the row (the last record may be cut)."""
    row, spans = bytearray(), []
    while len(row) < length:
        a = "".join(rng.choice(LETTERS) for _ in range(rng.randint(MIN_LETTERS, MAX_LETTERS)))
        head = f"{a}{SEPARATOR}".encode()
        start = len(row) + len(head)
        row += head + f"{a}{END}".encode()
        end = start + len(a.encode())
        if end <= length:
            spans.append((start, end))
    return bytes(row[:length]), spans
