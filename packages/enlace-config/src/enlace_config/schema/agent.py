"""The web-search chain of the family assistant (owned by enlace-agent).

A search file (`configs/agent/search.yaml` is the documented example; a user's copy lives at
`$XDG_CONFIG_HOME/enlace/search.yaml`) validates as `SearchConfig`. Every field has a default, so an
empty file, or no file at all, is the shipped chain: DuckDuckGo Lite first, Brave Search as fallback.
Secrets are never part of this schema: the Brave key comes only from the environment.
"""

from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from enlace_config.schema.base import FieldProblem, StrictModel, raise_problems

ProviderName = Literal["duckduckgo", "brave"]
SafeSearch = Literal["strict", "moderate", "off"]
TimeFilter = Literal["day", "week", "month", "year"]

REGION_PATTERN = r"^[a-z]{2}-[a-z]{2,3}$"
# The one home of these limits: the chain, the library and the CLIs validate through this schema.
MaxResults = Annotated[int, Field(ge=1, le=20)]
Region = Annotated[str, Field(pattern=REGION_PATTERN)]
HTTP_URL_PATTERN = r"^https?://[^\s/?#]+[^\s]*$"


def _timeouts_within(config: StrictModel, limit: str) -> None:
    """connect_timeout_s and read_timeout_s must not exceed the `limit` field."""
    bound: float = getattr(config, limit)
    raise_problems(
        FieldProblem(name, f"{name} ({value}) must not exceed {limit} ({bound})", related=(limit,))
        for name in ("connect_timeout_s", "read_timeout_s")
        if (value := getattr(config, name)) > bound
    )


class HttpConfig(StrictModel):
    connect_timeout_s: PositiveFloat = Field(
        default=5.0,
        description="Seconds allowed to open the connection (TCP and TLS) to a provider.",
    )
    read_timeout_s: PositiveFloat = Field(
        default=10.0, description="Seconds allowed between two pieces of a provider's response."
    )
    total_timeout_s: PositiveFloat = Field(
        default=15.0,
        description="Hard deadline in seconds for one provider request, from connecting to the "
        "last byte: a response that trickles or never ends is cut here.",
    )
    max_response_bytes: PositiveInt = Field(
        default=2_000_000,
        description="Largest response body accepted (after decompression); the download stops "
        "there and the provider counts as failed.",
    )
    max_redirects: int = Field(
        default=3, ge=0, le=10, description="Redirects followed per request (0: none)."
    )
    user_agent: str | None = Field(
        default=None,
        min_length=1,
        description="User-Agent header sent to the providers. None: an honest "
        "'enlace-agent/<version>' string naming the tool.",
    )

    @model_validator(mode="after")
    def _timeouts_fit(self) -> "HttpConfig":
        _timeouts_within(self, "total_timeout_s")
        return self


class DuckDuckGoConfig(StrictModel):
    endpoint: str = Field(
        default="https://lite.duckduckgo.com/lite/",
        pattern=HTTP_URL_PATTERN,
        description="DuckDuckGo Lite's URL (the form is POSTed here). Point it at a proxy or, in "
        "tests, at a local server.",
    )


class BraveConfig(StrictModel):
    endpoint: str = Field(
        default="https://api.search.brave.com/res/v1/web/search",
        pattern=HTTP_URL_PATTERN,
        description="Brave Search API's web-search URL. Point it at a proxy or, in tests, at a "
        "local server. The key is read from the environment variable BRAVE_SEARCH_API_KEY only.",
    )
    country: str | None = Field(
        default=None,
        pattern=r"^([A-Z]{2}|ALL)$",
        description="Brave's `country` parameter (e.g. ES). None: derived from `region` "
        "(es-es gives ES).",
    )
    search_lang: str | None = Field(
        default=None,
        pattern=r"^[a-z]{2}(-[a-z]+)?$",
        description="Brave's `search_lang` parameter (e.g. es). None: derived from `region` "
        "(es-es gives es).",
    )


