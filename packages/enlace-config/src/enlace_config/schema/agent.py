"""The web-search chain of the family assistant (owned by enlace-agent).

A search file (`configs/agent/search.yaml` is the documented example; a user's copy lives at
`$XDG_CONFIG_HOME/enlace/search.yaml`) validates as `SearchConfig`. Every field has a default, so an
empty file, or no file at all, is the shipped chain: DuckDuckGo Lite first, Brave Search as fallback.
Secrets are never part of this schema: the Brave key comes only from the environment.
"""

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, PositiveFloat, PositiveInt

from enlace_config.errors import looks_secret
from enlace_config.schema.base import FieldProblem, StrictModel, repeated

ProviderName = Literal["duckduckgo", "brave"]
SafeSearch = Literal["strict", "moderate", "off"]
TimeFilter = Literal["day", "week", "month", "year"]

HTTP_URL_PATTERN = r"^https?://[^\s/?#]+[^\s]*$"


def _timeouts_over(config: StrictModel, limit: str) -> Iterator[FieldProblem]:
    """connect_timeout_s and read_timeout_s must not exceed the `limit` field."""
    bound: float = getattr(config, limit)
    return (
        FieldProblem(name, f"{name} ({value}) must not exceed {limit} ({bound})", related=(limit,))
        for name in ("connect_timeout_s", "read_timeout_s")
        if (value := getattr(config, name)) > bound
    )


class HttpConfig(StrictModel):
    connect_timeout_s: PositiveFloat = 5.0
    """Seconds allowed to open the connection (TCP and TLS) to a provider."""
    read_timeout_s: PositiveFloat = 10.0
    """Seconds allowed between two pieces of a provider's response."""
    total_timeout_s: PositiveFloat = 15.0
    """Hard deadline in seconds for one provider request, from connecting to the last byte: a
    response that trickles or never ends is cut here."""
    max_response_bytes: PositiveInt = 2_000_000
    """Largest response body accepted (after decompression); the download stops there and the
    provider counts as failed."""
    max_redirects: int = Field(default=3, ge=0, le=10)
    """Redirects followed per request (0: none)."""
    user_agent: str | None = Field(default=None, min_length=1)
    """User-Agent header sent to the providers. None: an honest 'enlace-agent/<version>' string
    naming the tool."""

    def _problems(self) -> Iterator[FieldProblem]:
        return _timeouts_over(self, "total_timeout_s")


class DuckDuckGoConfig(StrictModel):
    endpoint: str = Field(default="https://lite.duckduckgo.com/lite/", pattern=HTTP_URL_PATTERN)
    """DuckDuckGo Lite's URL (the form is POSTed here). Point it at a proxy or, in tests, at a
    local server."""


class BraveConfig(StrictModel):
    endpoint: str = Field(
        default="https://api.search.brave.com/res/v1/web/search", pattern=HTTP_URL_PATTERN
    )
    """Brave Search API's web-search URL. Point it at a proxy or, in tests, at a local server.
    The key is read from the environment variable BRAVE_SEARCH_API_KEY only."""
    country: str | None = Field(default=None, pattern=r"^([A-Z]{2}|ALL)$")
    """Brave's `country` parameter (e.g. ES). None: derived from `region` (es-es gives ES)."""
    search_lang: str | None = Field(default=None, pattern=r"^[a-z]{2}(-[a-z]+)?$")
    """Brave's `search_lang` parameter (e.g. es). None: derived from `region` (es-es gives es)."""


