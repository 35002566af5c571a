"""The bearer tokens of the OpenAI-compatible endpoint (`enlace_agent.web.openai_api`): one per
device, held by a person (their memories, history and the household's list) or by the household
(`holder` None: the list, no one's memories). Made and revoked with `enlace-assistant token`; the
token itself is shown once and only its SHA-256 is kept (it has 256 random bits: no salt or slow
hash needed). A revoked token stays listed, with when it was revoked."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from enlace_agent.shared import one_line

if TYPE_CHECKING:
    from enlace_agent.household.database import Store

COLUMNS = "id, name, holder, voice, created, revoked, last_used"  # an `ApiToken`, in order
PREFIX = "enlace-"  # so a token found in a file says what it opens
MAX_NAME_CHARS = 60


class TokenRefused(ValueError):
    """A token that cannot be made as asked; the message is Spanish, for the person."""


@dataclass(frozen=True)
class ApiToken:
    id: int
    name: str  # the device, in the family's words («altavoz de la cocina»)
    holder: str | None  # the person; None: the household's
    voice: bool  # answers for a speaker: no Markdown, URLs or lists
    created: float
    revoked: float | None
    last_used: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ApiTokens:
    """The tokens, in the household's database."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, holder: str | None, name: str, *, voice: bool = False) -> tuple[str, ApiToken]:
        """A new token for `holder`'s device `name`: the token (shown once) and its row."""
        cleaned = one_line(name).strip()
        if not cleaned:
            raise TokenRefused("el nombre del dispositivo está vacío (--nombre).")
        if len(cleaned) > MAX_NAME_CHARS:
            raise TokenRefused(
                f"el nombre del dispositivo es demasiado largo (máximo {MAX_NAME_CHARS})."
            )
        token = PREFIX + secrets.token_urlsafe(32)
        now = time.time()
        with self.store.transaction() as db:
            cursor = db.execute(
                "INSERT INTO api_tokens (token_hash, name, holder, voice, created) "
                "VALUES (?, ?, ?, ?, ?)",
                (token_hash(token), cleaned, holder, int(voice), now),
            )
        assert cursor.lastrowid is not None
        return token, ApiToken(cursor.lastrowid, cleaned, holder, voice, now, None, None)

    def list(self) -> list[ApiToken]:
        with self.store.transaction() as db:
            rows = db.execute(f"SELECT {COLUMNS} FROM api_tokens ORDER BY id").fetchall()
        return [_token(r) for r in rows]

    def revoke(self, token_id: int) -> ApiToken | None:
        """Revokes one token (at once: the next request with it is refused); None when there is
        no such token. Revoking twice keeps the first date."""
        with self.store.transaction() as db:
            db.execute(
                "UPDATE api_tokens SET revoked = ? WHERE id = ? AND revoked IS NULL",
                (time.time(), token_id),
            )
            row = db.execute(
                f"SELECT {COLUMNS} FROM api_tokens WHERE id = ?", (token_id,)
            ).fetchone()
        return _token(row) if row else None

    def check(self, token: str, people: Collection[str]) -> ApiToken | None:
        """The live token `token` is (its last use noted), or None: unknown, revoked, or held
        by someone no longer among `people` (the family's names)."""
        with self.store.transaction() as db:
            row = db.execute(
                f"SELECT {COLUMNS} FROM api_tokens WHERE token_hash = ? AND revoked IS NULL",
                (token_hash(token),),
            ).fetchone()
            if row is None or (row["holder"] is not None and row["holder"] not in people):
                return None
            now = time.time()
            db.execute("UPDATE api_tokens SET last_used = ? WHERE id = ?", (now, row["id"]))
        return replace(_token(row), last_used=now)


def _token(row: Any) -> ApiToken:
    return ApiToken(
        row["id"],
        row["name"],
        row["holder"],
        bool(row["voice"]),
        row["created"],
        row["revoked"],
        row["last_used"],
    )
