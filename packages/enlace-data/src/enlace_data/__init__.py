"""Corpus, tokenizer, shard format and exactly resumable loaders for Enlace (no torch)."""

from importlib.metadata import version as _version

__version__ = _version("enlace-data")
