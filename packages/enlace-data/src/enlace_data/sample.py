"""The smoke corpus built into enlace-data: the 14 pinned public-domain Spanish books (8.6 MB).

Used when a bytes run's `data.path` does not exist and `data.fallback` is `builtin`, so a fresh
clone trains offline. `smoke_train.txt.xz` and `smoke_val.txt.xz` are exactly what `enlace-data
smoke` writes, xz compressed (2.5 MB), guarded by the sha256 pins below; `SMOKE_NOTICE.md` says why
the texts are public domain.
"""

from __future__ import annotations

import hashlib
import lzma
from functools import cache
from importlib.resources import files
from typing import Literal

from enlace_data.errors import DataError

Split = Literal["train", "val"]
EMBEDDED = {"train": "smoke_train.txt.xz", "val": "smoke_val.txt.xz"}
SHA256 = {
    "train": "3ccc21c355a4a6f5073c1421deae861963cf85ba39a8a09704d59e6e1741394f",
    "val": "f88ba18e1b1e5d3594afe1fb3ae15e532fa48826bbc03d85505ed5a4912c810d",
}


@cache
def builtin_split(split: Split) -> bytes:
    """One split of the built-in corpus as UTF-8 bytes (NFC, "\\n" line endings), checked."""
    data = lzma.decompress(files("enlace_data").joinpath(EMBEDDED[split]).read_bytes())
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[split]:  # a damaged install: never train on it silently
        raise DataError(
            f"the built-in smoke corpus ({EMBEDDED[split]}) is damaged: sha256 {digest}, "
            f"expected {SHA256[split]}; reinstall enlace-data"
        )
    return data


def split_point(data: bytes, val_fraction: float) -> int:
    """Byte offset where val starts: just after the first blank line at or past (1 - fraction)."""
    target = int(len(data) * (1 - val_fraction))
    cut = data.find(b"\n\n", target)
    return len(data) if cut < 0 else cut + 2
