"""Typed outcomes of a failed search, arranged like httpx's exception hierarchy (the tree, with
each `kind`, is in the package README): `QueryError`, `SearchConfigError` (`MissingCredential`),
one `ProviderError` subclass per way a provider fails (the chain moves on to the next), and
`AllProvidersFailed` listing every cause. An override the schema refuses raises
`enlace_agent.settings.InvalidOptions`.

Messages are English (for logs and developers) and never hold a secret: the providers redact their
key from every text they put in an exception. The family reads `ProviderError.describe_es()`.
"""

from __future__ import annotations

from typing import ClassVar

from enlace_agent.settings import SettingsError


class SearchError(Exception):
    """Base class of every error of the search tool."""


class QueryError(SearchError, ValueError):
    """The query cannot be sent as it is: empty (`limit` None), or `length` characters where the
    `provider` named accepts at most `limit`."""

    def __init__(
        self, message: str, *, length: int = 0, limit: int | None = None, provider: str = ""
    ) -> None:
        super().__init__(message)
        self.length = length
        self.limit = limit
        self.provider = provider


class SearchConfigError(SearchError, SettingsError):
    """The search configuration (file, overrides, env file) cannot be used."""


class MissingCredential(SearchConfigError):
    """A provider in the chain needs a key that the environment does not hold."""

    def __init__(self, provider: str, env_var: str) -> None:
        self.provider = provider
        self.env_var = env_var
        super().__init__(
            f"provider {provider!r} is configured but the environment variable {env_var} is not "
            f"set: set it (or put it in an env file), or leave {provider} out of the providers"
        )


class ProviderError(SearchError):
    """One provider could not answer. `kind` is the stable machine name used in the JSON output."""

    kind: ClassVar[str] = "provider_error"
    reason_es: ClassVar[str] = "error del proveedor"

    def __init__(
        self,
        provider: str,
        detail: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        self.provider = provider
        self.detail = detail
        self.status = status
        self.retry_after_s = retry_after_s  # how long a `Throttled` provider asked us to wait
        super().__init__(f"{provider}: {detail}")

    def describe_es(self) -> str:
        """A short Spanish reason for the family ("bloqueado (HTTP 202)")."""
        return f"{self.reason_es} (HTTP {self.status})" if self.status else self.reason_es


class Throttled(ProviderError):
    """The provider refuses for a while (rate limit, bot check, quota): the chain cools it down,
    for `retry_after_s` when the provider said how long."""


class RateLimited(Throttled):
    kind = "rate_limited"
    reason_es = "límite de peticiones alcanzado"


class Blocked(RateLimited):
    kind = "blocked"
    reason_es = "bloqueado con una verificación anti-bots"


class QuotaExhausted(Throttled):
    kind = "quota_exhausted"
    reason_es = "cuota agotada"


class Unavailable(ProviderError):
    kind = "unavailable"
    reason_es = "no disponible"


class ProviderTimeout(Unavailable):
    kind = "timeout"
    reason_es = "no respondió a tiempo"


class ResponseTooLarge(Unavailable):
    kind = "too_large"
    reason_es = "respuesta demasiado grande"


class LayoutChanged(ProviderError):
    kind = "layout_changed"
    reason_es = "respuesta irreconocible (¿ha cambiado su formato?)"


class AuthenticationFailed(ProviderError):
    kind = "authentication"
    reason_es = "clave rechazada"


class CoolingDown(ProviderError):
    kind = "cooling_down"
    reason_es = "en pausa"

    def __init__(self, provider: str, *, until: float, cause: str, remaining_s: float) -> None:
        self.until = until
        self.cause = cause
        self.remaining_s = remaining_s
        super().__init__(
            provider,
            f"skipped: cooling down for {remaining_s:.0f} s more after {cause}",
        )

    def describe_es(self) -> str:
        minutes = max(1, round(self.remaining_s / 60))
        cause = _CAUSES_ES.get(self.cause, self.cause)
        return f"en pausa {minutes} min más tras {cause}"


_CAUSES_ES = {
    RateLimited.kind: "un límite de peticiones",
    Blocked.kind: "un bloqueo anti-bots",
    QuotaExhausted.kind: "agotar la cuota",
}


class AllProvidersFailed(SearchError):
    """Every provider of the chain failed; `errors` holds one `ProviderError` per provider."""

    def __init__(self, errors: list[ProviderError]) -> None:
        self.errors = tuple(errors)
        causes = "; ".join(str(e) for e in errors)
        super().__init__(f"every search provider failed: {causes}")
