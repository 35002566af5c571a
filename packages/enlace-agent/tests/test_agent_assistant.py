"""The assistant's tool loop against a scripted OpenAI-compatible server on 127.0.0.1 that plays the
model, with the real search chain asking a local DuckDuckGo Lite fixture page."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from enlace_config.schema.agent import AssistantConfig

from enlace_agent.assistant import (
    Assistant,
    Event,
    ModelNotFound,
    ModelRefused,
    ModelResponseError,
    ModelTimeout,
    ModelUnavailable,
    TextDelta,
    ToolCallFinished,
    ToolCallStarted,
    TurnEnd,
    build_client,
)
from enlace_agent.assistant.prompt import spanish_date, system_prompt
from enlace_agent.assistant.toolcalls import TextCallFilter
from enlace_agent.tools.protocol import ToolResult
from enlace_agent.tools.search import TOOL_NAME, SearchTool

FIXTURES = Path(__file__).parent / "fixtures"
WIKI = "https://es.wikipedia.org/wiki/Tortilla_de_patatas"
TODAY = dt.date(2026, 12, 3)


def make(model_server: Any, search_tool: SearchTool, **overrides: Any) -> Assistant:
    config = AssistantConfig.model_validate({"base_url": model_server.base_url, **overrides})
    return Assistant(
        build_client(config, {}), tools=[search_tool], config=config, today=lambda: TODAY
    )


def run(assistant: Assistant, question: str, history: list[Any] | None = None) -> list[Event]:
    return list(assistant.turn(history or [], question))


def end_of(events: list[Event]) -> TurnEnd:
    last = events[-1]
    assert isinstance(last, TurnEnd)
    return last


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


@pytest.mark.parametrize("stream", [True, False])
def test_answers_directly(model_server: Any, search_tool: SearchTool, stream: bool) -> None:
    model_server.script = [model_server.say("Hola, soy Enlace. ¿En qué te ayudo?")]
    events = run(make(model_server, search_tool, stream=stream), "Hola")
    end = end_of(events)
    assert end.text == "Hola, soy Enlace. ¿En qué te ayudo?"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == end.text
    assert end.sources == () and end.tool_rounds == 0 and end.stopped is None
    body = model_server.bodies[0]
    assert body["stream"] is stream and body["model"] == "enlace-chat"
    assert body["tools"][0]["function"]["name"] == TOOL_NAME
    system = body["messages"][0]
    assert system["role"] == "system" and "jueves, 3 de diciembre de 2026" in system["content"]
    assert body["messages"][1:] == [{"role": "user", "content": "Hola"}]
    assert [m["role"] for m in end.messages] == ["user", "assistant"]  # no system in history


def test_calls_search_then_answers_citing_the_source(
    model_server: Any, search_tool: SearchTool
) -> None:
    model_server.script = [
        model_server.call(TOOL_NAME, {"consulta": "tortilla de patatas", "max_resultados": 3}),
        model_server.say(f"He buscado en internet: la tortilla lleva huevo y patata ({WIKI})."),
    ]
    events = run(make(model_server, search_tool), "¿Qué lleva la tortilla?")
    started = [e for e in events if isinstance(e, ToolCallStarted)]
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert [e.name for e in started] == [TOOL_NAME]
    assert finished[0].ok and finished[0].provider == "duckduckgo"
    assert WIKI in [s.url for s in finished[0].sources]
    end = end_of(events)
    assert [(s.url, s.provider) for s in end.sources] == [(WIKI, "duckduckgo")]
    # the search output reaches the model only as a tool message, never in the system prompt
    second = model_server.bodies[1]
    assert second["messages"][0]["role"] == "system"
    assert "Tortilla" not in second["messages"][0]["content"]
    (tool,) = tool_messages(second)
    assert tool["tool_call_id"] == "c1" and WIKI in tool["content"]
    assert "(fuente: duckduckgo)" in tool["content"]
    assistant_call = second["messages"][-2]
    assert assistant_call["tool_calls"][0]["function"]["name"] == TOOL_NAME
    assert [m["role"] for m in end.messages] == ["user", "assistant", "tool", "assistant"]


def test_tool_call_written_in_the_text_is_run_and_never_shown(
    model_server: Any, search_tool: SearchTool
) -> None:
    block = json.dumps({"name": TOOL_NAME, "arguments": {"consulta": "tortilla"}})
    model_server.script = [
        model_server.say(f"Voy a buscarlo. <tool_call>\n{block}\n</tool_call>", pieces=7),
        model_server.say("Ya está."),
    ]
    events = run(make(model_server, search_tool), "¿Qué lleva la tortilla?")
    shown = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "<tool" not in shown and "consulta" not in shown
    assert shown.startswith("Voy a buscarlo.") and shown.endswith("Ya está.")
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(finished) == 1 and finished[0].ok and finished[0].provider == "duckduckgo"
    assert WIKI in tool_messages(model_server.bodies[1])[0]["content"]
    # no URL named: every consulted page is listed
    assert WIKI in [s.url for s in end_of(events).sources]


@pytest.mark.parametrize(
    ("step", "needle"),
    [
        (lambda m: m.call("borrar_disco", {}), "«borrar_disco» no existe"),
        (lambda m: m.call(TOOL_NAME, {"query": "x"}), "argumentos desconocidos: query"),
        (lambda m: m.call(TOOL_NAME, "{no es json"), "no son JSON válido"),
        (lambda m: m.say("<tool_call>{roto</tool_call>"), "no es JSON válido"),
        (lambda m: m.say('<tool_call>{"arguments": {}}</tool_call>'), "no indica la herramienta"),
        (lambda m: m.say('<tool_call>{"name": "buscar_en_internet"'), "no se cerró"),
    ],
)
def test_bad_calls_go_back_to_the_model_as_errors(
    model_server: Any, search_tool: SearchTool, step: Any, needle: str
) -> None:
    model_server.script = [step(model_server), model_server.say("Perdona, no he podido buscar.")]
    events = run(make(model_server, search_tool), "pregunta")
    finished = [e for e in events if isinstance(e, ToolCallFinished)]
    assert len(finished) == 1 and not finished[0].ok
    assert finished[0].error is not None and needle in finished[0].error
    (tool,) = tool_messages(model_server.bodies[1])
    assert tool["content"].startswith("Error:") and needle in tool["content"]
    assert end_of(events).text == "Perdona, no he podido buscar."
    # The history sent back holds arguments a chat template can parse: llama-server answers
    # HTTP 500 to a past call whose arguments are not a JSON object (the CPU chat model's call
    # cut mid-string ended its turn in an error).
    for message in model_server.bodies[1]["messages"]:
        for call in message.get("tool_calls") or []:
            assert isinstance(json.loads(call["function"]["arguments"]), dict), call


def test_a_client_tool_call_cut_mid_string_is_not_handed_to_the_client(
    model_server: Any, search_tool: SearchTool
) -> None:
    """A call of the client's own tool (the OpenAI endpoint) whose arguments do not parse never
    reaches the client: it goes back to the model as an error, like a call of Enlace's tools."""
    from enlace_agent.assistant.loop import TurnOptions

    lights = {"type": "function", "function": {"name": "encender_luz", "parameters": {}}}
    model_server.script = [
        model_server.call("encender_luz", '{"sala": "cocina'),
        model_server.say("No he podido encenderla."),
    ]
    options = TurnOptions(client_tools=(lights,))
    events = list(make(model_server, search_tool).turn([], "Enciende la luz", options=options))
    end = end_of(events)
    assert end.client_calls == () and end.text == "No he podido encenderla."
    (tool,) = tool_messages(model_server.bodies[1])
    assert tool["content"] == "Error: los argumentos no son JSON válido."


