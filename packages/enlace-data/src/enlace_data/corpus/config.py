"""Loading a corpus config file into a validated `CorpusConfig`.

enlace-config's loader does the work (positions in the file, `include:`, `key=value` overrides,
"did you mean" for unknown keys); its `ConfigError` becomes a `DataError` so the CLI prints it as one
message with exit code 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from enlace_config import ConfigError, load_config
from enlace_config.schema.corpus import CorpusConfig

from enlace_data.errors import DataError


def load_corpus_config(path: str | Path, overrides: Sequence[str] = ()) -> CorpusConfig:
    p = Path(path)
    if not p.is_file():
        raise DataError("corpus config file does not exist", path=p)
    try:
        return load_config(p, list(overrides), schema=CorpusConfig).config
    except ConfigError as e:
        raise DataError(f"invalid corpus config: {e}", path=p) from None