class SearchConfig(StrictModel):
    providers: list[ProviderName] = Field(
        default_factory=lambda: ["duckduckgo", "brave"], min_length=1
    )
    """Providers in the order they are asked. A later one is asked only when the ones before it
    failed (an answer with zero results is an answer, not a failure)."""
    region: str = Field(default="es-es", pattern=r"^[a-z]{2}-[a-z]{2,3}$")
    """Region in DuckDuckGo's `kl` form, country-language (es-es, mx-es, es-ca, us-en);
    DuckDuckGo receives it as is and Brave derives country and language from it."""
    safe_search: SafeSearch = "moderate"
    """Safe-search level on every provider (DuckDuckGo's `kp`, Brave's `safesearch`). A family
    uses it: moderate by default."""
    time_filter: TimeFilter | None = None
    """Only pages from the last day/week/month/year (DuckDuckGo's `df`, Brave's `freshness`).
    None: any time."""
    max_results: int = Field(default=10, ge=1, le=20)
    """Results returned per search (Brave accepts at most 20)."""
    cooldown_s: float = Field(default=600.0, ge=0)
    """After a provider answers rate-limited or blocked it is skipped for this many seconds, also
    across CLI runs (0: never skipped)."""
    state_file: str | None = None
    """Where the cool-downs are remembered. None: $XDG_CACHE_HOME/enlace/search-state.json
    (~/.cache/enlace/... when unset). A corrupt or unwritable file never stops a search."""
    http: HttpConfig = Field(default_factory=HttpConfig)
    """Timeouts, size cap and redirects for every provider."""
    duckduckgo: DuckDuckGoConfig = Field(default_factory=DuckDuckGoConfig)
    """DuckDuckGo Lite (no key needed)."""
    brave: BraveConfig = Field(default_factory=BraveConfig)
    """Brave Search API (needs BRAVE_SEARCH_API_KEY)."""

    def _problems(self) -> Iterator[FieldProblem]:
        if names := repeated(self.providers):
            yield FieldProblem("providers", f"lists {', '.join(names)} more than once")


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _a_name_not_a_key(value: str) -> str:
    if looks_secret(value):
        raise ValueError(
            "this looks like a key itself, not the name of an environment variable: put the key "
            "in the environment (or the .env file) and write the variable's name here"
        )
    return value


# The name of an environment variable that holds a secret; a secret pasted here is refused.
EnvName = Annotated[str, Field(pattern=ENV_NAME_PATTERN), AfterValidator(_a_name_not_a_key)]
# Words a person says (`memory.remember_words`): at least one letter.
Words = Annotated[str, Field(pattern=r"[^\W\d_]")]
# A host name or IPv4 address, or an IPv6 one in brackets, with an optional port: a Host header.
HOST_NAME_PATTERN = r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)(:[0-9]{1,5})?$"


class PersonConfig(StrictModel):
    """One member of the family on the web page: a name and, where the page needs one, the
    environment variable that holds their access token (never the token itself)."""

    name: str = Field(min_length=1, max_length=40, pattern=r"^[^\x00-\x1f<>&\"']+$")
    """The name shown on the page and the owner of a history (no markup)."""
    token_env: EnvName | None = None
    """Environment variable holding this person's access token (at least `min_token_chars`
    characters). Required when the page listens beyond this machine; on 127.0.0.1 a person
    without one signs in by name alone."""


