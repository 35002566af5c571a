"""`enlace-assistant`: chat with the family assistant from the terminal, in Spanish (README,
«El asistente»). Exit codes: 0 answered, 1 the model server failed, 2 bad usage or configuration.
Only the standard library is imported before the arguments are parsed."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from enlace_agent.cli.common import EXIT_FAILED, EXIT_OK, Parser, examples, fail, run_guarded
from enlace_agent.cli.options import add_assistant_options, setup_assistant

if TYPE_CHECKING:
    from enlace_agent.assistant import Assistant, ModelError
    from enlace_agent.memory import MemoryView
    from enlace_agent.tools.protocol import Proposal


@dataclass(frozen=True)
class Verb:
    """A command of `enlace-assistant` besides the chat: the module under `enlace_agent.cli` that
    runs it (imported only when named: the chat's own `--help` loads none of them; none of them
    imports this module) and its line of `--help`. A `group` module is a command of commands
    (`snapshot create`) and gets what follows its name; the others parse the name themselves."""

    module: str
    help: str
    group: bool = False


# Every command, in the order `--help` lists them.
COMMANDS: dict[str, Verb] = {
    "serve": Verb("web", "sirve la página web de la familia"),
    "export-history": Verb("web", "el historial de una persona en JSON"),
    "delete-history": Verb("web", "borra el historial de una persona (no la lista de la compra)"),
    "end-sessions": Verb("web", "cierra las sesiones de una persona en la página"),
    "memory": Verb(
        "memory", "lo que Enlace recuerda: list, add, forget, export, import, pause, resume", True
    ),
    "lista": Verb("shopping", "la lista de la compra: ver, añadir, quitar, tachar, limpiar", True),
    "snapshot": Verb("snapshot", "copias de seguridad: create, list, verify, restore", True),
    "doctor": Verb("home", "comprueba el servidor doméstico"),
    "service": Verb("home", "los servicios del servidor doméstico: install, remove, status"),
    "model": Verb("home", "las versiones del modelo: install, list, use, rollback"),
    "token": Verb(
        "tokens", "las claves de la API compatible con OpenAI: create, list, revoke", True
    ),
    "mcp": Verb("household_mcp", "la memoria y la lista de la compra por MCP (stdio o HTTP)", True),
}
QUIT = {"salir", "adiós", "adios", "exit", "quit"}
# How to start a model server, in the hint for "nothing answers" (--jinja: the Enlace models' tool
# calls need the chat template; the port is the default base_url's).
START_SERVER = "llama-server -m modelo.gguf --jinja --port 8080"


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="enlace-assistant",
        description="Habla con el asistente familiar Enlace; busca en internet cuando hace falta "
        "y dice de dónde saca cada dato.",
        epilog="Códigos de salida: 0 respuesta, 1 falló el servidor del modelo, 2 uso o "
        "configuración incorrectos.\n\nÓrdenes (enlace-assistant ORDEN --help para sus "
        "opciones):\n"
        + "".join(f"  {name:<15} {verb.help}\n" for name, verb in COMMANDS.items())
        + "\nLa configuración se lee de --config o de "
        "$XDG_CONFIG_HOME/enlace/assistant.yaml; la clave del servidor (si la pide), de la "
        "variable que nombra api_key_env (ENLACE_MODEL_API_KEY por defecto).\n\n"
        + examples(
            "enlace-assistant",
            "enlace-assistant --once '¿Qué tiempo hará mañana en Zaragoza?'",
            "enlace-assistant serve",
        ),
    )
    parser.add_argument("--once", metavar="PREGUNTA", help="hace una sola pregunta y termina")
    parser.add_argument(
        "--json", action="store_true", help="salida JSON: respuesta, llamadas y proveedores"
    )
    parser.add_argument(
        "--tools-json",
        action="store_true",
        help="escribe las herramientas que se ofrecen al modelo (JSON, formato OpenAI) y termina; "
        "`enlace-data chat builtin DIR --tools FICHERO` entrena con ellas",
    )
    parser.add_argument(
        "--person",
        metavar="NOMBRE",
        help="habla como esa persona: Enlace usa sus recuerdos y los de la familia (los de la "
        "página) y puede recordar y olvidar",
    )
    add_assistant_options(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if args and (verb := COMMANDS.get(args[0])) is not None:
        module = importlib.import_module(f"enlace_agent.cli.{verb.module}")
        return module.main(args[1:] if verb.group else args)
    return run_guarded("enlace-assistant", build_parser().parse_args(argv), _run)


def _run(args: argparse.Namespace, secrets: list[str]) -> int:
    if args.once is not None and not args.once.strip():
        return fail("la pregunta está vacía.")
    if args.tools_json:
        return _print_tools(args)
    built = setup_assistant(args, secrets)
    if isinstance(built, str):
        return fail(built)
    assistant, env = built
    memory = None
    if args.person is not None:
        from enlace_agent.cli.memory import open_memories, unknown_person

        if (problem := unknown_person(assistant.config, args.person)) is not None:
            return fail(problem)
        memories = open_memories(assistant.config, env, secrets)
        if isinstance(memories, str):
            return fail(memories)
        from enlace_agent.memory import MemoryView

        memory = MemoryView(memories, args.person, source="cli")
    if args.once is not None:
        return _ask(assistant, [], args.once, args.json, secrets, memory)[0]
    sys.stderr.write(
        "Enlace, el asistente familiar. Escribe tu pregunta («salir» para terminar).\n"
    )
    history: list[dict[str, Any]] = []
    while True:
        sys.stderr.write("\nTú: ")  # prompts on stderr: stdout holds only the answers
        sys.stderr.flush()
        try:
            question = input().strip()
        except EOFError:
            return EXIT_OK
        if question.lower() in QUIT:
            return EXIT_OK
        if question:
            history = _ask(assistant, history, question, args.json, secrets, memory)[1]


def _print_tools(args: argparse.Namespace) -> int:
    """The specs every request offers, without a model server or a search key."""
    from enlace_agent.assistant import load_config
    from enlace_agent.settings import SettingsError
    from enlace_agent.tools import offered_specs

    try:
        config = load_config(args.config, overrides={"max_tool_rounds": args.max_tool_rounds})
    except SettingsError as exc:
        return fail(f"configuración no válida.\n{exc}")
    # Compact: every byte of it is in the model's context.
    specs = json.dumps(offered_specs(config), ensure_ascii=False, separators=(",", ":"))
    sys.stdout.write(specs + "\n")
    return EXIT_OK


def _ask(
    assistant: Assistant,
    history: list[dict[str, Any]],
    question: str,
    as_json: bool,
    secrets: list[str],
    memory: MemoryView | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """One turn, printed (text as it comes, or one JSON object at the end); returns the exit code
    and the history for the next turn."""
    from enlace_agent.assistant import (
        ModelError,
        TextDelta,
        ToolCallFinished,
        ToolCallStarted,
        TurnEnd,
    )
    from enlace_agent.shared import redact
    from enlace_agent.tools.protocol import preview

    def write(text: str) -> None:
        sys.stdout.write(redact(text, secrets))
        sys.stdout.flush()

    calls: dict[str, dict[str, Any]] = {}
    proposals: list[Proposal] = []  # asked of the person once the answer is written
    prefix = "Enlace: "
    try:
        for event in assistant.turn(history, question, memory=memory):
            data = {k: v for k, v in event.to_dict().items() if k != "type"}
            if isinstance(event, ToolCallStarted):
                calls[event.id] = data
                if not as_json:
                    sys.stderr.write(f"(usando {preview(f'{event.name} {event.arguments}')})\n")
            elif isinstance(event, ToolCallFinished):
                kept = ("ok", "provider", "sources", "error", "proposal")
                calls[event.id].update({k: data[k] for k in kept})
                if event.notice and not as_json:
                    sys.stderr.write(f"({event.notice})\n")
                if event.proposal is not None:
                    proposals.append(event.proposal)
            elif isinstance(event, TextDelta) and not as_json:
                write(prefix + event.text)
                prefix = ""
            elif isinstance(event, TurnEnd):
                if as_json:
                    answer = data.pop("text")
                    data = {
                        "question": question,
                        "answer": answer,
                        "tool_calls": [*calls.values()],
                        **data,
                    }
                    write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
                else:
                    sources = [
                        f"  {i}. {s.title} — {s.url} (vía {s.provider})\n"
                        for i, s in enumerate(event.sources, 1)
                    ]
                    used = "".join(f"  · {m.text}\n" for m in event.memories)
                    write("\n" + ("\nFuentes:\n" + "".join(sources) if sources else ""))
                    write("\nRecordé:\n" + used if used else "")
                    if data["left_out_notice"]:
                        sys.stderr.write(f"({data['left_out_notice']})\n")
                    if memory is not None:
                        _put_to_the_person(proposals, memory)
                if event.stopped in CUT_SHORT:  # an answer, but not a whole one: exit 1, and why
                    fail(redact(_explain_cut(event.stopped, assistant), secrets), EXIT_FAILED)
                    return EXIT_FAILED, list(event.messages)
                return EXIT_OK, list(event.messages)
    except ModelError as exc:
        fail(_explain_model_error(exc, assistant, secrets), EXIT_FAILED)
    return EXIT_FAILED, history


CUT_SHORT = ("time_budget", "max_answer_chars")
YES = {"s", "si", "sí", "y", "yes"}


def _put_to_the_person(proposals: Sequence[Proposal], memory: MemoryView) -> None:
    """Asks the person about each thing the model did not do on its own word («¿Lo recuerdo?
    «…» (s/n)»); only a yes does it. No answer (the end of the input) is a no."""
    from enlace_agent.tools.memory import accept
    from enlace_agent.tools.protocol import preview

    for proposal in proposals:
        sys.stderr.write(f"{proposal.question} «{preview(proposal.text)}» (s/n): ")
        sys.stderr.flush()
        try:
            said = input().strip().casefold()
        except EOFError:
            said = ""
            sys.stderr.write("\n")
        sys.stderr.write(f"({accept(memory, proposal, said in YES)})\n")


def _explain_cut(stopped: str, assistant: Assistant) -> str:
    """Why a turn ended before its answer did (`TurnEnd.stopped` in CUT_SHORT), and the fix."""
    config = assistant.config
    if stopped == "time_budget":
        return (
            f"el servidor de modelos en {config.base_url} no respondió dentro del tiempo máximo "
            f"de la pregunta ({config.time_budget_s:g} s, búsquedas incluidas). Si el modelo es "
            "lento, sube time_budget_s en assistant.yaml o usa --time-budget SEGUNDOS."
        )
    return (
        f"el servidor de modelos en {config.base_url} envió una respuesta de más de "
        f"{config.max_answer_chars} caracteres (o {config.max_response_bytes} bytes) y se cortó: "
        "un modelo que no para de escribir (revisa el modelo y su plantilla de chat). Si "
        "respuestas tan largas son normales, sube max_answer_chars (o max_response_bytes) en "
        "assistant.yaml."
    )


def _explain_model_error(exc: ModelError, assistant: Assistant, secrets: list[str]) -> str:
    from enlace_agent.assistant import (
        ContextExceeded,
        ModelLoading,
        ModelNotFound,
        ModelRefused,
        ModelServerFailed,
        ModelTimeout,
        ModelUnavailable,
        StreamCut,
    )
    from enlace_agent.shared import redact

    config = assistant.config
    if isinstance(exc, ModelLoading):
        why = (
            f"el servidor de modelos en {config.base_url} está cargando el modelo (o no puede "
            "atender ahora): vuelve a preguntar dentro de un minuto."
        )
    elif isinstance(exc, ModelUnavailable):
        why = (
            f"no hay ningún servidor de modelos respondiendo en {config.base_url}. Arráncalo "
            f"(por ejemplo {START_SERVER}) o corrige base_url en assistant.yaml (o --base-url)."
        )
    elif isinstance(exc, ModelNotFound):
        served = ", ".join(exc.served) or "el servidor no lo dice"
        why = (
            f"el servidor no sirve el modelo «{config.model}» (sirve: {served}). Corrige model "
            "en assistant.yaml o usa --model NOMBRE."
        )
    elif isinstance(exc, ModelRefused):
        why = (
            f"el servidor de modelos rechazó la petición (clave incorrecta o ausente). Define "
            f"{config.api_key_env} con la clave correcta."
        )
    elif isinstance(exc, ModelTimeout):
        why = (
            f"el servidor de modelos en {config.base_url} no respondió a tiempo. Inténtalo de "
            "nuevo, o sube read_timeout_s en assistant.yaml si el modelo es lento."
        )
    elif isinstance(exc, ContextExceeded):
        size = f" ({exc.context_tokens} tokens)" if exc.context_tokens else ""
        why = (
            f"la pregunta no cabe en el contexto del modelo{size}, ni dejando fuera lo más "
            "antiguo de la conversación: el prompt, los recuerdos y la pregunta ya lo llenan. "
            "Acorta la pregunta o empieza una conversación nueva; para darle más contexto, sube "
            "web.home.context_size en assistant.yaml (el --ctx-size de llama-server, repartido "
            "entre web.home.parallel conversaciones) y vuelve a ejecutar «enlace-assistant "
            "service install»."
        )
    elif isinstance(exc, ModelServerFailed):
        why = (
            f"el servidor de modelos falló al responder (HTTP {exc.status}: sin memoria o un "
            "fallo interno). Mira su registro («journalctl --user -u enlace-model» o la salida "
            "de llama-server) y vuelve a preguntar; si se repite, reinícialo («systemctl --user "
            "restart enlace-model»)."
        )
    elif isinstance(exc, StreamCut):
        why = (
            "la conexión con el servidor de modelos se cortó a mitad de la respuesta (¿se "
            "reinició o se quedó sin memoria?): vuelve a preguntar; si se repite, mira su "
            "registro («journalctl --user -u enlace-model»)."
        )
    else:
        why = (
            f"el servidor de modelos en {config.base_url} respondió algo que no se entiende: "
            "comprueba que base_url apunta a un servidor compatible con OpenAI (llama-server, "
            "Ollama /v1, vLLM)."
        )
    # The server's own words are English (and may quote a model's output): the log's, not here.
    logging.getLogger("enlace_agent.assistant").debug("model server error: %s", exc)
    return redact(f"{why} (Con --debug se ve el detalle técnico.)", secrets)


if __name__ == "__main__":
    raise SystemExit(main())
