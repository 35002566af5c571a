"""Cleaning and filtering of documents: what is changed, what is dropped, and why.

`clean_text` changes, never drops: NFC, "\\n" line endings, control characters (C0 but tab and
newline, DEL, C1, U+FEFF) removed, trailing spaces and blank-line runs collapsed. Lines holding a
`boilerplate_lines` phrase go next (counted). Then `filter_reason` names the first filter that
drops the document, in the order of `FILTERS` (thresholds under `cleaning:`):
too_short; repeated_lines (menus, tables); symbols (markup, code, mojibake); repetition (Gopher's
duplicate 5-gram fraction: spam, keyword lists); not_spanish (Spanish function words: prose scores
about 0.45-0.55, English or French 0.05-0.15); language_id (lingua's confidence on the first
`sample_chars`, for what function words miss: Portuguese, Catalan, Galician; the costliest, so
last).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any

from enlace_config.schema.corpus import CleaningConfig, LanguageIdConfig

from enlace_data.errors import DataError

# Function words only (no content words), so that the ratio measures "is it Spanish", not topic.
SPANISH_STOPWORDS: frozenset[str] = frozenset(
    """
    a al algo algún alguna algunas alguno algunos ante antes aquel aquella aquellas aquello aquellos
    aquí así aún bien cada como con contra cual cuales cuando cuanto de del desde donde dos e el él
    ella ellas ello ellos en entre era eran es esa esas ese eso esos esta está estaba estaban estas
    este esto estos estoy fue fueron ha había habían han has hasta hay he la las le les lo los más me
    mi mí mis mismo mucho muy nada ni no nos nosotros o os otra otras otro otros para pero poco por
    porque pues que qué quien quién se sea ser si sí sin sino sobre son su sus también tan tanto te
    ti tiene todo todos tu tú tus un una uno unos usted vosotros y ya yo
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_WORD = re.compile(r"[^\W\d_]+")
_BLANK_RUNS = re.compile(r"\n{3,}")
_TRAILING_SPACE = re.compile(r"[ \t\u00a0]+\n")
# C0 controls except \t (09) and \n (0A), DEL, C1 controls, U+FEFF.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ufeff]")


def clean_text(text: str) -> str:
    """The changes listed in the module docstring. Idempotent."""
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = unicodedata.normalize("NFC", text)
    text = _CONTROL.sub("", text)
    text = _TRAILING_SPACE.sub("\n", text + "\n")
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip()


def words(text: str) -> list[str]:
    """Lower-cased alphabetic words (no digits, no punctuation)."""
    return _WORD.findall(text.lower())


def stopword_ratio(text: str) -> tuple[float, int]:
    """(fraction of words that are Spanish function words, number of words)."""
    ws = words(text)
    if not ws:
        return 0.0, 0
    return sum(1 for w in ws if w in SPANISH_STOPWORDS) / len(ws), len(ws)


def repeated_line_fraction(text: str) -> float:
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if len(lines) < 3:
        return 0.0
    return (len(lines) - len(set(lines))) / len(lines)


# Not "symbols": letters, digits, whitespace and the punctuation of ordinary Spanish prose.
_PROSE_PUNCT = ".,;:¿?¡!'\"«»“”‘’()[]-–—…/%&$€º°ª*#@+="
_SYMBOL = re.compile(f"[^\\w\\s{re.escape(_PROSE_PUNCT)}]")
_SPACE = re.compile(r"\s")


def symbol_ratio(text: str) -> float:
    """Fraction of the non-space characters that are not letters, digits or prose punctuation."""
    chars = len(text) - len(_SPACE.findall(text))
    return len(_SYMBOL.findall(text)) / chars if chars else 0.0


def duplicate_ngram_fraction(text: str, n: int = 5) -> float:
    """Fraction of word characters covered by word n-grams that occur more than once (Gopher)."""
    ws = words(text)
    if len(ws) < 2 * n:
        return 0.0
    grams = list(zip(*(ws[i:] for i in range(n)), strict=False))
    counts = Counter(grams)
    if len(counts) == len(grams):  # the usual case: no n-gram repeats
        return 0.0
    covered = bytearray(len(ws))
    for i, g in enumerate(grams):
        if counts[g] > 1:
            covered[i : i + n] = b"\x01" * n
    total = sum(len(w) for w in ws)
    return sum(len(w) for w, c in zip(ws, covered, strict=True) if c) / total


def remove_boilerplate_lines(text: str, phrases: list[str]) -> tuple[str, int]:
    """`text` without the lines that contain one of `phrases` (case-insensitive); lines removed."""
    if not phrases:
        return text, 0
    low = [p.casefold() for p in phrases]
    lines = text.split("\n")
    folded = text.casefold().split("\n")  # once per document, not once per phrase and line
    kept = [line for line, f in zip(lines, folded, strict=True) if not any(p in f for p in low)]
    removed = len(lines) - len(kept)
    return ("\n".join(kept).strip(), removed) if removed else (text, 0)


class LanguageId:
    """lingua's detector for the configured languages, built once per process (its models load
    lazily and hold about 100 MB per language in memory)."""

    def __init__(self, cfg: LanguageIdConfig) -> None:
        try:
            from lingua import IsoCode639_1, Language, LanguageDetectorBuilder
        except ImportError:
            raise DataError(
                "cleaning.language_id needs lingua: install enlace-data's web extra "
                "(pip install 'enlace-data[web]', or uv sync --extra web), or remove "
                "cleaning.language_id"
            ) from None
        langs: list[Any] = []
        for code in cfg.languages:
            try:
                langs.append(Language.from_iso_code_639_1(IsoCode639_1.from_str(code)))
            except ValueError:
                raise DataError(
                    f"cleaning.language_id.languages: {code!r} is not an ISO 639-1 code lingua "
                    "knows (es, en, pt, fr, it, ca, ...)"
                ) from None
        self.cfg = cfg
        self.target = langs[0]
        self._detector = LanguageDetectorBuilder.from_languages(*langs).build()

    def confidence(self, text: str) -> float:
        sample = text[: self.cfg.sample_chars]
        return float(self._detector.compute_language_confidence(sample, self.target))


FILTERS = ("too_short", "repeated_lines", "symbols", "repetition", "not_spanish", "language_id")


def filter_reason(
    text: str, cfg: CleaningConfig, language_id: LanguageId | None = None
) -> str | None:
    """Why the (cleaned) document is dropped, or None to keep it."""
    if len(text) < cfg.min_chars or not text.strip():
        return "too_short"
    if repeated_line_fraction(text) > cfg.max_repeated_line_fraction:
        return "repeated_lines"
    if cfg.max_symbol_ratio < 1 and symbol_ratio(text) > cfg.max_symbol_ratio:
        return "symbols"
    if (
        cfg.max_duplicate_ngram_fraction < 1
        and duplicate_ngram_fraction(text) > cfg.max_duplicate_ngram_fraction
    ):
        return "repetition"
    n_words = -1
    if cfg.min_spanish_stopword_ratio > 0:
        ratio, n_words = stopword_ratio(text)
        if n_words >= cfg.language_min_words and ratio < cfg.min_spanish_stopword_ratio:
            return "not_spanish"
    if language_id is not None:
        if n_words < 0:
            n_words = len(words(text))
        if (
            n_words >= cfg.language_min_words
            and language_id.confidence(text) < language_id.cfg.min_confidence
        ):
            return "language_id"
    return None


def normalised_key_text(text: str) -> str:
    """What exact deduplication and the split hash compare: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())