class SnapshotConfig(StrictModel):
    """Snapshots of the household (`enlace-assistant snapshot`): where they are kept, when the
    page takes them by itself, how many are kept, and the optional passphrase."""

    directory: str | None = None
    """Folder of the snapshots. None: `snapshots` next to the history file
    (~/.local/share/enlace/snapshots by default). Created 0700; each archive is 0600."""
    daily_hour: int | None = Field(default=3, ge=0, le=23)
    """Local hour at which `serve` takes the daily snapshot (then prunes). None: no daily
    snapshot."""
    before_migration: bool = True
    """Take a snapshot before the history file's schema is migrated to a newer version."""
    keep_daily: int = Field(default=7, ge=1, le=3650)
    """Verified snapshots kept for the most recent days that have one (the newest of each day)."""
    keep_weekly: int = Field(default=4, ge=0, le=520)
    """Verified snapshots kept for the most recent weeks that have one (the newest of each ISO
    week), beyond the daily ones."""
    passphrase_env: EnvName | None = None
    """Environment variable holding the passphrase that encrypts new snapshots (needs the
    `snapshot-crypto` extra). None: not encrypted. The passphrase itself never goes here."""
    model_file: str | None = None
    """The model file (GGUF) the page's model server serves; its name and sha256 go into each
    snapshot's manifest. None: only the model name is recorded."""
    max_manifest_bytes: int = Field(default=1_048_576, ge=4096, le=67_108_864)
    """Largest manifest read from an archive (a bigger one is refused before being parsed)."""
    max_archive_bytes: int = Field(default=1_073_741_824, ge=1_048_576, le=1_099_511_627_776)
    """Largest total an archive may declare for its files (the history and the settings): a
    bigger one is refused before a byte of it is written, and so is one that does not fit in the
    data folder's free space. The default (1 GiB) is some 60 times a history of 10,000
    conversations of 4 messages (17.6 MB, benchmarks/bench_snapshot.py's `fill`)."""
    kdf_log2_n: int = Field(default=15, ge=14, le=22)
    """scrypt cost of the passphrase (2**n); stored in each encrypted archive, so changing it
    never breaks reading older ones."""
    compress_level: int = Field(default=6, ge=1, le=9)
    """gzip level of the archive (6, gzip's own default: within 1% of 9's size in a third less
    time on a chat history)."""


class HomeServerConfig(StrictModel):
    """The home server as a system (`enlace-assistant doctor`, `service`, `model`): the health
    checks' limits, the services that start on boot and the model versions kept on disk."""

    min_free_disk_mb: int = Field(default=1024, ge=0, le=10_000_000)
    """`doctor` and /api/health ask for a person when the data directory's disk has less free
    space than this (MiB)."""
    max_snapshot_age_h: float = Field(default=48.0, gt=0, le=87_600)
    """`doctor` asks for a person when the newest verified snapshot is older than this (hours)."""
    probe_timeout_s: PositiveFloat = 3.0
    """Seconds a health check waits for the model server's /v1/models (and /health)."""
    models_dir: str | None = None
    """Folder of the installed model versions (`enlace-assistant model install`). None:
    $XDG_DATA_HOME/enlace/models."""
    llama_server: str | None = None
    """The llama-server binary the service runs. None: the one scripts/build-llama-server.sh
    built in $XDG_CACHE_HOME/enlace (the newest version there)."""
    threads: int | None = Field(default=None, ge=1, le=1024)
    """llama-server's CPU threads (--threads). None: llama.cpp's own choice."""
    context_size: int = Field(default=4096, ge=256, le=1_048_576)
    """llama-server's context window in tokens (--ctx-size), shared by its parallel slots."""
    parallel: int = Field(default=4, ge=1, le=256)
    """Conversations llama-server answers at once (--parallel)."""
    model_ready_timeout_s: float = Field(default=300.0, gt=0, le=3600)
    """The page's service waits this long for the model server's /health before it starts (and
    systemd retries it after a failure)."""


class ApiConfig(StrictModel):
    """The OpenAI-compatible endpoint (`POST /v1/chat/completions`, `GET /v1/models`), served by
    the page's process behind its protections, for Home Assistant and chat apps; each device
    uses its own key (`enlace-assistant token create`)."""

    enabled: bool = True
    """Serve the endpoint (it answers only to a live key: without one, every request is a 401)."""
    model_name: str = Field(default="enlace", min_length=1, max_length=64)
    """The model's name as clients see it (GET /v1/models); a request naming another is a 404."""
    max_body_bytes: int = Field(default=262_144, ge=1024, le=16_777_216)
    """Largest request body (a client sends the whole conversation every time, and Home
    Assistant its devices); a bigger one gets 413 before being read."""
    max_messages: int = Field(default=200, ge=1, le=10_000)
    """Most messages in one request."""
    requests_per_minute: int = Field(default=20, ge=1, le=10_000)
    """Requests one key may make in any minute; more get 429 until the minute has passed."""
    voice_sources: int = Field(default=2, ge=0, le=10)
    """Sites a spoken answer names at its end («según AEMET y El País»)."""
    mcp_port: int = Field(default=8766, ge=1, le=65535)
    """Port of `enlace-assistant mcp --http` (the memory and the list over MCP, same keys)."""


