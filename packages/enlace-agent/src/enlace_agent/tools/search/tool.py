"""The search as a tool for a language model: a JSON-schema function spec and a runner that returns
compact Spanish text (errors included, so the model can tell the family what happened)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from enlace_agent.tools.search.chain import SearchChain
from enlace_agent.tools.search.errors import AllProvidersFailed, QueryError
from enlace_agent.tools.search.models import SearchResponse, as_object
from enlace_agent.tools.search.settings import load_config, load_env

TOOL_NAME = "buscar_en_internet"
MAX_TOOL_RESULTS = 10

SEARCH_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": (
            "Busca en internet y devuelve los resultados más relevantes (título, dirección y un "
            "fragmento de cada página). Úsala para hechos recientes, noticias, horarios, precios "
            "o cualquier dato que no sepas con seguridad. Escribe la consulta como la escribiría "
            "una persona en un buscador, en español salvo que el tema pida otro idioma."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "consulta": {
                    "type": "string",
                    "description": "Lo que hay que buscar, en pocas palabras.",
                    "minLength": 1,
                    "maxLength": 400,
                },
                "max_resultados": {
                    "type": "integer",
                    "description": "Cuántos resultados devolver (por defecto 5).",
                    "minimum": 1,
                    "maximum": MAX_TOOL_RESULTS,
                    "default": 5,
                },
            },
            "required": ["consulta"],
            "additionalProperties": False,
        },
    },
}


def default_chain() -> SearchChain:
    """The chain a user gets: their config file (or the defaults) and their env file's key."""
    return SearchChain(load_config(), env=load_env())


def format_for_model(response: SearchResponse, *, max_snippet_chars: int = 300) -> str:
    """Compact text: one block per result, then where it came from."""
    if not response.results:
        lines = [f"Sin resultados para «{response.query}»."]
    else:
        lines = [f"Resultados para «{response.query}»:"]
        for r in response.results:
            snippet = r.snippet
            if len(snippet) > max_snippet_chars:
                snippet = snippet[: max_snippet_chars - 1].rstrip() + "…"
            lines.append(f"[{r.rank}] {r.title} — {r.url}")
            if snippet:
                lines.append(f"    {snippet}")
    lines.append(f"(fuente: {response.provider})")
    return "\n".join(lines)


def run_search_tool(arguments: Mapping[str, Any] | str, *, chain: SearchChain | None = None) -> str:
    """Run a tool call (`arguments` as a mapping or the JSON string a model emits) and return the
    text for the model. Bad arguments and failed searches come back as text starting 'Error:'."""
    if isinstance(arguments, str):
        try:
            parsed = as_object(json.loads(arguments))
        except ValueError:
            return "Error: los argumentos no son JSON válido."
        if parsed is None:
            return "Error: los argumentos deben ser un objeto JSON."
        args: Mapping[str, Any] = parsed
    else:
        args = arguments
    unknown = sorted(set(args) - {"consulta", "max_resultados"})
    if unknown:
        return f"Error: argumentos desconocidos: {', '.join(unknown)}."
    query = args.get("consulta")
    if not isinstance(query, str) or not query.strip():
        return "Error: falta «consulta» (texto a buscar)."
    count = args.get("max_resultados", 5)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_TOOL_RESULTS:
        return f"Error: «max_resultados» debe ser un entero entre 1 y {MAX_TOOL_RESULTS}."
    engine = chain if chain is not None else default_chain()
    if len(" ".join(query.split())) > engine.max_query_chars:
        return (
            f"Error: la consulta es demasiado larga (máximo {engine.max_query_chars} caracteres)."
        )
    try:
        response = engine.search(query, max_results=count)
    except QueryError as exc:
        return f"Error: consulta no válida ({exc})."
    except AllProvidersFailed as exc:
        causes = "; ".join(f"{e.provider}: {e.describe_es()}" for e in exc.errors)
        return f"Error: la búsqueda falló en todos los proveedores ({causes})."
    return format_for_model(response)
