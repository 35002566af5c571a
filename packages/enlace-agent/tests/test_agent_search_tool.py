"""The language-model tool, the library API, the env-file parser and the config loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from enlace_config.schema.agent import SearchConfig

from enlace_agent.search.chain import SearchChain
from enlace_agent.search.errors import (
    Blocked,
    MissingCredential,
    SearchConfigError,
    Unavailable,
)
from enlace_agent.search.models import (
    SearchRequest,
    SearchResponse,
    SearchResult,
    SkippedProvider,
    redact,
)
from enlace_agent.search.settings import load_config, load_env
from enlace_agent.settings import parse_env_file
from enlace_agent.tools.search import SEARCH_TOOL, format_for_model, run_search_tool

FIXTURES = Path(__file__).parent / "fixtures"


class Fixed:
    def __init__(self, name: str, outcome: list[SearchResult] | Exception) -> None:
        self.name, self.max_query_chars, self.outcome = name, 400, outcome
        self.requests: list[SearchRequest] = []

    def search(self, request: SearchRequest) -> list[SearchResult]:
        self.requests.append(request)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def results(n: int) -> list[SearchResult]:
    return [
        SearchResult(f"Título {i}", f"https://e.example/{i}", "ñ" * 500, i, "duckduckgo")
        for i in range(1, n + 1)
    ]


def test_tool_spec_is_a_json_schema_function_in_spanish() -> None:
    spec = json.loads(json.dumps(SEARCH_TOOL))  # JSON-serialisable as is
    fn = spec["function"]
    assert spec["type"] == "function" and fn["name"] == "buscar_en_internet"
    assert "Busca en internet" in fn["description"]
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["consulta"]
    assert params["additionalProperties"] is False
    assert params["properties"]["consulta"]["type"] == "string"
    assert params["properties"]["max_resultados"]["maximum"] == 10


def test_run_search_tool_returns_compact_text(tmp_path: Path) -> None:
    ddg = Fixed("duckduckgo", results(3))
    chain = SearchChain(SearchConfig(state_file=str(tmp_path / "s")), providers=[ddg])
    text = run_search_tool('{"consulta": "tortilla", "max_resultados": 2}', chain=chain)
    assert ddg.requests[0].max_results == 2
    lines = text.splitlines()
    assert lines[0] == "Resultados para «tortilla»:"
    assert lines[1] == "[1] Título 1 — https://e.example/1"
    assert lines[2].startswith("    ñ") and lines[2].endswith("…") and len(lines[2]) == 4 + 300
    assert lines[-1] == "(fuente: duckduckgo)"


def test_run_search_tool_reports_problems_as_text(tmp_path: Path) -> None:
    state = str(tmp_path / "s")
    ok = SearchChain(SearchConfig(state_file=state), providers=[Fixed("duckduckgo", [])])
    assert run_search_tool({"consulta": "nada"}, chain=ok).startswith("Sin resultados para «nada».")
    assert run_search_tool("no json", chain=ok).startswith("Error:")
    assert run_search_tool("[1]", chain=ok).startswith("Error:")
    assert run_search_tool({"query": "x"}, chain=ok).startswith("Error: argumentos desconocidos")
    assert run_search_tool({"consulta": " "}, chain=ok).startswith("Error: falta")
    assert run_search_tool({"consulta": "x", "max_resultados": 0}, chain=ok).startswith("Error:")
    assert run_search_tool({"consulta": "x", "max_resultados": True}, chain=ok).startswith("Error:")
    assert "demasiado larga" in run_search_tool({"consulta": "x" * 401}, chain=ok)
    failing = SearchChain(
        SearchConfig(state_file=state),
        providers=[
            Fixed("duckduckgo", Blocked("duckduckgo", "x")),
            Fixed("brave", Unavailable("brave", "y")),
        ],
    )
    text = run_search_tool({"consulta": "x"}, chain=failing)
    assert text.startswith("Error: la búsqueda falló en todos los proveedores")
    assert "duckduckgo: bloqueado" in text and "brave: no disponible" in text


def test_format_for_model_names_the_source() -> None:
    response = SearchResponse(
        "q",
        "brave",
        tuple(results(1)),
        (SkippedProvider("duckduckgo", Blocked("duckduckgo", "x")),),
        0.1,
    )
    assert format_for_model(response).splitlines()[-1] == "(fuente: brave)"


def test_library_search_against_a_local_server(
    http_server: Any, clean_env: dict[str, str], tmp_path: Path
) -> None:
    from enlace_agent.search import SearchResponse as Exported
    from enlace_agent.search import search

    url = http_server.reply("/lite/", 200, (FIXTURES / "ddg_lite_results_es.html").read_bytes())
    cfg = tmp_path / "search.yaml"
    cfg.write_text(json.dumps({"duckduckgo": {"endpoint": url}}))
    response = search("tortilla", config=cfg, providers="duckduckgo", max_results=1, region="mx-es")
    assert isinstance(response, Exported)
    assert response.provider == "duckduckgo" and len(response.results) == 1
    assert "kl=mx-es" in http_server.requests[0].body.decode()
    config = SearchConfig.model_validate(
        {"duckduckgo": {"endpoint": url}, "providers": ["duckduckgo"]}
    )
    assert search("tortilla", config=config).provider == "duckduckgo"
    with pytest.raises(MissingCredential):
        search("tortilla", config=cfg, env={})


def test_lazy_exports_and_version() -> None:
    import enlace_agent
    import enlace_agent.search as pkg

    assert isinstance(enlace_agent.__version__, str) and enlace_agent.__version__
    for name in pkg.__all__:
        assert getattr(pkg, name) is not None
    with pytest.raises(AttributeError):
        _ = pkg.no_such_name  # type: ignore[attr-defined]


def test_parse_env_file() -> None:
    text = "\n".join(
        [
            "# a comment",
            "",
            "BRAVE_SEARCH_API_KEY=abc123",
            'export QUOTED="two words"',
            "SINGLE='x # not a comment'",
            "TRAILING=value  # comment",
            "SPACED = spaced",
            "not a line",
            "EMPTY=",
        ]
    )
    assert parse_env_file(text) == {
        "BRAVE_SEARCH_API_KEY": "abc123",
        "QUOTED": "two words",
        "SINGLE": "x # not a comment",
        "TRAILING": "value",
        "SPACED": "spaced",
        "EMPTY": "",
    }


def test_environment_wins_over_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("BRAVE_SEARCH_API_KEY=from-file\nOTHER=1\n")
    env = load_env(env_file, environ={"BRAVE_SEARCH_API_KEY": "from-env"})
    assert env["BRAVE_SEARCH_API_KEY"] == "from-env" and env["OTHER"] == "1"
    # no default file: just the environment
    assert load_env(None, environ={"XDG_CONFIG_HOME": str(tmp_path / "none")}) == {
        "XDG_CONFIG_HOME": str(tmp_path / "none")
    }


def test_load_config_layers(tmp_path: Path) -> None:
    assert load_config(None, environ={"XDG_CONFIG_HOME": str(tmp_path)}) == SearchConfig()
    (tmp_path / "enlace").mkdir()
    (tmp_path / "enlace" / "search.yaml").write_text("region: mx-es\nproviders: [duckduckgo]\n")
    config = load_config(
        None, environ={"XDG_CONFIG_HOME": str(tmp_path)}, overrides={"max_results": 3}
    )
    assert (config.region, config.providers, config.max_results) == ("mx-es", ["duckduckgo"], 3)
    (tmp_path / "comment.yaml").write_text("# all defaults\nregion: es-es\n")
    assert load_config(tmp_path / "comment.yaml") == SearchConfig()
    with pytest.raises(SearchConfigError, match="no existe"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(SearchConfigError, match="líneas «clave: valor»"):
        load_config(tmp_path / "list.yaml")
    (tmp_path / "bad.yaml").write_text("http:\n  total_timeout_s: 1\n  read_timeout_s: 5\n")
    with pytest.raises(SearchConfigError, match=r"línea 3, http.read_timeout_s"):
        load_config(tmp_path / "bad.yaml")


def test_repo_example_config_is_valid_and_documents_the_defaults() -> None:
    example = Path(__file__).resolve().parents[3] / "configs" / "agent" / "search.yaml"
    if not example.is_file():
        pytest.skip(f"{example} not found (running outside the repository)")
    assert load_config(example) == SearchConfig()


def test_redact_also_catches_url_encoded_forms() -> None:
    key = "a+b/c=d"
    text = f"x {key} y a%2Bb%2Fc%3Dd z"
    assert key not in redact(text, [key]) and "a%2Bb%2Fc%3Dd" not in redact(text, [key])