class WebConfig(StrictModel):
    """The family web page (`enlace-assistant serve`): where it listens, who may use it, where the
    histories live and the limits of a request."""

    host: str = Field(default="127.0.0.1", min_length=1)
    """Address to listen on. 127.0.0.1 (the default): only this machine. Any other address
    (0.0.0.0, the server's LAN address) requires a token_env for every person."""
    port: int = Field(default=8765, ge=1, le=65535)
    """TCP port to listen on."""
    allowed_hosts: list[Annotated[str, Field(pattern=HOST_NAME_PATTERN)]] = Field(
        default_factory=lambda: []
    )
    """Other names the family reaches the page by (as in the browser's address bar, without
    http://): `casa.local`, or with a port, `enlace.example.org:8443`; a name without a port is
    accepted with the page's port and, behind an HTTPS proxy, without one. The page always answers
    to the address it listens on and the one a connection arrived at (localhost, 127.0.0.1 and
    [::1] on this machine); any other Host (a DNS-rebinding page) gets 421, and an Origin that is
    not one of these names, with http:// (https:// for the names listed here), gets 403."""
    people: list[PersonConfig] = Field(default_factory=lambda: [])
    """The family members, each with their own history (at least one to serve)."""
    database: str | None = None
    """SQLite file of the histories. None: $XDG_DATA_HOME/enlace/web.sqlite3
    (~/.local/share/enlace/web.sqlite3). The file (with its -wal and -shm) and the server's
    session key beside it (web.sqlite3.key) are made 0600 whatever the umask; a missing folder
    is created 0700, and the default one is made 0700 also when it exists."""
    min_token_chars: int = Field(default=16, ge=8, le=512)
    """Shortest access token accepted at start-up."""
    session_days: float = Field(default=30.0, gt=0, le=400)
    """How long a sign-in lasts (cookie and server)."""
    max_message_chars: int = Field(default=4000, ge=1, le=100_000)
    """Longest question the page accepts."""
    max_body_bytes: int = Field(default=32_768, ge=1024, le=1_048_576)
    """Largest request body accepted (bigger ones get 413 before being read)."""
    max_conversations_listed: int = Field(default=50, ge=1, le=1000)
    """Past conversations listed on the page."""
    keepalive_s: PositiveFloat = 10.0
    """Seconds between two signs of life on an answer's event stream."""
    stall_timeout_s: PositiveFloat = 60.0
    """The page tells the family the assistant is not answering after this many seconds without
    any news on the event stream (signs of life included)."""
    max_answers_per_person: int = Field(default=3, ge=1, le=50)
    """Answers one person may have being written at once (each runs in its own thread); one more
    is refused with a Spanish message (HTTP 429) until one ends."""
    answer_save_interval_s: PositiveFloat = 2.0
    """An answer being written is saved (its text so far) at most this often, all answers in one
    write: a power cut or a kill loses at most the last few seconds of text."""
    database_timeout_s: float = Field(default=10.0, gt=0, le=300)
    """Seconds a write waits for the history file while another writer holds it (a
    delete-history VACUUM, a slow SD card); then the request is refused with a Spanish message
    (HTTP 503)."""
    shutdown_grace_s: float = Field(default=5.0, ge=0, le=600)
    """On stop (SIGTERM, Ctrl-C), seconds the page lets open answer streams run before closing
    them; answers still being written are then saved with their text so far and marked as
    interrupted."""
    snapshots: SnapshotConfig = Field(default_factory=SnapshotConfig)
    """Snapshots of the histories and settings (`enlace-assistant snapshot`)."""
    home: HomeServerConfig = Field(default_factory=HomeServerConfig)
    """The home server: health checks, services on boot, model versions."""
    api: ApiConfig = Field(default_factory=ApiConfig)
    """The OpenAI-compatible endpoint for Home Assistant and chat apps (README, «Enlace en Home
    Assistant»)."""

    def _problems(self) -> Iterator[FieldProblem]:
        if self.keepalive_s >= self.stall_timeout_s:
            yield FieldProblem(
                "keepalive_s",
                f"keepalive_s ({self.keepalive_s}) must be below stall_timeout_s "
                f"({self.stall_timeout_s}), or a healthy stream would look stalled",
                related=("stall_timeout_s",),
            )
        if names := repeated([p.name.casefold() for p in self.people]):
            yield FieldProblem("people", f"names repeated: {', '.join(names)}")
        if self.host not in LOOPBACK_HOSTS:
            yield from (
                FieldProblem(
                    f"people.{i}.token_env",
                    f"{p.name} has no token_env: listening on {self.host} (beyond this machine) "
                    "requires an access token for every person",
                    related=("host",),
                )
                for i, p in enumerate(self.people)
                if p.token_env is None
            )


