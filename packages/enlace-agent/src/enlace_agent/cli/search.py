"""`enlace-search`: search the web from the terminal, in Spanish. Exit codes: 0 an answer (zero
results included), 1 every provider failed, 2 bad usage or configuration. Only the standard library
is imported before the arguments are parsed, so `--help` and usage errors are instant."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from enlace_agent.search.models import SearchResponse

from enlace_agent.cli.common import (
    DEBUG_HELP,
    EXIT_FAILED,
    EXIT_OK,
    Parser,
    examples,
    fail,
    run_guarded,
)
from enlace_agent.keys import SEARCH_KEYS

KEY_ENV = SEARCH_KEYS["brave"]  # the fallback's, named in --help

log = logging.getLogger("enlace_agent.search")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-search",
        description="Busca en internet: primero DuckDuckGo, y Brave Search si DuckDuckGo falla.",
        epilog=(
            "Códigos de salida: 0 respuesta (también sin resultados), 1 fallaron todos los "
            "proveedores, 2 uso o configuración incorrectos. La clave de Brave se lee de "
            f"{KEY_ENV} (entorno, --env-file o $XDG_CONFIG_HOME/enlace/.env).\n\n"
            + examples(
                "enlace-search tiempo en Zaragoza mañana",
                "enlace-search --json --providers duckduckgo receta de tortilla",
            )
        ),
    )
    parser.add_argument("query", nargs="+", help="lo que quieres buscar")
    parser.add_argument("--json", action="store_true", help="salida JSON (forma estable)")
    parser.add_argument(
        "--max-results", type=int, metavar="N", help="número de resultados (1-20; por defecto 10)"
    )
    parser.add_argument("--region", metavar="REGION", help="región, p. ej. es-es, mx-es, us-en")
    parser.add_argument(
        "--providers",
        metavar="LISTA",
        help="proveedores en orden, separados por comas (p. ej. duckduckgo o duckduckgo,brave)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="RUTA",
        help="fichero YAML de búsqueda (por defecto $XDG_CONFIG_HOME/enlace/search.yaml)",
    )
    parser.add_argument(
        "--env-file",
        type=Path,
        metavar="RUTA",
        help="fichero .env con las claves (por defecto $XDG_CONFIG_HOME/enlace/.env)",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    return parser


ONLY_DUCKDUCKGO_FLAG = "añade --providers duckduckgo a la orden"


def missing_key_message(
    provider: str, env_var: str, env: Mapping[str, str], only_duckduckgo: str
) -> str:
    """Both ways out, as the command that says it accepts them (tests follow each as written):
    the key (in the environment, the .env file the command reads, or --env-file), or a search
    with DuckDuckGo alone (`only_duckduckgo`: this flag, or `only_duckduckgo_in(FILE)`)."""
    from enlace_agent.settings import settings_file

    return (
        f"la búsqueda está configurada para usar {provider} como respaldo, pero la variable de "
        f"entorno {env_var} no está definida. Soluciones: define {env_var} con tu clave de Brave "
        f"Search (en el entorno, en el fichero {settings_file('.env', None, env)} o en un "
        f"fichero indicado con --env-file RUTA), o busca solo con DuckDuckGo: {only_duckduckgo}."
    )


def only_duckduckgo_in(search_file: Path) -> str:
    """The way to DuckDuckGo alone for a command that reads its providers from `search_file`."""
    if search_file.is_file():
        return f"en {search_file}, cambia «providers» a «[duckduckgo]»"
    return f"crea {search_file} con la línea «providers: [duckduckgo]»"


def render_text(response: SearchResponse) -> str:
    lines = [] if response.results else ["Sin resultados para esta búsqueda.", ""]
    for r in response.results:
        lines.append(f"{r.rank}. {r.title}")
        lines.append(f"   {r.url}")
        if r.snippet:
            lines.append(f"   {r.snippet}")
        lines.append("")
    source = f"fuente: {response.provider}"
    if response.skipped:
        omitted = "; ".join(
            f"{s.provider} omitido: {s.error.describe_es()}" for s in response.skipped
        )
        source += f" ({omitted})"
    lines.append(source)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    return run_guarded("enlace-search", build_parser().parse_args(argv), _run)


def _explain_options(keys: tuple[str, ...], args: argparse.Namespace) -> str:
    """The schema refused these flags' values: say so in Spanish, with the schema's own limits."""
    from typing import get_args

    from enlace_config.schema.agent import ProviderName, SearchConfig

    limits = SearchConfig.model_json_schema()["properties"]["max_results"]
    explain = {
        "max_results": f"--max-results debe estar entre {limits['minimum']} y "
        f"{limits['maximum']} (recibido: {args.max_results}).",
        "region": "--region debe tener la forma país-idioma en minúsculas, p. ej. es-es, mx-es o "
        f"us-en (recibido: {args.region!r}).",
        "providers": "--providers espera una lista separada por comas de "
        f"{' y/o '.join(get_args(ProviderName))}, sin repetir (recibido: {args.providers!r}).",
    }
    return "\n".join(explain[key] for key in keys if key in explain)


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    query = " ".join(" ".join(args.query).split())
    started = time.monotonic()
    from enlace_agent.search.chain import SearchChain
    from enlace_agent.search.errors import AllProvidersFailed, MissingCredential, QueryError
    from enlace_agent.search.models import SkippedProvider, redact
    from enlace_agent.search.settings import load_config, load_env, parse_providers
    from enlace_agent.settings import InvalidOptions, SettingsError

    log.debug("libraries loaded in %.3f s", time.monotonic() - started)
    try:
        env = load_env(args.env_file)
        if key := env.get(KEY_ENV, "").strip():
            secrets.append(key)
        overrides: dict[str, Any] = {
            "region": args.region,
            "max_results": args.max_results,
            "providers": parse_providers(args.providers) if args.providers is not None else None,
        }
        config = load_config(args.config, overrides=overrides)
        try:
            chain = SearchChain(config, env=env)
        except MissingCredential as exc:
            return fail(missing_key_message(exc.provider, exc.env_var, env, ONLY_DUCKDUCKGO_FLAG))
    except InvalidOptions as exc:
        return fail(_explain_options(exc.keys, args))
    except SettingsError as exc:
        return fail(f"configuración de búsqueda no válida.\n{redact(str(exc), secrets)}")
    search_started = time.monotonic()
    try:
        response = chain.search(query)
    except QueryError as exc:
        if exc.limit is None:
            return fail("la consulta está vacía.")
        return fail(
            f"la consulta tiene {exc.length} caracteres y el máximo es {exc.limit}; "
            "acórtala (no se recorta automáticamente)."
        )
    except AllProvidersFailed as exc:
        if args.json:
            _write_json(
                {
                    "query": query,
                    "provider": None,
                    "results": [],
                    "skipped": [SkippedProvider(e.provider, e).to_dict() for e in exc.errors],
                    "elapsed_s": round(time.monotonic() - search_started, 3),
                },
                secrets,
            )
        causes = "\n".join(f"  - {e.provider}: {e.describe_es()}" for e in exc.errors)
        return fail(
            "ningún proveedor de búsqueda respondió:\n"
            f"{causes}\nInténtalo de nuevo más tarde; con --debug verás los detalles.",
            EXIT_FAILED,
        )
    if args.json:
        _write_json(response.to_dict(), secrets)
    else:
        sys.stdout.write(redact(render_text(response), secrets) + "\n")
    return EXIT_OK


def _write_json(data: dict[str, Any], secrets: list[str]) -> None:
    from enlace_agent.search.models import redact

    sys.stdout.write(redact(json.dumps(data, ensure_ascii=False, indent=2), secrets) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
