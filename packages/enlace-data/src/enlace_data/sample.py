"""The Spanish sample built into enlace-data: original text written for Enlace (about 40 KB).

Used when a bytes run's `data.path` does not exist and `data.fallback` is `builtin`, so the smoke
job runs on a fresh clone with no network. Split deterministically: the train split is the text
before the first paragraph break at or after 90% of its bytes, the val split is the rest. The two
never overlap and together are the whole sample.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from typing import Literal

SAMPLE_FILE = "sample_es.txt"
VAL_FRACTION = 0.10


@cache
def builtin_text() -> bytes:
    """The whole sample as UTF-8 bytes (NFC, "\\n" line endings)."""
    return files("enlace_data").joinpath(SAMPLE_FILE).read_bytes()


def split_point(data: bytes, val_fraction: float = VAL_FRACTION) -> int:
    """Byte offset where val starts: just after the first blank line at or past (1 - fraction)."""
    target = int(len(data) * (1 - val_fraction))
    cut = data.find(b"\n\n", target)
    return len(data) if cut < 0 else cut + 2


def builtin_split(split: Literal["train", "val"]) -> bytes:
    data = builtin_text()
    cut = split_point(data)
    return data[:cut] if split == "train" else data[cut:]
