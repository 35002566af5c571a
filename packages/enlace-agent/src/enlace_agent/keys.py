"""The key each search provider needs, declared once by provider name (a provider not named here
needs none: DuckDuckGo). Standard library only and outside `enlace_agent.search` (whose package
imports the providers), so `enlace-search --help`, the chain, the secret redaction and the
missing-key messages all read the name here."""

SEARCH_KEYS: dict[str, str] = {"brave": "BRAVE_SEARCH_API_KEY"}
