"""Enlace's OpenAI-compatible endpoint under load, against the family page's own figure on the same
machine: N clients at once (20 by default), each with its own key and conversation, streaming
POST /v1/chat/completions against the scripted model of enlace-agent's tests on loopback; then
the page's run (benchmarks/bench_web.py's) in the same process; then the overhead of one request:
sequential non-streamed requests through the endpoint against the same requests sent straight to
the model server.

Run by hand (not part of the tests; timings on a shared machine are indicative only):

    uv run python benchmarks/bench_openai_api.py
    uv run python benchmarks/bench_openai_api.py --clients 40 --pieces 20 --delay 0.05
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from bench_web import (  # pyright: ignore[reportPrivateUsage]
    _conftest,
    echo_model,
    model_options,
    run_page,
    summary,
    together,
)


def ask(base: str, key: str, name: str, result: dict[str, Any]) -> None:
    body = {
        "model": "enlace",
        "messages": [{"role": "user", "content": f"pregunta de {name}"}],
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}"}
    text = ""
    try:
        with httpx.Client(base_url=base, timeout=120) as client:
            started = time.perf_counter()
            with client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r:
                if r.status_code != 200:
                    result["error"] = f"HTTP {r.status_code}"
                    return
                for line in r.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    if "error" in chunk:
                        result["error"] = "error chunk"
                        return
                    piece = chunk["choices"][0]["delta"].get("content") or ""
                    if piece:
                        result.setdefault("first_s", time.perf_counter() - started)
                        text += piece
            result["end_s"] = time.perf_counter() - started
        if text != f"Eco de pregunta de {name}":
            result["error"] = f"wrong answer: {text[:60]!r}"
    except Exception as exc:  # a benchmark counts failures, it does not stop at the first
        result["error"] = type(exc).__name__


def serve(helpers: Any, model: Any, names: list[str], tmp: Path) -> tuple[Any, dict[str, str]]:
    """The page (with the endpoint) over `model`, and a key for each of `names`."""
    from enlace_agent.assistant import Assistant, build_client
    from enlace_agent.household import Store
    from enlace_agent.household.tokens import ApiTokens
    from enlace_agent.web import build_app
    from enlace_config.schema.agent import AssistantConfig

    database = tmp / "web.sqlite3"
    config = AssistantConfig.model_validate(
        {
            "base_url": model.base_url,
            "max_tool_rounds": 0,
            "web": {
                "people": [{"name": n} for n in names],
                "database": str(database),
                "api": {"requests_per_minute": 10_000},
            },
        }
    )
    tokens = ApiTokens(Store(database))
    keys = {n: tokens.create(n, "bench")[0] for n in names}
    assistant = Assistant(build_client(config, {}), tools=[], config=config)
    return helpers.serve_in_thread(build_app(assistant, {})), keys


def overhead(page: Any, model: Any, key: str, requests: int) -> tuple[list[float], list[float]]:
    """Seconds of each non-streamed request through the endpoint, and straight to the model."""
    body = {"model": "enlace", "messages": [{"role": "user", "content": "hola"}]}
    direct = {**body, "model": "enlace-chat"}
    through: list[float] = []
    straight: list[float] = []
    with httpx.Client(timeout=60) as client:
        for _ in range(requests):
            started = time.perf_counter()
            answer = client.post(
                f"{page.base}/v1/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {key}"},
            )
            through.append(time.perf_counter() - started)
            assert answer.status_code == 200, answer.text
            started = time.perf_counter()
            assert client.post(f"{model.base_url}/chat/completions", json=direct).status_code == 200
            straight.append(time.perf_counter() - started)
    return through, straight


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=20, help="concurrent clients")
    model_options(parser)
    parser.add_argument("--requests", type=int, default=50, help="sequential requests (overhead)")
    args = parser.parse_args()

    helpers = _conftest()
    model = echo_model(helpers, args.pieces, args.delay)
    names = [f"Persona{i:02d}" for i in range(args.clients)]
    with tempfile.TemporaryDirectory() as tmp:
        page, keys = serve(helpers, model, names, Path(tmp))
        results: list[dict[str, Any]] = [{} for _ in names]
        calls = [(ask, (page.base, keys[n], n, r)) for n, r in zip(names, results, strict=True)]
        wall = together(calls)
        quick = echo_model(helpers, 1, 0.0)
        page.stop()
        (Path(tmp) / "overhead").mkdir()
        page, keys = serve(helpers, quick, names[:1], Path(tmp) / "overhead")
        through, straight = overhead(page, quick, keys[names[0]], args.requests)
        page.stop()
    paged, paged_wall = run_page(helpers, model, names)
    for m in (model, quick):
        m.server.stop.set()
        m.server.server.shutdown()

    errors = [r["error"] for r in results if "error" in r]
    errors += [f"page: {r['error']}" for r in paged if "error" in r]
    print(
        f"{args.clients} concurrent clients, answers of {args.pieces} pieces "
        f"{args.delay * 1000:.0f} ms apart (the model alone streams one in "
        f"~{args.pieces * args.delay * 1000:.0f} ms)"
    )
    print(summary("endpoint first token", [r["first_s"] for r in results if "first_s" in r]))
    print(summary("endpoint whole answer", [r["end_s"] for r in results if "end_s" in r]))
    print(summary("page first token", [r["first_s"] for r in paged if "first_s" in r]))
    print(summary("page whole answer", [r["end_s"] for r in paged if "end_s" in r]))
    extra = statistics.median(through) - statistics.median(straight)
    print(
        summary("one request through the endpoint", through)
        + "; "
        + summary("straight to the model", straight)
        + f"; overhead (median difference) {extra * 1000:.1f} ms"
    )
    print(f"wall time {wall:.2f} s (page {paged_wall:.2f} s); errors: {len(errors)} {errors}")
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
