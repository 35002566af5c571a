"""Clean a Project Gutenberg plain-text ebook down to the work itself.

`clean_book(raw)` = `normalize_text` (UTF-8 without BOM, "\\n" line endings, trailing spaces off,
NFC) then `strip_gutenberg`: keep what lies between the START marker (or the old ``*END*THE SMALL
PRINT``) and the END marker (or the older ``End of (the) Project Gutenberg's ...`` line); drop every
paragraph still naming Project Gutenberg and the production credits at the top (its licence asks
that no reference stays once the header goes); rejoin paragraphs with one blank line. Text without
the markers is kept whole, so local non-PG files work too. The smoke corpus's pinned sha256 sums
are computed over the result.
"""

from __future__ import annotations

import re
import unicodedata

_START = re.compile(
    r"^\s*(\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG|\*END\*THE SMALL PRINT)", re.IGNORECASE
)
PG_END = re.compile(
    r"^\s*(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
    re.IGNORECASE,
)
_MENTIONS_PG = re.compile(r"gutenberg|pgdp\.net", re.IGNORECASE)
_CREDITS = re.compile(
    r"^\s*(Produced by|E-?text prepared by|This (e-?text|file) was produced|Transcribed by)",
    re.IGNORECASE,
)
_CREDITS_WITHIN = 5  # credits are looked for among the first paragraphs only


def normalize_text(raw: bytes | str) -> str:
    """UTF-8 (BOM dropped; Latin-1 if the bytes are not UTF-8), "\\n" endings, rstripped lines, NFC."""
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = raw.decode("latin-1")
    else:
        text = raw.removeprefix("\ufeff")
    text = re.sub(r"\r+\n", "\n", text).replace("\r", "\n")
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    return unicodedata.normalize("NFC", text)


def strip_gutenberg(text: str) -> str:
    """The body of a normalised PG ebook (see the module docstring); other text unchanged."""
    lines = text.split("\n")
    start = next((i for i, line in enumerate(lines) if _START.match(line)), None)
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if PG_END.match(lines[i])), len(lines))
        lines = lines[start + 1 : end]
    paragraphs = [p.strip("\n") for p in re.split(r"\n{2,}", "\n".join(lines))]
    kept: list[str] = []
    for i, p in enumerate(p for p in paragraphs if p.strip()):
        if start is not None and (
            _MENTIONS_PG.search(p) or (i < _CREDITS_WITHIN and _CREDITS.match(p))
        ):
            continue
        kept.append(p)
    return "\n\n".join(kept) + "\n" if kept else ""


def clean_book(raw: bytes | str) -> str:
    return strip_gutenberg(normalize_text(raw))
