"""Cleaning and filtering of documents: what is changed, what is dropped, and why.

Changes (never drop anything): Unicode NFC; line endings to "\\n"; control characters removed except
"\\n" and "\\t" (C0, DEL, C1, and the byte-order mark / zero-width no-break space U+FEFF); trailing
spaces of every line removed; more than one blank line in a row collapsed to one; leading and
trailing blank lines removed.

Filters (drop the document; thresholds in `cleaning:` of the corpus config), checked in this order:
- ``too_short``: fewer than `min_chars` characters.
- ``repeated_lines``: among its non-empty lines (3 or more), more than `max_repeated_line_fraction`
  repeat an earlier line of the same document (menus, tables, boilerplate).
- ``not_spanish``: at least `language_min_words` words, of which fewer than
  `min_spanish_stopword_ratio` are common Spanish function words (`SPANISH_STOPWORDS`). Spanish prose
  scores about 0.45-0.55, English or French text about 0.05-0.15 against this list.
"""

from __future__ import annotations

import re
import unicodedata

from enlace_config.schema.corpus import CleaningConfig

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


FILTERS = ("too_short", "repeated_lines", "not_spanish")


def filter_reason(text: str, cfg: CleaningConfig) -> str | None:
    """Why the (cleaned) document is dropped, or None to keep it."""
    if len(text) < cfg.min_chars or not text.strip():
        return "too_short"
    if repeated_line_fraction(text) > cfg.max_repeated_line_fraction:
        return "repeated_lines"
    if cfg.min_spanish_stopword_ratio > 0:
        ratio, n = stopword_ratio(text)
        if n >= cfg.language_min_words and ratio < cfg.min_spanish_stopword_ratio:
            return "not_spanish"
    return None


def normalised_key_text(text: str) -> str:
    """What exact deduplication and the split hash compare: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())