class SearchConfig(StrictModel):
    providers: list[ProviderName] = Field(
        default_factory=lambda: ["duckduckgo", "brave"],
        min_length=1,
        description="Providers in the order they are asked. A later one is asked only when the "
        "ones before it failed (an answer with zero results is an answer, not a failure).",
    )
    region: Region = Field(
        default="es-es",
        description="Region in DuckDuckGo's `kl` form, country-language (es-es, mx-es, es-ca, "
        "us-en); DuckDuckGo receives it as is and Brave derives country and language from it.",
    )
    safe_search: SafeSearch = Field(
        default="moderate",
        description="Safe-search level on every provider (DuckDuckGo's `kp`, Brave's "
        "`safesearch`). A family uses it: moderate by default.",
    )
    time_filter: TimeFilter | None = Field(
        default=None,
        description="Only pages from the last day/week/month/year (DuckDuckGo's `df`, Brave's "
        "`freshness`). None: any time.",
    )
    max_results: MaxResults = Field(
        default=10,
        description="Results returned per search (Brave accepts at most 20).",
    )
    cooldown_s: float = Field(
        default=600.0,
        ge=0,
        description="After a provider answers rate-limited or blocked it is skipped for this many "
        "seconds, also across CLI runs (0: never skipped).",
    )
    state_file: str | None = Field(
        default=None,
        description="Where the cool-downs are remembered. None: "
        "$XDG_CACHE_HOME/enlace/search-state.json (~/.cache/enlace/... when unset). A corrupt or "
        "unwritable file never stops a search.",
    )
    http: HttpConfig = Field(
        default_factory=HttpConfig,
        description="Timeouts, size cap and redirects for every provider.",
    )
    duckduckgo: DuckDuckGoConfig = Field(
        default_factory=DuckDuckGoConfig, description="DuckDuckGo Lite (no key needed)."
    )
    brave: BraveConfig = Field(
        default_factory=BraveConfig, description="Brave Search API (needs BRAVE_SEARCH_API_KEY)."
    )

    @model_validator(mode="after")
    def _providers_once(self) -> "SearchConfig":
        repeated = sorted({p for p in self.providers if self.providers.count(p) > 1})
        if repeated:
            raise_problems(
                [FieldProblem("providers", f"lists {', '.join(repeated)} more than once")]
            )
        return self


class AssistantConfig(StrictModel):
    """The family assistant (`enlace-assistant`): which model server to talk to, how to sample, and
    the limits of one turn. The model's API key is never part of this schema: it is read from the
    environment variable named by `api_key_env`."""

    base_url: str = Field(
        default="http://127.0.0.1:8080/v1",
        pattern=HTTP_URL_PATTERN,
        description="Base URL of an OpenAI-compatible server (llama.cpp's llama-server, "
        "llama-cpp-python, Ollama's /v1, vLLM); /chat/completions is appended.",
    )
    model: str = Field(
        default="enlace-chat",
        min_length=1,
        description="Model name sent in every request (the server's GET /models lists them).",
    )
    api_key_env: str = Field(
        default="ENLACE_MODEL_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Environment variable holding the server's API key, for servers that want "
        "one (sent as a Bearer token; unset: no key is sent).",
    )
    stream: bool = Field(
        default=True, description="Ask for a streamed answer (server-sent events)."
    )
    temperature: float = Field(default=0.3, ge=0, le=2, description="Sampling temperature.")
    top_p: float = Field(default=0.95, gt=0, le=1, description="Nucleus sampling threshold.")
    max_tokens: PositiveInt = Field(
        default=1024, description="Most tokens the model may write in one answer."
    )
    max_tool_rounds: int = Field(
        default=3,
        ge=0,
        le=20,
        description="Rounds of tool calls allowed in one turn; a model that asks for more is "
        "stopped and the family is told so (0: no tools offered).",
    )
    time_budget_s: PositiveFloat = Field(
        default=180.0,
        description="Hard deadline in seconds for a whole turn (model answers and searches "
        "included); a slower turn stops and says so.",
    )
    connect_timeout_s: PositiveFloat = Field(
        default=5.0, description="Seconds allowed to connect to the model server."
    )
    read_timeout_s: PositiveFloat = Field(
        default=60.0,
        description="Seconds allowed between two pieces of the model's answer (the first one "
        "included: a large prompt takes a while to read).",
    )
    system_prompt: str | None = Field(
        default=None,
        min_length=1,
        description="Replaces the Spanish default system prompt; `{fecha}` in it becomes today's "
        "date in Spanish. None: the default prompt.",
    )
    search_config: str | None = Field(
        default=None,
        description="The search settings file for the assistant's search tool. None: the "
        "user's search.yaml, or the search defaults.",
    )

    @model_validator(mode="after")
    def _timeouts_fit(self) -> "AssistantConfig":
        _timeouts_within(self, "time_budget_s")
        return self


__all__ = [
    "AssistantConfig",
    "BraveConfig",
    "DuckDuckGoConfig",
    "HttpConfig",
    "MaxResults",
    "ProviderName",
    "Region",
    "SafeSearch",
    "SearchConfig",
    "TimeFilter",
]
