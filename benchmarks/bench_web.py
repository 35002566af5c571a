"""The family web page under load: N people chatting at once (20 by default), each in their own
conversation, against the scripted OpenAI-compatible model of enlace-agent's tests on loopback.

Run by hand (not part of the tests; timings on a shared machine are indicative only):

    uv run python benchmarks/bench_web.py                 # 20 concurrent conversations
    uv run python benchmarks/bench_web.py --people 40 --pieces 20 --delay 0.05

Each person signs in, asks one question (POST /api/conversations) and reads the answer's
server-sent events to the end. Reported: latency to the first token (from the POST to the first
`text` event) and to the end of the answer (median, p95, max), the model's own streaming time for
comparison, the errors (HTTP errors, streams that end in `error`, wrong or mixed-up answers), and
the load average. An answer finished before its stream was opened (the stream says `idle`) is
read from the history, as the page does, and counted apart: it has no first-token time.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1] / "packages" / "enlace-agent" / "tests"


def _conftest() -> Any:
    """enlace-agent's test helpers (the scripted model, uvicorn in a thread): one home for them."""
    spec = importlib.util.spec_from_file_location(
        "enlace_agent_test_helpers", TESTS / "conftest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def chat(page: Any, name: str, result: dict[str, Any]) -> None:
    client = page.client()
    try:
        if client.post("/api/login", json={"name": name}).status_code != 200:
            result["error"] = "login"
            return
        client.headers["X-Enlace-CSRF"] = client.get("/api/me").json()["csrf"]
        started = time.perf_counter()
        answer = client.post("/api/conversations", json={"text": f"pregunta de {name}"})
        if answer.status_code != 202:
            result["error"] = f"HTTP {answer.status_code}"
            return
        text = ""
        with client.stream("GET", f"/api/conversations/{answer.json()['id']}/events") as stream:
            for line in stream.iter_lines():
                if not line.startswith("data: "):
                    continue
                event = json.loads(line[6:])
                if event["type"] == "text":
                    result.setdefault("first_s", time.perf_counter() - started)
                    text += event["text"]
                elif event["type"] in ("end", "error", "idle"):
                    result["end_s"] = time.perf_counter() - started
                    if event["type"] == "idle":  # done before the stream opened: as the page does
                        saved = client.get(f"/api/conversations/{answer.json()['id']}").json()
                        text = saved["messages"][-1]["content"]
                        result["before_stream"] = True
                    elif event["type"] == "error":
                        result["error"] = f"error event: {event['message'][:60]}"
                    if text != f"Eco de pregunta de {name}":
                        result["error"] = f"wrong answer: {text[:60]!r}"
                    return
    except Exception as exc:  # a benchmark counts failures, it does not stop at the first
        result["error"] = type(exc).__name__
    finally:
        client.close()


def echo_model(helpers: Any, pieces: int, delay: float) -> Any:
    """The scripted model, answering each question with «Eco de» and the question."""
    model = helpers.start_model_server()

    def echo(h: Any) -> None:
        body = json.loads(h.request_body)
        question = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
        model.say(f"Eco de {question}", pieces=pieces, delay=delay)(h, body)

    model.server.routes["/v1/chat/completions"] = echo
    return model


def summary(label: str, values: list[float]) -> str:
    if not values:
        return f"{label}: no values"
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (
        f"{label}: median {statistics.median(ordered) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {ordered[-1] * 1000:.0f} ms"
    )


def run_page(
    helpers: Any,
    model: Any,
    names: list[str],
    *,
    settings: dict[str, Any] | None = None,
    prepare: Any = None,
) -> tuple[list[dict[str, Any]], float]:
    """Serves the page over `model` for `names` (plus `settings` in assistant.yaml's shape),
    `prepare(database)` first (to fill the history file), and has everyone chat at once; each
    person's result (`chat`) and the wall time. Also used by benchmarks/bench_memory.py."""
    from enlace_agent.assistant import Assistant, build_client
    from enlace_agent.web import build_app
    from enlace_config.schema.agent import AssistantConfig

    with tempfile.TemporaryDirectory() as tmp:
        database = Path(tmp) / "web.sqlite3"
        config = AssistantConfig.model_validate(
            {
                "base_url": model.base_url,
                "max_tool_rounds": 0,
                "web": {"people": [{"name": n} for n in names], "database": str(database)},
                **(settings or {}),
            }
        )
        if prepare is not None:
            prepare(database, config)
        assistant = Assistant(build_client(config, {}), tools=[], config=config)
        page = helpers.serve_in_thread(build_app(assistant, {}))
        results: list[dict[str, Any]] = [{} for _ in names]
        wall = together([(chat, (page, n, r)) for n, r in zip(names, results, strict=True)])
        page.stop()
    return results, wall


def together(calls: list[tuple[Any, tuple[Any, ...]]]) -> float:
    """Runs every `(function, arguments)` at once, each in its own thread; the wall time."""
    threads = [threading.Thread(target=f, args=a) for f, a in calls]
    wall = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return time.perf_counter() - wall


def model_options(parser: argparse.ArgumentParser) -> None:
    """The scripted model's pace (`echo_model`): pieces of each answer and the pause between."""
    parser.add_argument("--pieces", type=int, default=10, help="pieces of each streamed answer")
    parser.add_argument("--delay", type=float, default=0.02, help="model's pause between pieces")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--people", type=int, default=20, help="concurrent conversations")
    model_options(parser)
    args = parser.parse_args()

    helpers = _conftest()
    model = echo_model(helpers, args.pieces, args.delay)
    names = [f"Persona{i:02d}" for i in range(args.people)]
    results, wall = run_page(helpers, model, names)
    model.server.stop.set()
    model.server.server.shutdown()

    errors = [r["error"] for r in results if "error" in r]
    print(
        f"{args.people} concurrent conversations, answers of {args.pieces} pieces "
        f"{args.delay * 1000:.0f} ms apart (the model alone streams one in "
        f"~{args.pieces * args.delay * 1000:.0f} ms)"
    )
    print(summary("first token", [r["first_s"] for r in results if "first_s" in r]))
    print(summary("whole answer", [r["end_s"] for r in results if "end_s" in r]))
    early = sum(1 for r in results if r.get("before_stream"))
    print(f"answers finished before their stream opened (read from the history): {early}")
    print(f"wall time {wall:.2f} s; errors: {len(errors)}" + (f" {errors}" if errors else ""))
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