class MemoryConfig(StrictModel):
    """What the assistant remembers of the family (README, «La memoria»): the `recordar` and
    `olvidar` tools, and how many of the remembered facts enter each prompt."""

    enabled: bool = True
    """Offer the memory: the `recordar` and `olvidar` tools and each person's and the household's
    memories in the system prompt (on the page, and in the terminal chat with --person). False:
    nothing is read or written, for everyone."""
    prompt_budget_tokens: int = Field(default=300, ge=0, le=100_000)
    """Most tokens of memories put in one system prompt; when they do not all fit, the ones most
    relevant to the question come first (then the most recently changed)."""
    chars_per_token: float = Field(default=3.0, gt=0, le=20)
    """Characters counted as one token when measuring memories against the budget, and a
    conversation against the model's context (the model's tokenizer is not known here: a small
    Spanish vocabulary makes about 3; after a server says a request was too long, its own
    count is used)."""
    max_prompt_memories: int = Field(default=40, ge=0, le=10_000)
    """Most memories numbered in one system prompt, whatever the budget."""
    max_memory_chars: int = Field(default=300, ge=20, le=10_000)
    """Longest memory accepted (one short statement; a longer one is refused in Spanish)."""
    min_term_chars: int = Field(default=3, ge=1, le=20)
    """Words of a question shorter than this do not count when ranking memories by relevance."""
    remember_words: list[Words] = Field(
        default_factory=lambda: [
            "recuerda",
            "recuérdalo",
            "recuérdame",
            "acuérdate",
            "apunta",
            "apúntalo",
            "anota",
            "anótalo",
            "no olvides",
            "no te olvides",
            "que no se te olvide",
            "guarda",
            "guárdalo",
            "memoriza",
            "que lo sepa toda la familia",
        ]
    )
    """What a person says to ask Enlace to remember something. The model's `recordar` keeps a
    memory only when the person's message of that turn says one of these (whole words; capitals
    and accents do not matter: «¿Recuerdas…?» is not «recuerda»); otherwise nothing is kept and
    the page and the terminal ask the person («¿Lo recuerdo? Sí / No»)."""
    forget_words: list[Words] = Field(
        default_factory=lambda: [
            "olvida",
            "olvídalo",
            "olvídate",
            "deja de recordar",
            "ya no recuerdes",
            "borra el recuerdo",
            "borra ese recuerdo",
            "borra que",
            "ya no hace falta que recuerdes",
        ]
    )
    """The same for the model's `olvidar`: it deletes a memory only when the person's message
    says one of these; otherwise the person is asked («¿Lo olvido? Sí / No»)."""
    secret_envs: list[EnvName] = Field(default_factory=lambda: [])
    """More environment variables whose values are never stored in a memory, beyond the ones the
    configuration already names (api_key_env, each person's token_env, the snapshot passphrase
    and the search key)."""
    page_memories: int = Field(default=100, ge=1, le=10_000)
    """Memories the page's «Lo que Enlace recuerda» loads at a time (GET /api/memories), the
    most recently changed first; «Ver más recuerdos» loads the next ones. A household with fewer
    sees them all at once."""


