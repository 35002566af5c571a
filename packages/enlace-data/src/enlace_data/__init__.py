"""Corpus, tokenizer, shard format and exactly resumable loaders for Enlace (no torch)."""

from importlib.metadata import version as _version

from enlace_data.errors import DataError

__version__ = _version("enlace-data")

__all__ = ["DataError", "__version__"]
