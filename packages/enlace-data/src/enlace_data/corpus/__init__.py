"""Stage 1 of Enlace: raw Spanish text to uint16 training shards (`enlace-data corpus CONFIG`).

sources (stream documents) -> cleaning (normalise, filter) -> dedup (exact + MinHash/LSH) -> split
(by document hash) -> tokenizer (SentencePiece) -> encode (parallel, resumable shards) -> manifest and
report. See `pipeline` for the output layout.

Names are imported lazily: encoding worker processes import `enlace_data.corpus.encode` and should
not pay for pydantic and the config stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enlace_data.corpus.config import load_corpus_config
    from enlace_data.corpus.pipeline import build_corpus
    from enlace_data.shards import MANIFEST_FILE

__all__ = ["MANIFEST_FILE", "build_corpus", "load_corpus_config"]
_HOMES = {
    "load_corpus_config": "enlace_data.corpus.config",
    "build_corpus": "enlace_data.corpus.pipeline",
    "MANIFEST_FILE": "enlace_data.shards",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(name)
    return getattr(importlib.import_module(_HOMES[name]), name)
