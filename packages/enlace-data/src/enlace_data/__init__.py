"""Corpus, tokenizer, shard format and exactly resumable loaders for Enlace (no torch)."""

from importlib.metadata import version as _version

from enlace_data.errors import DataError
from enlace_data.loader import Loader, build_loader, eval_batches
from enlace_data.tokenizer import ByteTokenizer, Tokenizer, load_tokenizer

__version__ = _version("enlace-data")

__all__ = [
    "ByteTokenizer",
    "DataError",
    "Loader",
    "Tokenizer",
    "__version__",
    "build_loader",
    "eval_batches",
    "load_tokenizer",
]
