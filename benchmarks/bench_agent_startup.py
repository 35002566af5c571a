"""enlace-search start-up: how long the CLI takes before it does anything, side by side.

Run by hand (not part of the tests):

    uv run python benchmarks/bench_agent_startup.py            # 15 runs of each
    uv run python benchmarks/bench_agent_startup.py --runs 30

Each case is a fresh `python` process (bytecode already compiled by a warm-up run); the figures are
medians of wall-clock time over the runs, printed with their ratio to an empty interpreter, plus the
`-X importtime` self-reported import time of the CLI module (median, microseconds summed over the
top-level imports it triggers). Cases:

- `python -c pass`: the floor.
- `import enlace_agent.cli.search`: what `enlace-search --help` and usage errors pay (the CLI
  module imports only the standard library before parsing its arguments).
- `--help`: the same plus argparse's work.
- the search path: the CLI plus the chain, both providers, httpx, BeautifulSoup, pydantic and the
  config schema, i.e. what a real search loads before its first request.
- bare `import httpx`, and `import httpx` with its optional CLI import suppressed the way
  enlace_agent's transport does it: the difference is what that one line saves where click/rich
  are installed (they are in the workspace environment, usually not on a home server).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CASES: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("import enlace_agent.cli.search", ["-c", "import enlace_agent.cli.search"]),
    ("python -m enlace_agent.cli.search --help", ["-m", "enlace_agent.cli.search", "--help"]),
    (
        "search path (cli + chain + providers)",
        [
            "-c",
            "import enlace_agent.cli.search, enlace_agent.search.chain, "
            "enlace_agent.search.duckduckgo, enlace_agent.search.brave, "
            "enlace_agent.search.settings",
        ],
    ),
    ("import httpx (bare)", ["-c", "import httpx"]),
    (
        "import httpx (its CLI import suppressed)",
        ["-c", "import sys; sys.modules['httpx._main'] = None; import httpx"],
    ),
]


def wall(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True)
    return time.perf_counter() - start


def importtime_us(module: str) -> int:
    """Sum of the cumulative times of the top-level imports `import module` triggers."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
    )
    total = 0
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        if not name.startswith("  "):  # depth 0: not counted inside another import
            total += int(cumulative)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for _, case in CASES:  # warm-up: compile bytecode, fill the page cache
        wall(case)
    medians = {
        name: statistics.median(wall(case) for _ in range(args.runs)) for name, case in CASES
    }
    floor = medians["python -c pass"]
    print(f"{sys.executable} ({sys.version.split()[0]}), medians of {args.runs} runs")
    for name, value in medians.items():
        print(f"  {name:45s} {value * 1000:8.1f} ms   x{value / floor:5.2f} of python -c pass")
    cli_import = statistics.median(
        importtime_us("enlace_agent.cli.search") for _ in range(args.runs)
    )
    print(f"  -X importtime, enlace_agent.cli.search: {cli_import / 1000:.1f} ms (median)")
    saved = medians["import httpx (bare)"] - medians["import httpx (its CLI import suppressed)"]
    print(f"  httpx CLI import suppression saves {saved * 1000:.1f} ms per start here")


if __name__ == "__main__":
    main()
