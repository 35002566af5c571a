"""The home server's health: `enlace-assistant doctor` and `GET /api/health`, one set of checks
(enlace_agent.health) against a real local model server, real files and a real page."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from enlace_agent.cli.assistant import main
from enlace_agent.health import check_snapshot

FAKE_KEY = "sk-model-secret-0123456789"


def write_config(tmp_path: Path, base_url: str, **web: Any) -> Path:
    search = tmp_path / "search.yaml"
    state = tmp_path / "state.json"
    search.write_text(f"providers: [duckduckgo]\nstate_file: {state}\n", encoding="utf-8")
    config = tmp_path / "assistant.yaml"
    data = {
        "base_url": base_url,
        "search_config": str(search),
        "web": {"people": [{"name": "Ana"}], "database": str(tmp_path / "web.sqlite3"), **web},
    }
    config.write_text(json.dumps(data), encoding="utf-8")  # JSON is YAML
    return config


def lines(out: str) -> dict[str, str]:
    """doctor's lines by their first words' subject."""
    subjects = {
        "model": "servidor del modelo",
        "search": "búsqueda",
        "database": "historial",
        "disk": "disco",
        "snapshot": "copia",
    }
    found: dict[str, str] = {}
    for line in out.splitlines():
        for name, needle in subjects.items():
            if needle in line and name not in found:
                found[name] = line
                break
    return found


def test_doctor_all_well(in_process: Callable[..., Any], model_server: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path, model_server.base_url)
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    found = lines(ran.stdout)
    assert found["model"].startswith("✓") and "sirve enlace-chat" in found["model"]
    assert found["search"].startswith("✓") and "duckduckgo" in found["search"]
    assert found["database"].startswith("✓")  # none yet: made on first start
    assert "libres" in ran.stdout and found["snapshot"].startswith("!")  # no snapshot yet
    assert len(ran.stdout.splitlines()) == 5


def test_doctor_model_down_and_no_brave_key(
    in_process: Callable[..., Any], refused_url: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path, refused_url + "/v1")
    (tmp_path / "search.yaml").write_text("providers: [duckduckgo, brave]\n", encoding="utf-8")
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 1
    found = lines(ran.stdout)
    assert found["model"].startswith("✗") and "no responde" in found["model"]
    assert "enlace-assistant service status" in found["model"]
    assert found["search"].startswith("✗") and "BRAVE_SEARCH_API_KEY" in found["search"]
    assert "[duckduckgo]" in found["search"]  # the other way out


def test_doctor_low_disk_and_newer_database(
    in_process: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path, model_server.base_url, home={"min_free_disk_mb": 10_000_000})
    with sqlite3.connect(tmp_path / "web.sqlite3") as db:
        db.execute("PRAGMA user_version = 999")
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 1
    found = lines(ran.stdout)
    assert found["disk"].startswith("✗") and "min_free_disk_mb" in found["disk"]
    assert found["database"].startswith("✗") and "más nuevo" in found["database"]
    assert "actualiza enlace-agent" in found["database"]


def test_doctor_read_only_database(
    in_process: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    import os

    if os.geteuid() == 0:
        pytest.skip("root writes through file permissions")
    config = write_config(tmp_path, model_server.base_url)
    with sqlite3.connect(tmp_path / "web.sqlite3") as db:
        db.execute("PRAGMA user_version = 1")
    (tmp_path / "web.sqlite3").chmod(0o400)
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 1
    assert "no admite escritura" in lines(ran.stdout)["database"]


def test_doctor_damaged_pages(
    in_process: Callable[..., Any], model_server: Any, tmp_path: Path
) -> None:
    """The header and the write lock are fine, one page in the middle is garbage: `memory list`
    would fail, so the doctor must not say the history is well."""
    from enlace_agent.household import Store

    config = write_config(tmp_path, model_server.base_url)
    path = tmp_path / "web.sqlite3"
    Store(path)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE filler(x TEXT)")
        db.executemany("INSERT INTO filler VALUES (?)", [("palabra " * 50,)] * 400)
    db.close()
    data = bytearray(path.read_bytes())
    page = len(data) // 4096 - 10
    data[4096 * page : 4096 * (page + 1)] = b"\xff" * 4096
    path.write_bytes(data)
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 1, ran.stdout
    found = lines(ran.stdout)["database"]
    assert found.startswith("✗") and "dañado" in found and "snapshot restore" in found


def test_doctor_model_version_without_its_file(
    in_process: Callable[..., Any],
    model_server: Any,
    gguf: Callable[..., Path],
    tmp_path: Path,
    web_page: Callable[..., Any],
) -> None:
    """The server still answers (it holds the model in memory), but the version in use has lost
    its file: the next restart would find no model. Doctor and /api/health say so."""
    from enlace_agent import model_versions as mv

    models = tmp_path / "models"
    config = write_config(tmp_path, model_server.base_url, home={"models_dir": str(models)})
    mv.use(models, mv.install(models, gguf(tmp_path / "a.gguf"), "v1").name)
    assert lines(in_process(main, "doctor", "--config", str(config)).stdout)["model"].startswith(
        "✓"
    )
    (models / "v1" / mv.MODEL_FILE).unlink()
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 1, ran.stdout
    found = lines(ran.stdout)["model"]
    assert found.startswith("✗") and "v1" in found and "model use" in found, found
    page = web_page(home={"models_dir": str(models)})
    checks = page.client().get("/api/health").json()["checks"]
    assert checks[0]["status"] == "fail" and "v1" in checks[0]["message"]


def test_doctor_names_a_verified_snapshot(
    in_process: Callable[..., Any], model_server: Any, tmp_path: Path, clean_env: dict[str, str]
) -> None:
    from enlace_agent.assistant import load_config
    from enlace_agent.snapshot import create, household

    config = write_config(tmp_path, model_server.base_url)
    from enlace_agent.household.database import Store

    Store(tmp_path / "web.sqlite3")
    create(household(load_config(config), clean_env, config))
    ran = in_process(main, "doctor", "--config", str(config))
    assert ran.returncode == 0, ran.stdout
    assert lines(ran.stdout)["snapshot"].startswith("✓ La última copia de seguridad")


def test_snapshot_too_old_needs_a_person() -> None:
    made = dt.datetime(2026, 12, 1, 3, tzinfo=dt.UTC)
    late = check_snapshot(made, 48, now=made + dt.timedelta(hours=50))
    assert late.status == "fail" and "50 h" in late.message
    assert check_snapshot(made, 48, now=made + dt.timedelta(hours=5)).status == "ok"


def test_health_route(web_page: Callable[..., Any], model_server: Any) -> None:
    page = web_page(env={"ENLACE_MODEL_API_KEY": FAKE_KEY, "ENLACE_WEB_TOKEN_ANA": "t" * 20})
    client = page.login("Ana")
    model_server.script.append(model_server.say("La capital es Madrid."))
    page.answered(client, "¿Cuál es la capital secreta de mi tía Rosario?")
    anonymous = page.client()  # no sign-in needed
    answer = anonymous.get("/api/health")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["ok"] is True
    assert [c["name"] for c in body["checks"]] == [
        "model",
        "search",
        "database",
        "disk",
        "snapshot",
    ]
    assert body["checks"][0]["facts"]["served"] == ["enlace-chat"]
    assert body["checks"][2]["facts"]["schema_version"] >= 1
    text = answer.text
    for private in (FAKE_KEY, "t" * 20, "Rosario", "Madrid"):
        assert private not in text
    # only under the page's own names (DNS rebinding)
    assert anonymous.get("/api/health", headers={"Host": "evil.example"}).status_code == 421


def test_health_route_model_down_then_back(web_page: Callable[..., Any], model_server: Any) -> None:
    page = web_page()
    client = page.client()
    routes = model_server.server.routes
    models = routes.pop("/v1/models")
    routes["/health"] = lambda h: h.send_error(503)  # llama-server while loading
    loading = client.get("/api/health").json()["checks"][0]
    assert loading["status"] == "warn" and "cargando" in loading["message"]
    routes["/v1/models"] = models
    del routes["/health"]
    assert client.get("/api/health").json()["ok"] is True
    model_server.server.server.shutdown()
    model_server.server.server.server_close()
    down = client.get("/api/health")
    assert down.status_code == 503
    assert "no responde" in down.json()["checks"][0]["message"]


def test_doctor_names_the_provider_that_answered_last(
    in_process: Callable[..., Any],
    model_server: Any,
    http_server: Any,
    fixtures_dir: Path,
    tmp_path: Path,
) -> None:
    from enlace_agent.search.chain import SearchChain
    from enlace_agent.search.settings import load_config as load_search_config

    config = write_config(tmp_path, model_server.base_url)
    lite = http_server.reply(
        "/lite/", 200, (fixtures_dir / "ddg_lite_results_es.html").read_bytes()
    )
    search = tmp_path / "search.yaml"
    state = tmp_path / "state.json"
    search.write_text(
        json.dumps(
            {
                "providers": ["duckduckgo"],
                "duckduckgo": {"endpoint": lite},
                "state_file": str(state),
            }
        ),
        encoding="utf-8",
    )
    never = lines(in_process(main, "doctor", "--config", str(config)).stdout)["search"]
    assert "todavía no ha respondido" in never
    SearchChain(load_search_config(search, environ={}), env={}).search("tiempo en Soria")
    found = lines(in_process(main, "doctor", "--config", str(config)).stdout)["search"]
    assert found.startswith("✓") and "la última respuesta fue de duckduckgo" in found
    assert "Soria" not in state.read_text()  # the state file keeps no query
