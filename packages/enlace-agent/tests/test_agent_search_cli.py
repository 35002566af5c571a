"""`enlace-search` in a real subprocess: exit codes, Spanish output, the JSON shape, the start-up
errors, the key and the query kept out of logs, and no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
TEST_HTTP = {"connect_timeout_s": 5.0, "read_timeout_s": 5.0, "total_timeout_s": 10.0}


def run_cli(
    *args: str, env: dict[str, str], module: bool = False
) -> subprocess.CompletedProcess[str]:
    cmd = (
        [sys.executable, "-m", "enlace_agent.cli.search"]
        if module
        else [
            sys.executable,
            "-c",
            "import sys; from enlace_agent.cli.search import main; sys.exit(main())",
        ]
    )
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture
def cli(in_process: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`main(argv)` in this process (cheap); `run_cli` keeps the subprocess for what needs one."""
    from enlace_agent.cli.search import main

    def run(*args: str, env: dict[str, str] | None = None) -> Any:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        return in_process(main, *args)

    return run


def write_config(tmp_path: Path, **data: Any) -> Path:
    path = tmp_path / "search.yaml"
    data.setdefault("http", TEST_HTTP)
    data.setdefault("state_file", str(tmp_path / "state.json"))
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def page(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_answer_in_spanish_with_its_source(
    http_server: Any, clean_env: dict[str, str], tmp_path: Path
) -> None:
    ddg = http_server.reply("/lite/", 200, page("ddg_lite_results_es.html"))
    cfg = write_config(tmp_path, providers=["duckduckgo"], duckduckgo={"endpoint": ddg})
    proc = run_cli(
        "receta", "de", "tortilla", "--config", str(cfg), "--max-results", "2", env=clean_env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "1. Tortilla de patatas - Wikipedia, la enciclopedia libre",
        "   https://es.wikipedia.org/wiki/Tortilla_de_patatas",
        "   La tortilla de patatas es una tortilla (huevo batido y cuajado) con patatas y, según la "
        "región, cebolla. Es uno de los platos más conocidos de la gastronomía española & un clásico.",
        "",
        "2. 🥔 Receta de tortilla española jugosa 🍳",
        "   https://www.recetas.example/tortilla-española",
        "   Paso a paso: patatas, huevos, aceite de oliva y sal. ¿Con o sin cebolla? Te lo contamos 😋",
        "",
        "fuente: duckduckgo",
    ]
    assert proc.stderr == ""  # nothing logged at the default level, the query least of all
    assert "q=receta+de+tortilla" in http_server.requests[0].body.decode()


def test_fallback_names_why_the_primary_was_skipped(
    http_server: Any, cli: Any, tmp_path: Path, fake_key: str
) -> None:
    ddg = http_server.reply("/lite/", 202, page("ddg_lite_challenge.html"))
    brave = http_server.reply_json(
        "/brave",
        200,
        {
            "web": {
                "results": [
                    {
                        "title": "Hola",
                        "url": "https://hola.example/",
                        "description": "<strong>h</strong>",
                    }
                ]
            }
        },
    )
    cfg = write_config(tmp_path, duckduckgo={"endpoint": ddg}, brave={"endpoint": brave})
    env = {"BRAVE_SEARCH_API_KEY": fake_key}
    proc = cli("hola", "--config", str(cfg), env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "fuente: brave (duckduckgo omitido: bloqueado con una verificación anti-bots (HTTP 202))"
    )
    # stdout said it in Spanish: no English log line without --debug (with it, the details)
    assert proc.stderr == ""
    assert "duckduckgo skipped" in cli("hola", "--config", str(cfg), "--debug", env=env).stderr
    assert fake_key not in proc.stdout + proc.stderr

    # --json: the documented shape; the cool-down is remembered for the next run
    proc = cli("hola", "--config", str(cfg), "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"query", "provider", "results", "skipped", "elapsed_s"}
    assert data["query"] == "hola" and data["provider"] == "brave"
    assert data["results"] == [
        {"title": "Hola", "url": "https://hola.example/", "snippet": "h", "rank": 1}
    ]
    assert data["skipped"][0]["provider"] == "duckduckgo"
    assert data["skipped"][0]["error"] == "cooling_down"
    assert set(data["skipped"][0]) == {"provider", "error", "message"}
    assert isinstance(data["elapsed_s"], float)
    assert sum(r.path.startswith("/lite/") for r in http_server.requests) == 1  # not asked again
    assert fake_key not in proc.stdout + proc.stderr


def test_zero_results_exit_0(
    http_server: Any, cli: Any, clean_env: dict[str, str], tmp_path: Path
) -> None:
    ddg = http_server.reply("/lite/", 200, page("ddg_lite_no_results.html"))
    cfg = write_config(tmp_path, providers=["duckduckgo"], duckduckgo={"endpoint": ddg})
    proc = cli("xyzzy", "--config", str(cfg), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["results"] == []
    proc = run_cli("xyzzy", "--config", str(cfg), env=clean_env, module=True)
    assert proc.returncode == 0
    assert proc.stdout.splitlines() == [
        "Sin resultados para esta búsqueda.",
        "",
        "fuente: duckduckgo",
    ]


def test_all_failed_exit_1_lists_causes_without_the_key(
    http_server: Any,
    refused_url: str,
    cli: Any,
    clean_env: dict[str, str],
    tmp_path: Path,
    fake_key: str,
) -> None:
    ddg = http_server.reply("/lite/", 200, page("unrelated.html"))
    cfg = write_config(tmp_path, duckduckgo={"endpoint": ddg}, brave={"endpoint": refused_url})
    env = {**clean_env, "BRAVE_SEARCH_API_KEY": fake_key}
    for extra in ([], ["--json"], ["--debug"]):
        # --debug in a real process: tracebacks and every library's debug log go to its stderr
        if extra == ["--debug"]:
            proc = run_cli("receta de tortilla", "--config", str(cfg), *extra, env=env)
        else:
            proc = cli("receta de tortilla", "--config", str(cfg), *extra, env=env)
        assert proc.returncode == 1, proc.stderr
        assert "ningún proveedor de búsqueda respondió" in proc.stderr
        assert "duckduckgo: respuesta irreconocible" in proc.stderr
        assert "brave: no disponible" in proc.stderr
        assert fake_key not in proc.stdout + proc.stderr
        if extra == ["--json"]:
            data = json.loads(proc.stdout)
            assert data["provider"] is None
            assert [s["error"] for s in data["skipped"]] == ["layout_changed", "unavailable"]
        if extra == ["--debug"]:
            assert "receta de tortilla" in proc.stderr  # the query appears only at debug level


def test_brave_key_echoed_by_the_server_is_redacted_everywhere(
    http_server: Any, cli: Any, tmp_path: Path, fake_key: str
) -> None:
    def echo(h: Any) -> None:
        token = h.headers.get("X-Subscription-Token", "")
        body = json.dumps(
            {
                "type": "ErrorResponse",
                "error": {"code": "SUBSCRIPTION_TOKEN_INVALID", "detail": f"bad token {token}"},
            }
        )
        h.send_response(422)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body.encode())

    brave = http_server.handle("/brave", echo)
    cfg = write_config(tmp_path, providers=["brave"], brave={"endpoint": brave})
    env = {"BRAVE_SEARCH_API_KEY": fake_key}
    for extra in ([], ["--json"], ["--debug"]):
        proc = cli("hola", "--config", str(cfg), *extra, env=env)
        assert proc.returncode == 1
        assert "clave rechazada" in proc.stderr
        assert fake_key not in proc.stdout + proc.stderr
    assert http_server.requests[0].headers["X-Subscription-Token"] == fake_key


def test_missing_key_exits_2_naming_the_variable_and_both_ways_out(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    proc = run_cli("hola", env=clean_env)
    assert proc.returncode == 2
    assert "BRAVE_SEARCH_API_KEY" in proc.stderr
    assert "--providers duckduckgo" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_key_from_env_file_and_xdg_env(
    http_server: Any, cli: Any, clean_env: dict[str, str], tmp_path: Path, fake_key: str
) -> None:
    brave = http_server.reply_json("/brave", 200, {"type": "search"})
    cfg = write_config(tmp_path, providers=["brave"], brave={"endpoint": brave})
    env_file = tmp_path / "keys.env"
    env_file.write_text(f"# keys\nexport BRAVE_SEARCH_API_KEY='{fake_key}'\n", encoding="utf-8")
    proc = cli("hola", "--config", str(cfg), "--env-file", str(env_file))
    assert proc.returncode == 0, proc.stderr
    assert http_server.requests[-1].headers["X-Subscription-Token"] == fake_key
    # the default place: $XDG_CONFIG_HOME/enlace/.env
    xdg = Path(clean_env["XDG_CONFIG_HOME"]) / "enlace"
    xdg.mkdir(parents=True)
    (xdg / ".env").write_text(f"BRAVE_SEARCH_API_KEY={fake_key}-2\n", encoding="utf-8")
    proc = cli("hola", "--config", str(cfg))
    assert proc.returncode == 0, proc.stderr
    assert http_server.requests[-1].headers["X-Subscription-Token"] == fake_key + "-2"
    # a missing explicit env file is a usage error
    proc = cli("hola", "--config", str(cfg), "--env-file", str(tmp_path / "nope.env"))
    assert proc.returncode == 2 and "nope.env" in proc.stderr


def test_xdg_config_file_is_read(http_server: Any, cli: Any, clean_env: dict[str, str]) -> None:
    ddg = http_server.reply("/lite/", 200, page("ddg_lite_no_results.html"))
    xdg = Path(clean_env["XDG_CONFIG_HOME"]) / "enlace"
    xdg.mkdir(parents=True)
    (xdg / "search.yaml").write_text(
        json.dumps(
            {
                "providers": ["duckduckgo"],
                "region": "mx-es",
                "duckduckgo": {"endpoint": ddg},
                "http": TEST_HTTP,
            }
        )
    )
    proc = cli("hola")
    assert proc.returncode == 0, proc.stderr
    assert "kl=mx-es" in http_server.requests[-1].body.decode()
    proc = cli("hola", "--region", "us-en")
    assert "kl=us-en" in http_server.requests[-1].body.decode()
    # the cool-down state lands in $XDG_CACHE_HOME/enlace/
    http_server.reply("/lite/", 202, page("ddg_lite_challenge.html"))
    assert cli("hola").returncode == 1
    state = Path(clean_env["XDG_CACHE_HOME"]) / "enlace" / "search-state.json"
    assert json.loads(state.read_text())["cooldowns"]["duckduckgo"]["cause"] == "blocked"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["x" * 500, "--providers", "duckduckgo"], "500 caracteres y el máximo es 499"),
        (["x" * 401, "--providers", "brave"], "401 caracteres y el máximo es 400"),
        (
            ["hola", "--providers", "duckduckgo", "--max-results", "0"],
            "--max-results debe estar entre 1 y 20",
        ),
        (["hola", "--providers", "duckduckgo", "--max-results", "veinte"], "invalid int value"),
        (["hola", "--providers", "google"], "--providers espera"),
        (["hola", "--providers", "duckduckgo,duckduckgo"], "sin repetir"),
        (
            ["hola", "--providers", "duckduckgo", "--region", "España"],
            "--region debe tener la forma",
        ),
        (["hola", "--providers", "duckduckgo", "--config", "/no/such/file.yaml"], "no existe"),
        (["   ", "--providers", "duckduckgo"], "vacía"),
        ([], "required"),
    ],
)
def test_usage_errors_exit_2(args: list[str], needle: str, cli: Any) -> None:
    proc = cli(*args, env={"BRAVE_SEARCH_API_KEY": "k" * 10})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_too_long_query_exits_2_in_a_real_process(clean_env: dict[str, str]) -> None:
    proc = run_cli("x" * 500, "--providers", "duckduckgo", env=clean_env)
    assert proc.returncode == 2
    assert "500 caracteres y el máximo es 499" in proc.stderr and "Traceback" not in proc.stderr


