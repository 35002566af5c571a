"""Stage 1 of Enlace: raw Spanish text to uint16 training shards (`enlace-data corpus CONFIG`).

sources (stream documents) -> cleaning (normalise, filter) -> dedup (exact + MinHash/LSH) -> split
(by document hash) -> tokenizer (SentencePiece) -> encode (parallel, resumable shards) -> manifest and
report. See `pipeline` for the output layout.
"""

from enlace_data.corpus.config import load_corpus_config
from enlace_data.corpus.pipeline import MANIFEST_FILE, build_corpus

__all__ = ["MANIFEST_FILE", "build_corpus", "load_corpus_config"]
