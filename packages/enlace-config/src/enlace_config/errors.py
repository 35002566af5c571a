"""Where a value came from, one problem with a config, and the error that lists them all.

A config error never shows a secret: a key pasted into the config by mistake (into `api_key_env`,
the field that names the variable holding it, or anywhere else) is hidden from every message, and
the value of a field that names a secret (`*_env`, `*_key`, `*_token`, ...) is never quoted.
"""

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

OriginKind = Literal["file", "override", "default"]
MAX_QUOTED = 60  # characters of a value quoted in a message
MAX_OF_A_KIND = 20  # problems of one kind listed before the rest are only counted


# Something shaped like an API key or token: a long word mixing upper case, lower case and
# digits (Brave's, OpenAI's, Python's secrets.token_urlsafe), or a long run of hexadecimal digits.
_WORD = r"[A-Za-z0-9_+~-]"
_KEY_SHAPED = re.compile(
    rf"(?<!{_WORD})(?=(?:{_WORD})*?[0-9])(?=(?:{_WORD})*?[a-z])(?=(?:{_WORD})*?[A-Z]){_WORD}{{20,}}"
    rf"(?!{_WORD})|(?<![0-9A-Za-z])(?:[0-9a-f]{{32,}}|[0-9A-F]{{32,}})(?![0-9A-Za-z])"
)
_SECRET_FIELD_ENDINGS = {"env", "key", "token", "secret", "password", "passphrase"}
HIDDEN = "[hidden]"


def names_secret(key: str | None) -> bool:
    """Whether the dotted config `key` holds a secret or the name of the variable holding one
    (`api_key_env`, `web.people.0.token_env`): its value is never quoted."""
    last = next((p for p in reversed((key or "").split(".")) if not p.isdigit()), "")
    return last.lower().rsplit("_", 1)[-1] in _SECRET_FIELD_ENDINGS


def looks_secret(text: str) -> bool:
    """Whether `text` holds something shaped like an API key or token."""
    return _KEY_SHAPED.search(text) is not None


def hide_secrets(text: str) -> str:
    """`text` with everything shaped like a key replaced by HIDDEN."""
    return _KEY_SHAPED.sub(HIDDEN, text)


def quote(value: Any, *, secret: bool = False) -> str:
    """A value as a message quotes it: its repr, cut to MAX_QUOTED characters (a 50 MB scalar
    is not echoed whole); a mapping is "a mapping". Text that is `secret` (the value of a field
    that names a secret) or shaped like a key is described, never shown."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, str) and (secret or looks_secret(value)):
        return f"a value of {len(value)} characters, not shown (it may be a secret)"
    text = repr(value)
    return text if len(text) <= MAX_QUOTED else f"{text[: MAX_QUOTED - 3]}... ({len(text)} chars)"


def resolved(path: Path) -> Path:
    """`path.resolve()`, or the absolute path where a symlink loop or an odd name stops it."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, before Python 3.13
        return path.absolute()


def display_path(path: Path) -> str:
    """A path as a user wants to read it: relative to the working directory when it is below it
    (and cut, like any quoted value, when absurdly long)."""
    try:
        text = str(resolved(path).relative_to(resolved(Path.cwd())))
    except ValueError:
        text = str(path)
    return text if len(text) <= 4 * MAX_QUOTED else quote(text)


@dataclass(frozen=True)
class Origin:
    """Where one value of a config came from.

    kind "file": `file` (and `line`/`column`, 1-based, when known); "override": a `key=value` from
    the command line, kept whole in `text`; "default": not written anywhere, `text` says which
    default (the run file's stem, the schema's default, ...).
    """

    kind: OriginKind
    file: Path | None = None
    line: int | None = None
    column: int | None = None
    text: str | None = None

    @classmethod
    def in_file(cls, file: Path, line: int | None = None, column: int | None = None) -> "Origin":
        return cls("file", file=file, line=line, column=column)

    @classmethod
    def override(cls, text: str) -> "Origin":
        return cls("override", text=text)

    @classmethod
    def default(cls, text: str) -> "Origin":
        return cls("default", text=text)

    def __str__(self) -> str:
        if self.kind == "file" and self.file is not None:
            where = display_path(self.file)
            return f"{where}:{self.line}" if self.line is not None else where
        if self.kind == "override":
            text = self.text or ""
            name, equals, value = text.partition("=")
            if equals and names_secret(name.strip()) and value:
                text = f"{name}={HIDDEN}"
            return f"command line override `{text if len(text) <= 4 * MAX_QUOTED else quote(text)}`"
        return f"default ({self.text})" if self.text else "default"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config: the dotted key (None for a whole file), what is wrong and
    what was expected, where it came from, and the other keys a cross-field rule involves. `kind`
    groups problems that can come by the thousand ("unknown key"): past MAX_OF_A_KIND of a kind,
    only how many more are counted."""

    message: str
    key: str | None = None
    origin: Origin | None = None
    related: tuple[tuple[str, Origin | None], ...] = ()
    kind: str = ""

    def __str__(self) -> str:
        key = self.key if self.key is None or len(self.key) <= MAX_QUOTED else quote(self.key)
        parts = [f"{self.origin}:" if self.origin else "", f"{key}:" if key else "", self.message]
        text = " ".join(part for part in parts if part)
        related = "; ".join(f"{k} from {o}" if o is not None else k for k, o in self.related)
        return hide_secrets(f"{text} [{related}]" if related else text)


class ConfigError(ValueError):
    """A config that cannot be used, with every problem found in it (not only the first)."""

    def __init__(self, problems: Iterable[Problem], subject: str | None = None) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        self.subject = subject
        n = len(self.problems)
        lines, seen = [f"{n} problem{'s' * (n != 1)} in {subject or 'the config'}:"], Counter[str]()
        for problem in self.problems:
            seen[problem.kind] += 1
            if seen[problem.kind] <= MAX_OF_A_KIND:
                lines.append(f"  - {problem}")
        lines.extend(
            f"  ... and {n - MAX_OF_A_KIND} more problems of the kind {kind or 'other'!r}, not listed"
            for kind, n in seen.items()
            if n > MAX_OF_A_KIND
        )
        super().__init__("\n".join(lines))
