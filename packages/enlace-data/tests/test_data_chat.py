"""The chat format (rendering, loss mask, validation, tool-call parsing), the built-in set and the
chat loader (packing without cross-attention, overflow, exact resume, validation split)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from enlace_config.schema.data import DataConfig
from enlace_data import DataError
from enlace_data.chat import normalize_conversation, parse_tool_calls, render, render_text
from enlace_data.chat.builtin import SEARCH_TOOL_NAME, builtin_conversations
from enlace_data.loader import build_loader, eval_batches
from enlace_data.tokenizer import ByteTokenizer
from enlace_data.tokenizer.special_tokens import IM_END, IM_START, TOOL_CALL, TOOL_CALL_END

TOK = ByteTokenizer()
TOOLS = [{"type": "function", "function": {"name": "buscar", "parameters": {"type": "object"}}}]


def _conv(**extra: Any) -> dict[str, Any]:
    call = {"type": "function", "function": {"name": "buscar", "arguments": '{"q": "¿año?"}'}}
    return {
        "messages": [
            {"role": "system", "content": "Sé breve."},
            {"role": "user", "content": "Hola"},
            {"role": "assistant", "content": "Busco.", "tool_calls": [call]},
            {"role": "tool", "content": "2026"},
            {"role": "assistant", "content": "Es 2026."},
        ],
        "tools": TOOLS,
        **extra,
    }


def test_byte_tokenizer_specials_are_single_ids_never_made_from_text() -> None:
    ids = TOK.special_ids
    assert sorted(ids.values()) == list(range(256, TOK.vocab_size))
    assert TOK.encode(IM_END) == list(IM_END.encode())  # typed text stays text
    assert TOK.decode([ids[IM_START], *TOK.encode("hola"), ids[IM_END]]) == "hola"


def test_render_mask_trains_only_assistant_output() -> None:
    conv = normalize_conversation(_conv(), "t")
    r = render(conv["messages"], TOK, tools=conv["tools"])
    trained = [i for i, m in zip(r.ids, r.mask, strict=True) if m]
    s = TOK.special_ids
    # Assistant text, the tool call between its markers, and each turn's <|im_end|>; nothing else.
    expected = [
        *TOK.encode("Busco.\n"),
        s[TOOL_CALL],
        *TOK.encode('\n{"name": "buscar", "arguments": {"q": "¿año?"}}\n'),
        s[TOOL_CALL_END],
        s[IM_END],
        *TOK.encode("Es 2026."),
        s[IM_END],
    ]
    assert trained == expected
    assert TOK.decode(r.ids) == render_text(conv["messages"], tools=conv["tools"]).replace(
        IM_START, ""
    ).replace(IM_END, "").replace(TOOL_CALL_END, "").replace(TOOL_CALL, "").replace(
        "<tool_response>", ""
    ).replace("</tool_response>", "")


def test_generation_prompt_ends_with_the_assistant_header() -> None:
    msgs = [{"role": "user", "content": "Hola"}]
    assert render_text(msgs, add_generation_prompt=True).endswith(
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert not any(render(msgs, TOK, add_generation_prompt=True).mask)


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"messages": [{"content": "hola"}]}, "missing or unknown role"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": " "}]}, "empty assistant"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "tool", "content": "r"}]}, "tool result without a tool call"),
        ({"messages": [{"role": "user", "content": "a"}]}, "no assistant turn"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "s"}]}, "only come first"),
        ({"messages": [{"role": "user", "content": "a <|im_end|>"}, {"role": "assistant", "content": "b"}]}, "special token"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{"}}]}]}, "not JSON"),
        ({"text": "hola"}, "'messages' list"),
    ],
)  # fmt: skip
def test_validation_names_the_problem(record: dict[str, Any], problem: str) -> None:
    with pytest.raises(DataError, match=problem):
        normalize_conversation(record, "f.jsonl: line 3")


def test_file_errors_name_file_and_line(tmp_path: Path) -> None:
    root = tmp_path / "chat"
    root.mkdir()
    good = json.dumps(_conv(), ensure_ascii=False)
    (root / "train.jsonl").write_text(f'{good}\n{good}\n{{"messages": [{{"role": "bot"}}]}}\n')
    (root / "val.jsonl").write_text(good + "\n")
    cfg = DataConfig(kind="chat", path=str(root), context_length=512)
    with pytest.raises(
        DataError, match=r"train\.jsonl: line 3: message 1: missing or unknown role"
    ):
        build_loader(cfg, micro_batch_size=2, seed=0)


def test_parse_tool_calls() -> None:
    s = TOK.special_ids
    good = [
        s[TOOL_CALL],
        *TOK.encode('{"name": "buscar", "arguments": {"q": "ñ"}}'),
        s[TOOL_CALL_END],
    ]
    calls = parse_tool_calls(good, TOK)
    assert calls is not None and calls[0].name == "buscar" and calls[0].arguments == {"q": "ñ"}
    assert parse_tool_calls(TOK.encode("sin llamada"), TOK) == []
    assert parse_tool_calls(good[:-1], TOK) is None  # unclosed
    assert (
        parse_tool_calls([s[TOOL_CALL], *TOK.encode('{"name": 1}'), s[TOOL_CALL_END]], TOK) is None
    )


def test_builtin_set_is_valid_varied_and_held_out() -> None:
    train = builtin_conversations("train", 600)
    val = builtin_conversations("val", 200)
    assert builtin_conversations("val", 200) == val  # deterministic
    for c in train + val:
        normalize_conversation(c, "built-in")
    users = lambda cs: {m["content"] for c in cs for m in c["messages"] if m["role"] == "user"}  # noqa: E731
    calls = [c for c in val if any(m.get("tool_calls") for m in c["messages"])]
    assert calls and all(
        m["tool_calls"][0]["function"]["name"] == SEARCH_TOOL_NAME
        for c in calls
        for m in c["messages"]
        if m.get("tool_calls")
    )
    # Search questions and capitals of the val split name held-out cities/countries/teams...
    unseen = users(val) - users(train)
    assert len(unseen) > len(users(val)) // 3


def test_builtin_searches_carry_their_checks_and_held_out_names_never_train() -> None:
    """`expect` names what the evaluation checks: the query's entities are in the question and
    the reference query, the answer's facts in the result and the reference answer; a held-out
    city, team or product appears nowhere in the train split."""
    train = builtin_conversations("train", 4000)
    val = builtin_conversations("val", 400)
    train_text = json.dumps(train, ensure_ascii=False)
    searches = [c for c in val if "expect" in c]
    assert len(searches) > 60
    for c in searches:
        question, call, result, answer = (m for m in c["messages"] if m["role"] != "system")
        query = call["tool_calls"][0]["function"]["arguments"]["consulta"]
        # The query is the question's own words, only its «¿?¡!» and final period dropped: every
        # byte a copy with the same bytes before it (CHAT.md, tenth session).
        words = re.sub(r"[¿?¡!]", "", question["content"])
        assert query in words and len(query) >= len(words) - 2 and not query.endswith(".")
        for entity in c["expect"]["query"]:
            assert entity.lower() in question["content"].lower() and entity in query
            if entity not in DAYS_IN_QUERIES:
                assert entity not in train_text, entity
        for fact in c["expect"]["answer"]:
            assert fact in result["content"] and fact in answer["content"]
        # The answer is the result's line as it stands, cited by the address the result gives.
        lines = result["content"].splitlines()
        address = re.search(r"https://(www\.[^/]+)/", lines[1])
        assert address and answer["content"] == f"{lines[2].strip()} (fuente: {address[1]})"
    assert "Zaragoza" in json.dumps(val, ensure_ascii=False) and "Zaragoza" not in train_text
    assert all(normalize_conversation(c, "x").get("expect") == c.get("expect") for c in val)


DAYS_IN_QUERIES = {"hoy", "mañana", "sábado", "domingo", "lunes", "fin de semana"}


def test_training_names_are_partly_invented_so_only_copying_is_right() -> None:
    """In train, a share of the searched names are made up (never a list's), so that a model
    cannot answer from memory; val keeps the held-out real names, never an invented one."""
    from enlace_data.chat import builtin

    known = {
        *builtin.CITIES,
        *(t for _, t in builtin.TEAMS),
        *(p for _, p in builtin.PRODUCTS),
        *(p for _, p in builtin.PLACES),
        *(n.split(" ", 1)[1] for n in builtin.NEWS),
        *(d for _, d in builtin.DAYS),
    }
    train = [c for c in builtin_conversations("train", 2000) if "expect" in c]
    invented = [e for c in train for e in c["expect"]["query"] if e not in known]
    share = len(invented) / sum(len(c["expect"]["query"]) for c in train)
    assert 0.2 < share < 0.6, share  # ~60 % of the names, days and places never invented
    assert len(set(invented)) > 0.9 * len(invented)  # a new name nearly every time
    val = [c for c in builtin_conversations("val", 400) if "expect" in c]
    assert all(e in known for c in val for e in c["expect"]["query"])


def test_memory_conversations_only_when_the_memory_tools_are_offered() -> None:
    """Given the assistant's memory tools, a share of the conversations remember, forget or use a
    fact, offered every tool with the person's memories in the system prompt; the searches are
    offered the search alone (the assistant's offer when it does not know who speaks). Without
    them, no conversation mentions the memory."""
    from enlace_data.chat.builtin import SEARCH_TOOL

    def spec(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    everything = [SEARCH_TOOL, spec("recordar"), spec("olvidar")]
    convs = builtin_conversations("train", 800, tools=everything)
    memory = [c for c in convs if c.get("tools") == everything]
    assert 0.15 < len(memory) / len(convs) < 0.35
    called = {
        c["function"]["name"]
        for conv in memory
        for m in conv["messages"]
        for c in m.get("tool_calls") or []
    }
    assert called == {"recordar", "olvidar"}
    assert all("Hablas con" in c["messages"][0]["content"] for c in memory)
    uses = [c for c in memory if not any(m.get("tool_calls") for m in c["messages"])]
    assert uses and all(
        c["messages"][-1]["content"].rstrip(".").split()[-1] in c["messages"][0]["content"]
        for c in uses
    )  # the answer's last word (the name, the city, the month...) is in a memory it was given
    others = [c for c in convs if c.get("tools") and c not in memory]
    assert others and all(c["tools"] == [SEARCH_TOOL] for c in others)
    remembers = [c for c in memory if "expect" in c]  # what enlace-train's memory fidelity reads
    assert remembers and all(
        e in c["messages"][2]["tool_calls"][0]["function"]["arguments"]["texto"]
        and c["messages"][2]["tool_calls"][0]["function"]["name"] == "recordar"
        for c in remembers
        for e in c["expect"]["memory"]
    )
    for c in convs:
        assert normalize_conversation(c, "built-in").get("expect") == c.get("expect")
    alone = json.dumps(builtin_conversations("train", 400, tools=[SEARCH_TOOL]), ensure_ascii=False)
    assert "recordar" not in alone and "Hablas con" not in alone


def test_expect_is_validated() -> None:
    with pytest.raises(DataError, match="expect"):
        normalize_conversation(_conv(expect={"query": "Sevilla"}), "f.jsonl: line 1")
    with pytest.raises(DataError, match="expect"):
        normalize_conversation(_conv(expect={"city": ["Sevilla"]}), "f.jsonl: line 1")
    assert normalize_conversation(_conv(expect={"query": ["Sevilla"]}), "x")["expect"] == {
        "query": ["Sevilla"]
    }


def _chat_cfg(tmp_path: Path, n: int, **kw: Any) -> DataConfig:
    root = tmp_path / "chat"
    root.mkdir(exist_ok=True)
    for split, count in (("train", n), ("val", 7)):
        convs = builtin_conversations(split, count, seed=3)
        (root / f"{split}.jsonl").write_text(
            "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in convs)
        )
    return DataConfig(
        kind="chat", path=str(root), context_length=kw.pop("T", 900), eval_batches=2, **kw
    )


def test_packing_keeps_conversations_apart(tmp_path: Path) -> None:
    cfg = _chat_cfg(tmp_path, 40)
    loader = build_loader(cfg, micro_batch_size=3, seed=1)
    starts = TOK.special_ids[IM_START]
    for _ in range(5):
        x, y, seg = next(loader)
        assert x.shape == y.shape == seg.shape == (3, 900)
        for row_x, row_y, row_s in zip(x, y, seg, strict=True):
            for s in np.unique(row_s):
                span = np.flatnonzero(row_s == s)
                assert (np.diff(span) == 1).all()  # contiguous segments
                if (row_y[span] >= 0).any():  # a conversation: starts with <|im_start|>
                    assert row_x[span[0]] == starts
                else:  # padding: never trained on
                    assert (row_x[span] == TOK.eot_id).all()
            assert (row_y[row_y >= 0] < TOK.vocab_size).all()


def test_copied_marks_the_assistants_copies_of_the_questions_and_results_words() -> None:
    """`copied`: the query's words (from the question), the answer's facts (from the result, not
    from a later question), in runs of at least min_tokens; never the call's own JSON, nor words
    that stand only in the system prompt."""
    from enlace_data.chat.format import copied

    call = {"name": "buscar", "arguments": '{"q": "tiempo Zaragoza"}'}
    messages = [
        {"role": "system", "content": "Sé breve y di la temperatura."},
        {"role": "user", "content": "¿Qué tiempo hará en Zaragoza?"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": call}]},
        {"role": "tool", "content": "Zaragoza: máxima de 24 grados."},
        {"role": "assistant", "content": "Máxima de 24 grados; di la temperatura."},
        {"role": "user", "content": "Máxima de 24 grados; 31 grados en Sevilla"},
    ]
    r = render(messages, TOK, tools=TOOLS)

    def runs(min_tokens: int) -> list[str]:
        flags = copied(messages, r, TOK, min_tokens)
        assert all(m for m, f in zip(r.mask, flags, strict=True) if f)  # only trained ids
        found: list[list[int]] = [[]]
        for i, f in zip(r.ids, flags, strict=True):
            if f:
                found[-1].append(i)
            elif found[-1]:
                found.append([])
        return [TOK.decode(ids) for ids in found if ids]

    # «Máxima» with a capital is not the result's «máxima»; «; di la temperatura.» is in the
    # system prompt and in the later question only.
    assert runs(4) == ["tiempo Zaragoza", "áxima de 24 grados"]
    assert runs(9) == [" Zaragoza", "áxima de 24 grados"]  # «tiempo Za» is not the question's
    assert runs(30) == []


def test_copied_weight_weighs_the_copies_in_the_training_rows_only(tmp_path: Path) -> None:
    """data.copied_weight 3: the training loader's rows carry a fourth array, 3 where a target is a
    copy and 1 elsewhere (padding and untrained targets included); the validation rows and a run
    at 1 have none; another weight is another data fingerprint (a resume refuses it)."""
    plain = build_loader(_chat_cfg(tmp_path, 30), micro_batch_size=2, seed=1)
    weighed = build_loader(_chat_cfg(tmp_path, 30, copied_weight=3.0), micro_batch_size=2, seed=1)
    batch, weighted = next(plain), next(weighed)
    assert len(batch) == 3 and len(weighted) == 4
    for a, b in zip(batch, weighted, strict=False):
        np.testing.assert_array_equal(a, b)
    _, y, _, w = weighted
    assert w.dtype == np.float32 and set(np.unique(w)) == {1.0, 3.0}
    assert (y[w == 3.0] >= 0).all()  # only trained targets weigh more
    copies = bytes(int(t) for t in y[w == 3.0] if t < 256).decode("utf-8", "replace")
    assert any(c.isalpha() for c in copies)
    assert 0.02 < (w == 3.0).sum() / (y >= 0).sum() < 0.8
    val = build_loader(
        _chat_cfg(tmp_path, 30, copied_weight=3.0), split="val", micro_batch_size=2, seed=1
    )
    assert len(next(val)) == 3
    with pytest.raises(DataError, match="was"):
        weighed.load_state_dict(plain.state_dict())


def test_overflow_drop_and_truncate_are_counted(tmp_path: Path) -> None:
    drop = build_loader(_chat_cfg(tmp_path, 60, T=300, overflow="drop"), micro_batch_size=2, seed=0)
    cut = build_loader(
        _chat_cfg(tmp_path, 60, T=300, overflow="truncate"), micro_batch_size=2, seed=0
    )
    assert "dropped (overflow=drop)" in drop.description
    assert "truncated" in cut.description
    assert cut.conversations > drop.conversations
    x, _, _ = next(cut)
    assert x.shape == (2, 300)


def test_exact_resume(tmp_path: Path) -> None:
    cfg = _chat_cfg(tmp_path, 30)
    a = build_loader(cfg, micro_batch_size=2, seed=5)
    for _ in range(23):  # past an epoch boundary
        next(a)
    state = json.loads(json.dumps(a.state_dict()))
    expected = [next(a) for _ in range(6)]
    b = build_loader(cfg, micro_batch_size=2, seed=5)
    b.load_state_dict(state)
    for want, got in zip(expected, (next(b) for _ in range(6)), strict=True):
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(w, g)
    other = build_loader(cfg, micro_batch_size=2, seed=6)
    with pytest.raises(DataError, match="seed"):
        other.load_state_dict(state)


def test_state_checks_are_the_token_loaders(tmp_path: Path) -> None:
    """The chat loader resumes under the same checks as the token loader (one StreamLoader)."""
    state = build_loader(_chat_cfg(tmp_path, 30), micro_batch_size=2, seed=5).state_dict()
    longer = build_loader(_chat_cfg(tmp_path, 30, T=901), micro_batch_size=2, seed=5)
    with pytest.raises(DataError, match=r"chat loader .*data\.context_length was 900, now 901"):
        longer.load_state_dict(state)
    with pytest.raises(DataError, match="unknown chat loader state"):
        longer.load_state_dict({"samples_consumed": 3})
    with pytest.raises(ValueError, match="micro_batch_size must be positive"):
        build_loader(_chat_cfg(tmp_path, 30), micro_batch_size=0, seed=5)


def test_ranks_split_the_rows(tmp_path: Path) -> None:
    cfg = _chat_cfg(tmp_path, 30)
    whole = build_loader(cfg, micro_batch_size=4, seed=2)
    parts = [build_loader(cfg, micro_batch_size=2, seed=2, rank=r, world_size=2) for r in (0, 1)]
    for _ in range(3):
        x = next(whole)[0]
        np.testing.assert_array_equal(x, np.concatenate([next(p)[0] for p in parts]))


def test_validation_split_and_eval_batches(tmp_path: Path) -> None:
    cfg = _chat_cfg(tmp_path, 30)
    val = build_loader(cfg, split="val", micro_batch_size=2, seed=0)
    assert val.conversations == 7
    batches = list(val)
    assert batches  # one pass, then StopIteration
    again = eval_batches(cfg, micro_batch_size=2)
    assert len(again) <= cfg.eval_batches
    np.testing.assert_array_equal(again[0][0], eval_batches(cfg, micro_batch_size=2)[0][0])


def test_builtin_fallback(tmp_path: Path) -> None:
    cfg = DataConfig(
        kind="chat",
        path=str(tmp_path / "missing"),
        fallback="builtin",
        context_length=1024,
        builtin_conversations=50,
    )
    loader = build_loader(cfg, micro_batch_size=2, seed=0)
    assert "built-in conversation set" in loader.description
    assert build_loader(cfg, split="val", micro_batch_size=2, seed=0).conversations == 5


def test_chat_command_converts_local_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from enlace_data.cli import main

    src = tmp_path / "src.jsonl"
    good = [json.dumps(c, ensure_ascii=False) for c in builtin_conversations("train", 200)]
    sharegpt = json.dumps(
        {"conversations": [{"from": "human", "value": "Hola"}, {"from": "gpt", "value": "¡Hola!"}]}
    )
    src.write_text("\n".join([*good, sharegpt, '{"messages": []}', "no json"]) + "\n")
    assert main(["chat", str(src), str(tmp_path / "out"), "--val-fraction", "0.1"]) == 0
    out = capsys.readouterr().out
    assert "skipped 2 invalid" in out and "line 203: not JSON" in out
    train = (tmp_path / "out" / "train.jsonl").read_text().splitlines()
    val = (tmp_path / "out" / "val.jsonl").read_text().splitlines()
    assert len(train) + len(val) == 201 and 5 <= len(val) <= 40
    cfg = DataConfig(kind="chat", path=str(tmp_path / "out"), context_length=1024)
    assert build_loader(cfg, micro_batch_size=2, seed=0).conversations == len(train)
    assert main(["chat", str(src), str(tmp_path / "strict"), "--strict"]) == 2
    assert "line 202" in capsys.readouterr().err


def _write_parquet(path: Path, records: list[dict[str, Any]]) -> None:
    """As Hub datasets publish conversations: pyarrow infers one struct type for all messages, so a
    key one message lacks reads back as None in the others (content None beside tool_calls, a
    user turn's tool_calls None), and tool schemas are often stored as a JSON string."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(records), path)


def _as_hub_row(conv: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"messages": conv["messages"]}
    row["tools"] = json.dumps(conv["tools"], ensure_ascii=False) if conv.get("tools") else None
    # a struct column, null where a conversation has nothing to check (as the hub's exports write it)
    row["expect"] = conv.get("expect")
    return row


def test_parquet_conversations_read_like_jsonl(tmp_path: Path) -> None:
    convs = builtin_conversations("train", 60, seed=5)
    assert any(c.get("tools") for c in convs) and any(not c.get("tools") for c in convs)
    val = builtin_conversations("val", 7, seed=5)
    as_jsonl, as_parquet = tmp_path / "jsonl", tmp_path / "parquet"
    for root in (as_jsonl, as_parquet):
        root.mkdir()
    for split, rows in (("train", convs), ("val", val)):
        (as_jsonl / f"{split}.jsonl").write_text(
            "".join(json.dumps(c, ensure_ascii=False) + "\n" for c in rows)
        )
        _write_parquet(as_parquet / f"{split}.parquet", [_as_hub_row(c) for c in rows])

    def batches(root: Path) -> list[Any]:
        cfg = DataConfig(kind="chat", path=str(root), context_length=900)
        loader = build_loader(cfg, micro_batch_size=2, seed=0)
        assert loader.conversations == 60
        return [next(loader) for _ in range(4)]

    for a, b in zip(batches(as_jsonl), batches(as_parquet), strict=True):
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_parquet_errors_name_file_and_row(tmp_path: Path) -> None:
    root = tmp_path / "chat"
    root.mkdir()
    rows = [_as_hub_row(c) for c in builtin_conversations("train", 3, seed=1)]
    rows[1] = {"messages": [{"role": "user", "content": "Hola"}], "tools": None}
    _write_parquet(root / "train.parquet", rows)
    cfg = DataConfig(kind="chat", path=str(root), context_length=512)
    with pytest.raises(DataError, match=r"train\.parquet: row 2: no assistant turn"):
        build_loader(cfg, micro_batch_size=2, seed=0)


def test_chat_command_converts_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from enlace_data.cli import main

    convs = builtin_conversations("train", 120, seed=2)
    src = tmp_path / "hub"
    src.mkdir()
    _write_parquet(src / "part-0.parquet", [_as_hub_row(c) for c in convs[:60]])
    _write_parquet(src / "part-1.parquet", [_as_hub_row(c) for c in convs[60:]])
    assert main(["chat", str(src), str(tmp_path / "out"), "--val-fraction", "0.1"]) == 0
    capsys.readouterr()
    lines = [
        json.loads(line)
        for split in ("train", "val")
        for line in (tmp_path / "out" / f"{split}.jsonl").read_text().splitlines()
    ]
    canonical = [normalize_conversation(c, "test") for c in convs]
    key = lambda c: json.dumps(c, sort_keys=True, ensure_ascii=False)  # noqa: E731
    assert sorted(map(key, lines)) == sorted(map(key, canonical))


def test_builtin_set_offers_the_tool_specs_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`enlace-data chat builtin OUT --tools FILE`: the conversations that offer a tool offer
    exactly FILE's specs (what the assistant sends), and still call the search tool."""
    from enlace_data.cli import main

    spec = {
        "type": "function",
        "function": {
            "name": SEARCH_TOOL_NAME,
            "description": "Busca en internet.",
            "parameters": {"type": "object", "properties": {"consulta": {"type": "string"}}},
        },
    }
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([spec], ensure_ascii=False))
    assert (
        main(
            [
                "chat",
                "builtin",
                str(tmp_path / "out"),
                "--builtin-size",
                "200",
                "--tools",
                str(tools),
            ]
        )
        == 0
    )
    convs = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    offered = [c["tools"] for c in convs if c.get("tools")]
    assert offered and all(t == [spec] for t in offered)
    calls = [m for c in convs for m in c["messages"] if m.get("tool_calls")]
    assert calls and all(m["tool_calls"][0]["function"]["name"] == SEARCH_TOOL_NAME for m in calls)
    capsys.readouterr()
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "otra"}}]))
    assert main(["chat", "builtin", str(tmp_path / "bad"), "--tools", str(tools)]) == 2
    assert "no tool named 'buscar_en_internet'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_household_requests_are_the_request_alone_and_every_household_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--household-requests` (the warm-up of scripts/chat-cpu.sh): each conversation is a request
    to remember, forget or use the shopping list with nothing before it (no system prompt, no
    tool specs), every household call among them, the calls carrying what the full set's carry."""
    from enlace_data.chat.builtin import SEARCH_TOOL
    from enlace_data.cli import main

    def spec(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    tools = tmp_path / "tools.json"
    household = [spec("lista_de_la_compra"), spec("recordar"), spec("olvidar")]
    tools.write_text(json.dumps([SEARCH_TOOL, *household]))
    ask = ["chat", "builtin", str(tmp_path / "out"), "--builtin-size", "400", "--tools", str(tools)]
    assert main([*ask, "--household-requests"]) == 0
    convs = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert len(convs) == 400 and all(c["tools"] == [] for c in convs)
    assert all([m["role"] for m in c["messages"]][:2] == ["user", "assistant"] for c in convs)
    firsts = [c["messages"][1]["tool_calls"][0]["function"] for c in convs]
    called = Counter(
        (f["name"], f["arguments"].get("accion")) for f in firsts
    )  # every household call, `recordar` the most (the hardest to tell from the rest)
    assert set(called) == {
        ("recordar", None), ("olvidar", None), ("lista_de_la_compra", "añadir"),
        ("lista_de_la_compra", "quitar"), ("lista_de_la_compra", "ver"),
    } and called.most_common(1)[0][0] == ("recordar", None)  # fmt: skip
    for c in convs:
        normalize_conversation(c, "household request")
        for entity in c.get("expect", {}).get("memory", []):
            assert entity in c["messages"][1]["tool_calls"][0]["function"]["arguments"]["texto"]
    val = (tmp_path / "out" / "val.jsonl").read_text()
    assert len(val.splitlines()) == 40 and val != (tmp_path / "out" / "train.jsonl").read_text()
    capsys.readouterr()
    assert main([*ask[:5], "--household-requests"]) == 2  # without the assistant's specs
    assert "--household-requests goes with" in capsys.readouterr().err
    tools.write_text(json.dumps([SEARCH_TOOL, spec("recordar")]))
    assert main([*ask, "--household-requests"]) == 2
    assert "['lista_de_la_compra', 'olvidar'], not offered" in capsys.readouterr().err


def test_household_requests_with_searches_hold_short_searches_in_the_sources_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--searches 0.3` (scripts/chat-cpu.sh's warm-up): about 35 % of the requests are searches
    (each draw a search at 0.3; the household draws that ask no request are drawn again), with
    nothing before the question, whose call searches the question's own words and whose
    answer is the result's line; the rest are the household's requests."""
    from enlace_config.contracts import SEARCH_TOOL_NAME
    from enlace_data.chat.builtin import SEARCH_TOOL, search_query
    from enlace_data.cli import main

    def spec(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps([SEARCH_TOOL, *map(spec, ("lista_de_la_compra", "recordar", "olvidar"))])
    )
    ask = ["chat", "builtin", str(tmp_path / "out"), "--builtin-size", "400", "--tools", str(tools)]
    assert main([*ask, "--household-requests", "--searches", "0.3"]) == 0
    convs = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert len(convs) == 400 and all(c["tools"] == [] for c in convs)
    name = SEARCH_TOOL_NAME
    searches = [c for c in convs if c["messages"][1]["tool_calls"][0]["function"]["name"] == name]
    assert 0.3 < len(searches) / len(convs) < 0.4, len(searches)
    for c in searches:
        normalize_conversation(c, "search")
        question, call, result, answer = c["messages"]
        assert [m["role"] for m in c["messages"]] == ["user", "assistant", "tool", "assistant"]
        query = call["tool_calls"][0]["function"]["arguments"]["consulta"]
        assert query == search_query(question["content"])
        line = answer["content"].rsplit(" (fuente: ", 1)[0]
        assert line in result["content"] and all(f in line for f in c["expect"]["answer"])
        assert all(e in query for e in c["expect"]["query"])
    assert len(searches) < len(convs) - 200  # the household's requests are still most of them
    capsys.readouterr()
    assert main([*ask, "--searches", "0.3"]) == 2
    assert "--searches goes with --household-requests" in capsys.readouterr().err
    assert main([*ask, "--household-requests", "--searches", "1.5"]) == 2
    assert "--searches must be a share in [0, 1)" in capsys.readouterr().err


def test_household_requests_with_plain_questions_hold_questions_answered_without_a_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--plain 0.2` (scripts/chat-cpu.sh's warm-up): a fifth of the draws are questions answered
    without a tool (greetings, general knowledge, sums, the house): a warm-up of calls alone
    taught the model that every question calls one (spurious calls, benchmarks/CHAT.md twelfth
    session). Without the option the set is the one of before, conversation for conversation."""
    from enlace_data.chat.builtin import SEARCH_TOOL
    from enlace_data.chat.household_requests import household_requests
    from enlace_data.cli import main

    def spec(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    offered = [SEARCH_TOOL, *map(spec, ("lista_de_la_compra", "recordar", "olvidar"))]
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(offered))
    ask = ["chat", "builtin", str(tmp_path / "out"), "--builtin-size", "500", "--tools", str(tools)]
    assert main([*ask, "--household-requests", "--searches", "0.3", "--plain", "0.2"]) == 0
    convs = [json.loads(x) for x in (tmp_path / "out" / "train.jsonl").read_text().splitlines()]
    assert len(convs) == 500 and all(c["tools"] == [] for c in convs)
    plain = [c for c in convs if not any(m.get("tool_calls") for m in c["messages"])]
    assert 0.18 < len(plain) / len(convs) < 0.3, len(plain)
    for c in plain:
        normalize_conversation(c, "plain question")
        roles = [m["role"] for m in c["messages"]]
        assert roles[0] == "user" and set(roles) == {"user", "assistant"}, roles
    said = {c["messages"][0]["content"] for c in plain}
    assert any("capital" in q for q in said) and any(" más " in q or " por " in q for q in said)
    calls = [c for c in convs if c not in plain]
    names = {c["messages"][1]["tool_calls"][0]["function"]["name"] for c in calls}
    assert names == {"buscar_en_internet", "lista_de_la_compra", "recordar", "olvidar"}
    for split in ("train", "val"):  # 0: the set of before, conversation for conversation
        before = household_requests(split, 200, tools=offered, searches=0.3)
        assert household_requests(split, 200, tools=offered, searches=0.3, plain=0.0) == before
    capsys.readouterr()
    assert main([*ask, "--plain", "0.2"]) == 2
    assert "--plain goes with --household-requests" in capsys.readouterr().err
    for bad in (["--plain", "1"], ["--plain", "-0.1"]):
        assert main([*ask, "--household-requests", *bad]) == 2
        assert "--plain must be a share in [0, 1)" in capsys.readouterr().err, bad
    with pytest.raises(DataError, match="--plain must be a share"):  # the CLI's own check
        household_requests("train", 10, tools=offered, plain=1.0)
    # The searches' chance is drawn when the plain one fails: 0.6 and 0.5 still leave a fifth of
    # the draws to the household's requests.
    mixed = household_requests("train", 400, tools=offered, searches=0.5, plain=0.6)
    first_calls = [next((m["tool_calls"] for m in c["messages"] if m.get("tool_calls")), None)
                   for c in mixed]  # fmt: skip
    requests = [t for t in first_calls if t and t[0]["function"]["name"] != "buscar_en_internet"]
    assert 0.12 < len(requests) / len(mixed) < 0.28, len(requests)


def test_about_half_of_the_orders_come_without_their_final_period() -> None:
    """People type and voice assistants transcribe «Añade leche a la lista de la compra» without
    the period: a model that only saw «…compra.» answered it as a question. Every kind of set
    (the full one, the household requests; train and val) holds both forms, and dropping the
    period changes nothing else of the conversation a seed gives."""
    from enlace_data.chat import builtin
    from enlace_data.chat.builtin import SEARCH_TOOL
    from enlace_data.chat.household_requests import household_requests

    def spec(name: str) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "parameters": {}}}

    tools = [SEARCH_TOOL, spec("lista_de_la_compra"), spec("recordar"), spec("olvidar")]
    for split in ("train", "val"):
        for convs in (
            builtin_conversations(split, 800, tools=tools),
            household_requests(split, 400, tools=tools),
        ):
            said = [m["content"] for c in convs for m in c["messages"] if m["role"] == "user"]
            orders = [t for t in said if not t.endswith("?")]
            bare = sum(not t.endswith(".") for t in orders)
            assert 0.35 < bare / len(orders) < 0.65, (split, bare, len(orders))
    original = builtin.UNPUNCTUATED_SHARE
    try:
        builtin.UNPUNCTUATED_SHARE = 0.0
        punctuated = household_requests("train", 200, tools=tools)
    finally:
        builtin.UNPUNCTUATED_SHARE = original
    typed = household_requests("train", 200, tools=tools)
    for a, b in zip(punctuated, typed, strict=True):
        for m, n in zip(a["messages"], b["messages"], strict=True):
            assert m["content"] == n["content"] or m["content"] == n["content"] + "."
