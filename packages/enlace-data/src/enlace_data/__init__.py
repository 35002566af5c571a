"""Corpus, tokenizer, shard format and exactly resumable loaders for Enlace (no torch)."""

from importlib.metadata import version as _version

from enlace_data.errors import DataError
from enlace_data.loader import Loader, build_loader, eval_batches

__version__ = _version("enlace-data")

__all__ = ["DataError", "Loader", "__version__", "build_loader", "eval_batches"]