def test_search_in_a_loop_stops_at_the_round_limit(
    model_server: Any, search_tool: SearchTool, http_server: Any
) -> None:
    model_server.script = [
        model_server.call(TOOL_NAME, {"consulta": f"vuelta {i}"}, call_id=f"c{i}") for i in range(5)
    ]
    end = end_of(run(make(model_server, search_tool, max_tool_rounds=2), "bucle"))
    assert end.stopped == "max_tool_rounds" and end.tool_rounds == 2
    assert "límite de herramientas" in end.text
    assert len(http_server.requests) == 2  # two searches ran, the third call did not
    assert len(model_server.bodies) == 3
    assert "tools" in model_server.bodies[1] and "tools" not in model_server.bodies[2]


def test_slow_stream_stops_at_the_time_budget(model_server: Any, search_tool: SearchTool) -> None:
    model_server.script = [model_server.say("x" * 100, pieces=100, delay=0.1)]  # 10 s
    assistant = make(
        model_server, search_tool, time_budget_s=1.0, read_timeout_s=1.0, connect_timeout_s=1.0
    )
    started = time.monotonic()
    events = run(assistant, "lento")
    elapsed = time.monotonic() - started
    end = end_of(events)
    assert end.stopped == "time_budget" and "Se ha acabado el tiempo" in end.text
    assert end.text.startswith("x") and elapsed < 6  # a 1 s budget (slack for a loaded machine)