def test_bad_yaml_config_exits_2(cli: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: [duckduckgo\n")
    proc = cli("hola", "--config", str(bad))
    assert proc.returncode == 2 and "no es YAML válido" in proc.stderr and "línea 2" in proc.stderr
    bad.write_text("providers: [duckduckgo]\nunknown_knob: 1\n")
    proc = cli("hola", "--config", str(bad))
    assert proc.returncode == 2 and "unknown_knob" in proc.stderr


def test_importing_enlace_agent_and_the_cli_does_not_import_torch(
    clean_env: dict[str, str],
) -> None:
    code = (
        "import sys, enlace_agent, enlace_agent.cli.search\n"
        "from enlace_agent.search import search, SearchChain\n"
        "from enlace_agent.tools.search import SEARCH_TOOL\n"
        "import enlace_agent.search.brave, enlace_agent.search.duckduckgo\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('ok')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=clean_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_cli_module_imports_only_the_standard_library(clean_env: dict[str, str]) -> None:
    code = (
        "import sys\nimport enlace_agent.cli.search\n"
        "heavy = sorted({'httpx', 'bs4', 'pydantic', 'yaml', 'torch'} & set(sys.modules))\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], env=clean_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_help_exits_0(cli: Any) -> None:
    proc = cli("--help")
    assert proc.returncode == 0
    assert "BRAVE_SEARCH_API_KEY" in proc.stdout and "--providers" in proc.stdout


@pytest.fixture(autouse=True)
def _pythonpath_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses use this interpreter; make sure nothing in the user's site leaks in."""
    monkeypatch.setenv("PYTHONNOUSERSITE", "1")
    os.environ.pop("PYTHONSTARTUP", None)
