"""What a memory may never hold: a key, a token, a password or a card number. Refused whoever
writes it (the person on the page or at the command line, or the model through `recordar`), with
a Spanish message that never repeats the secret."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from enlace_config.errors import looks_secret
from enlace_config.schema.agent import AssistantConfig

REFUSED = (
    "Eso parece {what}, y Enlace nunca guarda secretos en su memoria. Guárdalo en un gestor de "
    "contraseñas, no aquí."
)
# Key shapes beyond the long mixed words `looks_secret` knows: provider prefixes, JWTs, PEM keys.
_KEY_PREFIXES = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,})"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
# «la contraseña del wifi es …», «PIN: 1234», «password = …»: the word, a few more, then a value.
_PASSWORD = re.compile(
    r"\b(?:contraseñas?|password|passwd|pin|clave(?:s)? de acceso|código secreto)\b"
    r"(?:\s+\S+){0,4}?\s*(?:\bes\b|\bson\b|:|=)\s*\S+",
    re.IGNORECASE,
)
# A key («la clave del wifi es X7f9-Qa21») only when the value looks made up, not a word.
_KEY_VALUE = re.compile(r"\bclaves?\b(?:\s+\S+){0,4}?\s*(?:\bes\b|:|=)\s*(\S*\d\S*)", re.IGNORECASE)
_DIGIT_RUN = re.compile(r"(?<![\d])\d(?:[ -]?\d){12,18}(?![\d])")  # 13 to 19 digits


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a card number (digits only)."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def secret_kind(text: str, configured: Iterable[str] = ()) -> str | None:
    """What kind of secret `text` holds, in Spanish («una clave»), or None. `configured`: the
    values of the keys the configuration names (never stored, whatever their shape)."""
    if any(len(value) >= 4 and value in text for value in configured):
        return "una de las claves de este servidor"
    if _DIGIT_RUN.search(text) and any(
        luhn_valid(re.sub(r"[ -]", "", m.group())) for m in _DIGIT_RUN.finditer(text)
    ):
        return "un número de tarjeta"
    if looks_secret(text) or _KEY_PREFIXES.search(text):
        return "una clave o un token"
    if _PASSWORD.search(text) or _KEY_VALUE.search(text):
        return "una contraseña"
    return None


def refusal(kind: str) -> str:
    return REFUSED.format(what=kind)


def configured_secrets(config: AssistantConfig, env: Mapping[str, str]) -> list[str]:
    """The values of every key the configuration names: the model server's, each person's access
    token, the snapshot passphrase, the search key and `memory.secret_envs`."""
    from enlace_agent.keys import SEARCH_KEYS

    names = [config.api_key_env, *SEARCH_KEYS.values(), *config.memory.secret_envs]
    names += [p.token_env for p in config.web.people if p.token_env]
    if config.web.snapshots.passphrase_env:
        names.append(config.web.snapshots.passphrase_env)
    return [v for n in names if (v := env.get(n, "").strip())]