def test_history_carries_over_between_turns(model_server: Any, search_tool: SearchTool) -> None:
    model_server.script = [model_server.say("Me llamo Enlace."), model_server.say("Sí.")]
    assistant = make(model_server, search_tool)
    first = end_of(run(assistant, "¿Cómo te llamas?"))
    end_of(run(assistant, "¿Seguro?", list(first.messages)))
    roles = [m["role"] for m in model_server.bodies[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


def test_dropped_connection_is_a_clear_error(model_server: Any, search_tool: SearchTool) -> None:
    model_server.script = [model_server.drop()]
    with pytest.raises(ModelResponseError, match="broke before the answer ended"):
        run(make(model_server, search_tool), "hola")


def test_server_errors_are_typed(
    model_server: Any, search_tool: SearchTool, refused_url: str, http_server: Any
) -> None:
    model_server.script = [
        model_server.raw("{esto no es json"),
        model_server.status(404, {"error": {"message": "The model `otro` does not exist."}}),
        model_server.status(401, {"error": {"message": "bad key"}}),
        model_server.sse(["{roto"]),
    ]
    assistant = make(model_server, search_tool, stream=False)
    with pytest.raises(ModelResponseError, match="malformed JSON"):
        run(assistant, "hola")
    with pytest.raises(ModelNotFound) as info:
        run(assistant, "hola")
    assert info.value.served == ("enlace-chat",)
    with pytest.raises(ModelRefused):
        run(assistant, "hola")
    with pytest.raises(ModelResponseError, match="malformed JSON"):
        run(make(model_server, search_tool), "hola")
    down = AssistantConfig(base_url=refused_url)
    with pytest.raises(ModelUnavailable):
        run(Assistant(build_client(down, {}), tools=[], config=down), "hola")
    silent = http_server.silent("/v1/chat/completions", 5)
    slow = AssistantConfig(base_url=silent.removesuffix("/chat/completions"), read_timeout_s=0.3)
    with pytest.raises(ModelTimeout):
        run(Assistant(build_client(slow, {}), tools=[], config=slow), "hola")


def test_no_tools_offered_when_rounds_are_zero(model_server: Any, search_tool: SearchTool) -> None:
    model_server.script = [model_server.say("Sin herramientas.")]
    end_of(run(make(model_server, search_tool, max_tool_rounds=0), "hola"))
    assert "tools" not in model_server.bodies[0]


def test_text_call_filter_holds_back_a_split_tag() -> None:
    f = TextCallFilter()
    shown = [f.feed(p) for p in ["Hola <", "tool_", 'call>{"name": "a"}</tool', "_call> fin <b"]]
    assert "".join(shown) + f.flush() == "Hola  fin <b"
    assert f.blocks == ['{"name": "a"}']
    assert [c.name for c in f.calls("r0")] == ["a"]


def test_spanish_date_and_prompt_override() -> None:
    assert spanish_date(dt.date(2026, 12, 3)) == "jueves, 3 de diciembre de 2026"
    assert spanish_date(dt.date(2027, 3, 7)) == "domingo, 7 de marzo de 2027"
    default = system_prompt(None, TODAY)
    assert "español" in default and "no te lo inventes" in default and "{fecha}" not in default
    assert system_prompt("Hoy: {fecha}. {x}", TODAY) == "Hoy: jueves, 3 de diciembre de 2026. {x}"


def test_silent_server_stops_at_the_time_budget(http_server: Any, search_tool: SearchTool) -> None:
    """A read timeout cut to the time left is the budget running out, not a slow server."""
    url = http_server.silent("/v1/chat/completions", 5).removesuffix("/chat/completions")
    config = AssistantConfig(
        base_url=url, time_budget_s=0.8, read_timeout_s=0.8, connect_timeout_s=0.8
    )
    assistant = Assistant(build_client(config, {}), tools=[search_tool], config=config)
    end = end_of(run(assistant, "hola"))
    assert end.stopped == "time_budget" and end.elapsed_s < 2


class SlowTool:
    """A registered tool that takes longer than the turn's budget."""

    def __init__(self) -> None:
        self.spec = {"type": "function", "function": {"name": "lenta", "parameters": {}}}
        self.runs = 0

    def run(self, arguments: Any) -> ToolResult:
        self.runs += 1
        time.sleep(1.2)
        return ToolResult("hecho")


def test_budget_spent_in_tools_ends_the_turn_with_a_well_formed_history(
    model_server: Any,
) -> None:
    model_server.script = [
        model_server.say(
            '<tool_call>{"name": "lenta"}</tool_call><tool_call>{"name": "lenta"}</tool_call>'
        )
    ]
    config = AssistantConfig(
        base_url=model_server.base_url, time_budget_s=1.0, read_timeout_s=1.0, connect_timeout_s=1.0
    )
    tool = SlowTool()
    assistant = Assistant(build_client(config, {}), tools=[tool], config=config)
    end = end_of(run(assistant, "hola"))
    assert end.stopped == "time_budget" and tool.runs == 1
    calls = end.messages[1]["tool_calls"]
    answers = [m for m in end.messages if m["role"] == "tool"]
    assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]  # every call answered
    assert answers[1]["content"] == "Error: no se ejecutó: se acabó el tiempo."
    assert len(model_server.bodies) == 1  # the model was not asked again


def long_history(turns: int, chars: int = 400) -> list[dict[str, Any]]:
    """A conversation of `turns` questions and answers, each about `chars` characters."""
    history: list[dict[str, Any]] = []
    for i in range(turns):
        history.append({"role": "user", "content": f"Pregunta {i}: " + "palabra " * (chars // 8)})
        history.append(
            {"role": "assistant", "content": f"Respuesta {i}: " + "dato " * (chars // 5)}
        )
    return history


@pytest.mark.parametrize("server_says_its_context", [False, True])
def test_a_long_conversation_is_fitted_to_the_context(
    model_server: Any, search_tool: SearchTool, server_says_its_context: bool
) -> None:
    """30 turns of about 12,000 tokens against a 2,000-token context: the newest turns, the
    system prompt and the question reach the model, the older turns are left out and the turn
    says how many; the history kept for the next turn is whole."""
    if server_says_its_context:  # llama-server's /v1/models: the slot's n_ctx in `meta`
        model_server.server.reply_json(
            "/v1/models", 200, {"data": [{"id": "enlace-chat", "meta": {"n_ctx": 2000}}]}
        )
    model_server.script = [model_server.within_context(2000, model_server.say("Sí."))]
    history = long_history(30)
    end = end_of(run(make(model_server, search_tool), "¿Y la última?", history))
    assert end.text == "Sí." and end.stopped is None
    sent = model_server.bodies[-1]["messages"]
    assert sent[0]["role"] == "system" and sent[-1] == {"role": "user", "content": "¿Y la última?"}
    assert sent[-3:-1] == history[-2:]  # the newest turn
    assert sent[1]["role"] == "user"  # whole turns: never an answer without its question
    kept = (len(sent) - 2) // 2
    assert 0 < kept < 30 and end.left_out == 30 - kept
    assert end.to_dict()["left_out"] == end.left_out
    assert list(end.messages[:-2]) == history  # stored whole: trimming is what is sent
    if server_says_its_context:  # fitted before asking: no refused request
        assert len(model_server.bodies) == 1


def test_calls_that_fill_the_context_end_the_turn_with_a_note(
    model_server: Any, search_tool: SearchTool
) -> None:
    """A model that loops inside its call («… en Zará mañana en Zará …», the CPU chat model) fills
    the context with this turn's own call and result, where no old turn is left to leave out: the
    turn ends with what was said and a note, as at the round limit, not with an error (the
    family's question gets an answer; the web page and the OpenAI endpoint a normal end)."""
    looping = "Qué tiempo hará mañana en Zará mañana en Zará" + " mañana en Zará" * 200
    model_server.script = [
        model_server.call(TOOL_NAME, {"consulta": looping}),
        model_server.within_context(600, model_server.say("Sí.")),
    ]
    end = end_of(run(make(model_server, search_tool), "¿Qué tiempo hará mañana en Zaragoza?"))
    assert end.stopped == "context_full" and end.tool_rounds == 1
    assert "ya no cabe en la memoria de trabajo del modelo" in end.text
    assert [m["role"] for m in end.messages][-3:] == ["assistant", "tool", "assistant"]


def test_a_question_too_long_for_the_context_is_named(
    model_server: Any, search_tool: SearchTool
) -> None:
    from enlace_agent.assistant import ContextExceeded

    model_server.script = [model_server.within_context(300, model_server.say("Sí."))]
    with pytest.raises(ContextExceeded) as caught:
        run(make(model_server, search_tool), "palabra " * 400, long_history(3))
    assert caught.value.context_tokens == 300
    last = model_server.bodies[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"]  # every old turn was left out first
