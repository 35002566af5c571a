"""The page's log at its default level (what journald keeps): one line per request and per tool
call, each with its time, and never a key, a token, a question, a search or an answer."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import httpx

MODEL_KEY = "sk-model-key-9f8e7d6c5b4a"
TOKEN = "token-de-ana-0123456789"
QUESTION = "¿Qué le regalo a mi hermana Remedios por su cumpleaños?"
QUERY = "regalos originales hermana Remedios"
ANSWER = "Un libro de cocina mexicana sería perfecto para Remedios."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_default_log_has_timings_and_nothing_private(
    serve_process: Any,
    model_server: Any,
    http_server: Any,
    fixtures_dir: Path,
    tmp_path: Path,
    clean_env: dict[str, str],
) -> None:
    lite = http_server.reply(
        "/lite/", 200, (fixtures_dir / "ddg_lite_results_es.html").read_bytes()
    )
    search = tmp_path / "search.yaml"
    search.write_text(
        json.dumps({"providers": ["duckduckgo"], "duckduckgo": {"endpoint": lite}}),
        encoding="utf-8",
    )
    port = free_port()
    config = tmp_path / "assistant.yaml"
    web = {
        "port": port,
        "people": [{"name": "Ana", "token_env": "ENLACE_WEB_TOKEN_ANA"}],
        "database": str(tmp_path / "web.sqlite3"),
        "snapshots": {"daily_hour": None},
    }
    data = {"base_url": model_server.base_url, "search_config": str(search), "web": web}
    config.write_text(json.dumps(data), encoding="utf-8")
    env = {**clean_env, "ENLACE_MODEL_API_KEY": MODEL_KEY, "ENLACE_WEB_TOKEN_ANA": TOKEN}
    model_server.script += [
        model_server.call("buscar_en_internet", {"consulta": QUERY}),
        model_server.say(ANSWER),
    ]
    process = serve_process(config, env, port)
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=30) as client:
        assert client.post("/api/login", json={"name": "Ana", "token": TOKEN}).status_code == 200
        client.headers["X-Enlace-CSRF"] = client.get("/api/me").json()["csrf"]
        cid = client.post("/api/conversations", json={"text": QUESTION}).json()["id"]
        with client.stream("GET", f"/api/conversations/{cid}/events") as events:
            body = "".join(events.iter_text())
        assert ANSWER[:20] in body.replace('\\"', '"')
        added = client.post("/api/memories", json={"text": "Remedios cumple en mayo"})
        mid = added.json()["memory"]["id"]
        assert client.request("DELETE", f"/api/memories/{mid}", json={}).status_code == 200
        assert client.get(f"/api/conversations/{cid}/nothing").status_code == 404  # no route
        # a model server that fails: the page tells Ana in Spanish; the log keeps no English
        # warning at its default level (only with --debug)
        model_server.script.append(model_server.status(500, {"error": {"message": "boom"}}))
        failed = client.post("/api/conversations", json={"text": "¿Sigues ahí?"}).json()["id"]
        with client.stream("GET", f"/api/conversations/{failed}/events") as events:
            assert "servidor del modelo" in "".join(events.iter_text())
    process.terminate()
    log = process.communicate(timeout=30)[1]
    requests = re.findall(
        r"^INFO enlace_agent\.web\.access: (\S+) (\S+) (\d{3}) (\d+) ms$", log, re.M
    )
    assert ("POST", "/api/login", "200") in [r[:3] for r in requests], log
    assert ("POST", "/api/conversations", "202") in [r[:3] for r in requests], log
    # what was asked, never of which conversation or memory (README: no ids in the log)
    assert ("GET", "/api/conversations/{cid}/events", "200") in [r[:3] for r in requests], log
    assert ("DELETE", "/api/memories/{mid}", "200") in [r[:3] for r in requests], log
    assert ("GET", "/api/conversations/…", "404") in [r[:3] for r in requests], log
    assert cid not in log and failed not in log and f"/memories/{mid}" not in log, log
    assert "WARNING" not in log and "Traceback" not in log, log
    tools = re.findall(
        r"^INFO enlace_agent\.assistant\.tools: .*buscar_en_internet.* ms$", log, re.M
    )
    assert len(tools) == 1, log
    for private in (MODEL_KEY, TOKEN, "Remedios", "regalos", "cocina"):
        assert private not in log, private
