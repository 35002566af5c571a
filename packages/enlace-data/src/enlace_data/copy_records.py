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
from collections.abc import Sequence

__all__ = [
    "CAPITALS",
    "DIGITS",
    "LETTERS",
    "LOWER_CASE",
    "aba_row",
    "copy_record_ids",
    "copy_record_row",
    "recall_record_row",
]

# What the family's copies are made of: the Spanish alphabet in lower case with its accented vowels
# (six of the 32 take two UTF-8 bytes), the same in capitals (a name's, a city's first letter) and
# the digits (a temperature, a price, a day). A copy head learns to copy the bytes its records
# hold and no others: trained on the 32 lower-case letters alone, the script's base copied them at
# 99 % and capitals at 1.5 %, digits at 1 %, so its calls wrote «Bucía» for Lucía and «el 1 de
# junio» for the 10th (benchmarks/CHAT.md, eleventh session). `train.copy_records_letters` takes
# the first N: 32 is the lower case alone, as before.
LOWER_CASE = "abcdefghijklmnñopqrstuvwxyzáéíóú"
CAPITALS = LOWER_CASE.upper()
DIGITS = "0123456789"
LETTERS = LOWER_CASE + CAPITALS + DIGITS
SEPARATOR, END = "|", "\n"
MIN_LETTERS, MAX_LETTERS = 5, 8


MIN_TEXT, MAX_TEXT = 10, 20  # bytes of a text span: one byte seldom identifies where it is in one


def copy_record_row(
    rng: random.Random, length: int, text: bytes | None = None, letters: str = LETTERS
) -> tuple[bytes, list[tuple[int, int]]]:
    """`length` bytes of records «A|A\\n» and the byte spans [start, end) of the copies that end
    inside the row (the last record may be cut). A: 5-8 random `letters`, or with `text` the next
    10-20 bytes of it (natural text, where a copy must match several bytes, not one, to find its
    place: what copying a sentence or a name needs)."""
    row, spans, offset = bytearray(), [], 0
    while len(row) < length:
        if text is None:
            n = rng.randint(MIN_LETTERS, MAX_LETTERS)
            a = "".join(rng.choice(letters) for _ in range(n)).encode()
        else:
            n = rng.randint(MIN_TEXT, MAX_TEXT)
            a, offset = text[offset : offset + n], (offset + n) % max(len(text) - n, 1)
        start = len(row) + len(a) + 1
        row += a + SEPARATOR.encode() + a + END.encode()
        if start + len(a) <= length:
            spans.append((start, start + len(a)))
    return bytes(row[:length]), spans


KEY_LETTERS = 6  # a key is two of the first six letters: its last letter alone seldom says which
MIN_PAIRS, MAX_PAIRS = 3, 5
MIN_VALUE, MAX_VALUE = 3, 6


def recall_record_row(
    rng: random.Random, length: int, letters: str = LETTERS, joins: tuple[str, ...] = ("=",)
) -> tuple[bytes, list[tuple[int, int]]]:
    """`length` bytes of recall records «ab=qwhf cd=zmu|cd=zmu ab=qwhf\\n»: 3-5 pairs of a
    two-letter key (lower case) and a value of 3-6 random `letters`, then the same pairs in
    another order, and the spans [start, end) of the values after the «|» that end inside the
    row. A value's later bytes follow from the byte before them, as in `copy_record_row`; its
    first byte only from its key, several bytes back («cd=», where «d=» or «=» alone occur in
    other pairs): what a name's first letter needs in «Mi hija se llama I…», found by «se llama »
    in the request.

    `joins`: what joins a key to its value, one drawn for each record (none drawn when there is
    one, so «=» alone gives the rows of before); a join with a space separates the pairs with
    «, » instead of « », so that a pair still ends where it seems to: «ab de la Qwhf, cd de la
    zmu|cd de la zmu, ab de la Qwhf», whose first bytes need keys of up to 9 bytes."""
    if not joins:
        raise ValueError("joins: at least one join is needed")
    between = ", " if any(" " in j for j in joins) else " "
    row, spans = bytearray(), []
    while len(row) < length:
        keys = rng.sample([a + b for a in LETTERS[:KEY_LETTERS] for b in LETTERS[:KEY_LETTERS]],
                          rng.randint(MIN_PAIRS, MAX_PAIRS))  # fmt: skip
        pairs = [
            (k, "".join(rng.choice(letters) for _ in range(rng.randint(MIN_VALUE, MAX_VALUE))))
            for k in keys
        ]
        join = joins[0] if len(joins) == 1 else rng.choice(joins)  # one: no draw, as before
        row += between.join(f"{k}{join}{v}" for k, v in pairs).encode() + SEPARATOR.encode()
        rng.shuffle(pairs)
        for i, (k, v) in enumerate(pairs):
            row += f"{between if i else ''}{k}{join}".encode()
            start = len(row)
            row += v.encode()
            if len(row) <= length:
                spans.append((start, len(row)))
        row += END.encode()
    return bytes(row[:length]), spans


MIN_TOKENS, MAX_TOKENS = 4, 8  # tokens of a span: about as many bytes as a name or a short phrase


def copy_record_ids(
    rng: random.Random, length: int, ids: range, text: list[int] | None = None
) -> tuple[list[int], list[tuple[int, int]]]:
    """The token-id form of `copy_record_row`, for a model with a tokenizer: `length` ids of
    records «A A», A 4-8 random ids out of `ids` (the tokenizer's ordinary pieces), or with `text`
    the next 4-8 ids of it, and the spans [start, end) of the copies that end inside the row. No
    separator: a token seldom repeats nearby, so one id already says where its copy stands (in
    bytes one letter does not: the byte records need their «|»)."""
    row: list[int] = []
    spans: list[tuple[int, int]] = []
    offset = 0
    while len(row) < length:
        n = rng.randint(MIN_TOKENS, MAX_TOKENS)
        if text is None:
            a = [rng.choice(ids) for _ in range(n)]
        else:
            a, offset = text[offset : offset + n], (offset + n) % max(len(text) - n, 1)
        start = len(row) + len(a)
        row += a + a
        if start + len(a) <= length:
            spans.append((start, start + len(a)))
    return row[:length], spans


MIN_A, MAX_A = 10, 30  # bytes of A in an «A B A» row: a few words
MIN_B, MAX_B = 5, 25  # and of B, what stands between A and its repeat


def aba_row(
    rng: random.Random, text: Sequence[int], length: int
) -> tuple[list[int], list[tuple[int, int]]]:
    """`length` ids of «A B A» drawn from `text` (a row of the data: its own bytes or ids): A
    10-30 of them from a random place, B the 5-25 after it, then A again, with no separator, and
    again until the row is full; and the spans [start, end) of the repeated A's that start inside
    the row. The shape of `benchmarks/copy_probe.py`'s books probe (uncued natural text that comes
    back a few dozen positions later), drawn from the training split's rows, not its sentences."""
    if not text:
        raise ValueError("text: an «A B A» row needs at least one id to repeat")
    row: list[int] = []
    spans: list[tuple[int, int]] = []
    while len(row) < length:
        a, b = rng.randint(MIN_A, MAX_A), rng.randint(MIN_B, MAX_B)
        start = rng.randint(0, max(0, len(text) - a - b))
        first, between = list(text[start : start + a]), list(text[start + a : start + a + b])
        row += first + between
        if len(row) < length:
            spans.append((len(row), min(len(row) + len(first), length)))
        row += first
    return row[:length], spans
