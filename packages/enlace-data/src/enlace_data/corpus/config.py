"""Loading a corpus config file into a validated `CorpusConfig`, with messages naming key and file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from enlace_config.schema.corpus import CorpusConfig
from pydantic import ValidationError

from enlace_data.errors import DataError


def load_corpus_config(path: str | Path) -> CorpusConfig:
    p = Path(path)
    try:
        raw: Any = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError("corpus config file does not exist", path=p) from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read the corpus config ({e})", path=p) from None
    except yaml.YAMLError as e:
        raise DataError(f"not valid YAML: {e}", path=p) from None
    if not isinstance(raw, dict):
        raise DataError(
            "a corpus config must be a mapping of keys (name, out_dir, sources, ...)", path=p
        )
    try:
        return CorpusConfig.model_validate(raw)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(x) for x in err["loc"]) or "(top level)"
            value = err.get("input")
            shown = "" if err["type"] == "missing" else f" (got {value!r:.80})"
            lines.append(f"{key}: {err['msg']}{shown}")
        raise DataError(f"invalid corpus config {p}: " + "; ".join(lines), path=p) from None