class AssistantConfig(StrictModel):
    """The family assistant (`enlace-assistant`): which model server to talk to, how to sample, and
    the limits of one turn. The model's API key is never part of this schema: it is read from the
    environment variable named by `api_key_env`."""

    base_url: str = Field(default="http://127.0.0.1:8080/v1", pattern=HTTP_URL_PATTERN)
    """Base URL of an OpenAI-compatible server (llama.cpp's llama-server, llama-cpp-python,
    Ollama's /v1, vLLM); /chat/completions is appended."""
    model: str = Field(default="enlace-chat", min_length=1)
    """Model name sent in every request (the server's GET /models lists them)."""
    api_key_env: EnvName = "ENLACE_MODEL_API_KEY"
    """Environment variable holding the server's API key, for servers that want one (sent as a
    Bearer token; unset: no key is sent)."""
    stream: bool = True
    """Ask for a streamed answer (server-sent events)."""
    temperature: float = Field(default=0.3, ge=0, le=2)
    """Sampling temperature."""
    top_p: float = Field(default=0.95, gt=0, le=1)
    """Nucleus sampling threshold."""
    max_tokens: PositiveInt = 1024
    """Most tokens the model may write in one answer."""
    context_tokens: int | None = Field(default=None, ge=256, le=10_000_000)
    """Tokens of the model's context one conversation may fill (llama-server's per-slot n_ctx:
    --ctx-size divided among --parallel). None: asked from the model server (llama-server says
    it in GET /models); when it does not say, older turns are left out only after the server
    refuses a request as too long."""
    answer_room_tokens: int = Field(default=256, ge=0, le=1_000_000)
    """Tokens of the context kept free for the answer when a long conversation is fitted to it
    (at most max_tokens): the oldest turns are left out until the prompt leaves this much."""
    max_tool_rounds: int = Field(default=3, ge=0, le=20)
    """Rounds of tool calls allowed in one turn; a model that asks for more is stopped and the
    family is told so (0: no tools offered)."""
    time_budget_s: PositiveFloat = 180.0
    """Hard deadline in seconds for a whole turn (model answers and searches included); a slower
    turn stops and says so."""
    connect_timeout_s: PositiveFloat = 5.0
    """Seconds allowed to connect to the model server."""
    read_timeout_s: PositiveFloat = 60.0
    """Seconds allowed between two pieces of the model's answer (the first one included: a large
    prompt takes a while to read)."""
    max_answer_chars: int = Field(default=50_000, ge=100, le=10_000_000)
    """Most characters of one answer of the model (its text and its tool calls' arguments, about
    ten times max_tokens' worth): a model that never stops writing is cut here, and the family is
    told so, before it fills the memory."""
    max_response_bytes: int = Field(default=16_000_000, ge=100_000, le=1_000_000_000)
    """Most bytes the model server may send for one answer (a stream with all its chunks and
    signs of life, or a whole answer's body); past it the answer is cut like a too-long one."""
    system_prompt: str | None = Field(default=None, min_length=1)
    """Replaces the Spanish default system prompt; `{fecha}` in it becomes today's date in
    Spanish. None: the default prompt."""
    search_config: str | None = None
    """The search settings file for the assistant's search tool. None: the user's search.yaml, or
    the search defaults."""
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    """What the assistant remembers of the family (`recordar`, `olvidar`)."""
    web: WebConfig = Field(default_factory=WebConfig)
    """The family web page served by `enlace-assistant serve`."""

    def _problems(self) -> Iterator[FieldProblem]:
        return _timeouts_over(self, "time_budget_s")
