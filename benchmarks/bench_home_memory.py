"""The home server's memory: the family page (`enlace-assistant serve`) and llama-server serving a
GGUF chat model, started with the very command lines of their systemd units, at rest and while N
people (20 by default) each ask a question at once.

Run by hand (not part of the tests; a shared machine's figures are indicative only):

    uv run python benchmarks/bench_home_memory.py runs/test-chat/chat-q8_0.gguf
    uv run python benchmarks/bench_home_memory.py MODEL.gguf --people 20 --llama-server PATH

Reported for each process and their sum: resident memory at rest (VmRSS, after start-up and one
warm-up question) and the peak (VmHWM) after the conversations; the answers' wall time (median,
max), the answers that failed, the load average. The model's searches go to a page on loopback,
never the internet; each person signs in by name (people without a token, on loopback).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from bench_web import _conftest  # pyright: ignore[reportPrivateUsage]

QUESTIONS = (
    "¿Qué tiempo hará mañana en Zaragoza?",
    "Hola, ¿cómo estás?",
    "¿Cuánto es 7 por 8?",
    "¿Cómo quito una mancha de vino de un mantel?",
)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB (Linux /proc)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(url: str, process: subprocess.Popen[bytes], what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited ({process.returncode})")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{what} did not answer within {seconds:.0f} s")


def ask(page: str, name: str, question: str, result: dict[str, Any]) -> None:
    """Sign in, ask, read the answer's events to the end (the page's own client does this)."""
    with httpx.Client(base_url=page, timeout=300) as client:
        started = time.perf_counter()
        if client.post("/api/login", json={"name": name}).status_code != 200:
            result["error"] = "login"
            return
        client.headers["X-Enlace-CSRF"] = client.get("/api/me").json()["csrf"]
        answer = client.post("/api/conversations", json={"text": question})
        if answer.status_code != 202:
            result["error"] = f"HTTP {answer.status_code}"
            return
        events = f"/api/conversations/{answer.json()['id']}/events"
        with client.stream("GET", events) as stream:
            for line in stream.iter_lines():
                if line.startswith("event: error"):
                    result["error"] = "error event"
        result["seconds"] = time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", type=Path, help="the GGUF chat model")
    parser.add_argument("--people", type=int, default=20, help="people asking at once")
    parser.add_argument(
        "--llama-server", type=Path, help="default: the one of build-llama-server.sh"
    )
    parser.add_argument(
        "--slot-context", type=int, default=3072, help="tokens of context per parallel slot"
    )
    args = parser.parse_args()

    from enlace_agent import service
    from enlace_agent.household import HouseholdPaths
    from enlace_agent.model_versions import CURRENT
    from enlace_config.schema.agent import AssistantConfig

    # The machine's llama-server (its build cache), found before the folders below replace it.
    llama = args.llama_server or service.llama_server(
        AssistantConfig(), HouseholdPaths.of(AssistantConfig(), os.environ)
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_CACHE_HOME": str(root / "cache"),
        }
        models = root / "data" / "enlace" / "models"
        models.mkdir(parents=True)
        (models / CURRENT).symlink_to(args.model.resolve())
        # The searches answered on loopback by the tests' own local server (bench_web's helpers).
        helpers = _conftest()
        search = helpers.weather_search(helpers._start_server(), root / "search.yaml")
        model_port, page_port = free_port(), free_port()
        people = [f"Persona{i}" for i in range(args.people)]
        settings: dict[str, Any] = {
            "base_url": f"http://127.0.0.1:{model_port}/v1",
            "search_config": str(search),
            "temperature": 0.0,
            "web": {
                "host": "127.0.0.1",
                "port": page_port,
                "database": str(root / "web.sqlite3"),
                "people": [{"name": p} for p in people],
            },
        }
        # The CPU chat model was trained on 3,072 positions and learned the short system prompt:
        # each of llama-server's parallel slots gets that much context.
        settings["system_prompt"] = "Eres Enlace, un asistente familiar que habla español."
        settings["web"]["home"] = {
            "context_size": args.slot_context * 4,
            "parallel": 4,
            "llama_server": str(llama),
        }
        config_file = root / "assistant.yaml"
        config_file.write_text(json.dumps(settings))
        config = AssistantConfig.model_validate(settings)

        model_argv = service.model_argv(
            config, HouseholdPaths.of(config, env, config_file)
        )  # the enlace-model unit's ExecStart
        page_argv = service.page_argv(config_file, "serve")  # the enlace-web unit's
        print("model:", " ".join(model_argv[1:]))
        quiet = subprocess.DEVNULL
        model = subprocess.Popen(model_argv, env=env, stdout=quiet, stderr=quiet)
        page_process = subprocess.Popen(page_argv, env=env, stdout=quiet, stderr=quiet)
        try:
            wait_until(f"http://127.0.0.1:{model_port}/health", model, "llama-server", 120)
            page = f"http://127.0.0.1:{page_port}"
            wait_until(f"{page}/api/people", page_process, "the page", 60)
            warm: dict[str, Any] = {}
            ask(page, people[0], QUESTIONS[0], warm)
            rest = {"llama-server": memory_kib(model.pid), "page": memory_kib(page_process.pid)}
            results: list[dict[str, Any]] = [{} for _ in people]
            threads = [
                threading.Thread(target=ask, args=(page, p, QUESTIONS[i % len(QUESTIONS)], r))
                for i, (p, r) in enumerate(zip(people, results, strict=True))
            ]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - started
            peak = {"llama-server": memory_kib(model.pid), "page": memory_kib(page_process.pid)}
        finally:
            for process in (page_process, model):
                process.terminate()
                process.wait(30)

    def mib(kib: int) -> str:
        return f"{kib / 1024:.0f} MB"

    print(f"{args.people} people asking at once, model {args.model.name}")
    for name in ("page", "llama-server"):
        print(
            f"  {name:12} at rest {mib(rest[name]['VmRSS']):>7}   peak {mib(peak[name]['VmHWM']):>7}"
        )
    total_rest = sum(r["VmRSS"] for r in rest.values())
    total_peak = sum(p["VmHWM"] for p in peak.values())
    print(f"  {'both':12} at rest {mib(total_rest):>7}   peak {mib(total_peak):>7}")
    times = [r["seconds"] for r in results if "seconds" in r and "error" not in r]
    errors = [r.get("error", "no answer") for r in results if "error" in r or "seconds" not in r]
    if times:
        print(
            f"  answers: {len(times)} in {wall:.1f} s (each: median {statistics.median(times):.1f} s, "
            f"max {max(times):.1f} s), errors: {len(errors)} {sorted(set(errors))}"
        )
    print(f"  load average {os.getloadavg()[0]:.1f}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
