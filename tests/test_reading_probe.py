"""benchmarks/reading_probe.py: its requests differ only in their words, and its tally tells a
model that reads them from one that answers every prompt with the usual call (issues 35, 36)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from enlace_data.chat import ToolCall
from enlace_data.chat.builtin import SEARCH_TOOL

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from handmade_heads import induction  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "reading_probe", REPO / "benchmarks" / "reading_probe.py"
)
assert spec and spec.loader
reading_probe = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reading_probe)

TOOLS = [
    SEARCH_TOOL,
    *({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
      for n in ("lista_de_la_compra", "recordar", "olvidar")),
]  # fmt: skip


def _data(tmp_path: Path) -> list[dict]:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    reading_probe.write_data(tmp_path / "probe", tools, 300, 90)
    return [json.loads(line) for line in (tmp_path / "probe" / "val.jsonl").open()]


def test_the_requests_are_the_three_actions_told_apart_by_their_words_only(tmp_path: Path) -> None:
    convs = _data(tmp_path)
    actions = Counter(reading_probe.action_of(c, None)[0] for c in convs)
    assert set(actions) == set(reading_probe.ACTIONS) and min(actions.values()) >= 10, actions
    for c in convs:  # what comes before the request: the system prompt and every tool, no more
        roles = [m["role"] for m in c["messages"]]
        assert roles[:3] == ["system", "user", "assistant"] and len(c["tools"]) == 4


def test_the_tally_tells_a_model_that_reads_from_one_that_does_not(tmp_path: Path) -> None:
    convs = _data(tmp_path)

    def call(action: str) -> list[ToolCall]:
        return [ToolCall("lista_de_la_compra", {"accion": action})]

    reads = reading_probe.tally(convs, [call(reading_probe.action_of(c, None)[0]) for c in convs])
    usual = reading_probe.tally(convs, [call("ver") for _ in convs])
    searches = reading_probe.tally(
        convs, [[ToolCall("buscar_en_internet", {"accion": "ver"})]] * len(convs)
    )
    assert all(r == n for r, n in reads.values()) and reading_probe.balanced(reads) == 1.0
    assert usual["ver"][0] == usual["ver"][1] and usual["añadir"][0] == usual["quitar"][0] == 0
    assert abs(reading_probe.balanced(usual) - 1 / 3) < 1e-9
    orders_alike = [  # the question told apart, every order answered «añadir»
        call("ver" if reading_probe.action_of(c, None)[0] == "ver" else "añadir") for c in convs
    ]
    assert abs(reading_probe.balanced(reading_probe.tally(convs, orders_alike)) - 2 / 3) < 1e-9
    assert sum(r for r, _ in searches.values()) == 0  # another tool with the same words is wrong


def _model(vocab_size: int) -> Any:
    import torch
    import yaml
    from enlace_config.schema.model import ModelConfig
    from enlace_model.model import Attention, build_model

    smoke = yaml.safe_load((REPO / "configs" / "model" / "smoke.yaml").read_text())
    cfg = ModelConfig(**{**smoke, "vocab_size": vocab_size, "context_length": 4096})
    model = build_model(cfg).eval()
    with torch.no_grad():  # no query, no key: every score 0, attention uniform over the past
        for attn in (m for m in model.modules() if isinstance(m, Attention)):
            attn.q_proj.weight.zero_()
            attn.k_proj.weight.zero_()
    return model


def test_the_regions_end_where_the_action_is_written(tmp_path: Path) -> None:
    from enlace_data.chat import render
    from enlace_data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    for c in _data(tmp_path)[:20]:
        ids, labels = reading_probe.regions_of(c, tok)
        full = render(c["messages"], tok, tools=c["tools"]).ids
        action = reading_probe.action_of(c, None)[0]
        assert tok.decode(full[len(ids) :]).startswith(action + '"')  # next comes the action
        assert tok.decode(ids).endswith('"accion": "') and len(labels) == len(ids)
        request = next(m for m in c["messages"] if m["role"] == "user")["content"]
        assert (
            tok.decode([i for i, lab in zip(ids, labels, strict=True) if lab == "request"])
            == request
        )
        assert labels.count("recent") == reading_probe.RECENT and labels.count("tools") > 400


def test_the_attention_mass_tells_a_head_on_the_request_from_a_spread_one(tmp_path: Path) -> None:
    import torch
    from enlace_data.tokenizer import ByteTokenizer
    from enlace_model.model import Attention

    tok = ByteTokenizer()
    convs = _data(tmp_path)[:3]
    model = _model(264)
    spread = reading_probe.attention_mass(model, tok, convs)  # uniform: each region its share
    shares = torch.zeros(len(reading_probe.REGIONS))
    for c in convs:
        _, labels = reading_probe.regions_of(c, tok)
        shares += torch.tensor([labels.count(r) / len(labels) for r in reading_probe.REGIONS])
    assert torch.allclose(spread, (shares / len(convs)).expand_as(spread), atol=1e-5)
    assert spread[..., 0].max() < 0.05  # ~40 request positions of ~1,000

    # One attention layer whose keys are large on the request's positions only: every query
    # looks there, and the mass says so.
    _, labels = reading_probe.regions_of(convs[0], tok)
    attn = next(m for m in model.modules() if isinstance(m, Attention))
    on_request = torch.tensor([lab == "request" for lab in labels])

    def reads_the_request(x: torch.Tensor) -> None:
        T, D = x.shape[1], attn.head_dim
        q = torch.ones(1, attn.n_heads, T, D)
        k = torch.zeros(1, attn.n_kv_heads, T, D)
        k[:, :, on_request] = 3.0  # score 3 x sqrt(D) = 17 on the request, 0 elsewhere
        attn._sdpa(q, k, torch.zeros_like(k), None, True, "auto")

    focused = reading_probe.attention_mass(reads_the_request, tok, convs[:1])
    assert focused.shape == (1, attn.n_heads, len(reading_probe.REGIONS))
    assert (focused[..., 0] > 0.99).all()


def test_request_only_keeps_the_requests_and_drops_what_comes_before(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    reading_probe.write_data(tmp_path / "short", tools, 300, 90, request_only=True)
    short = [json.loads(line) for line in (tmp_path / "short" / "val.jsonl").open()]
    full = _data(tmp_path)
    assert [c["messages"][1:] for c in full] == [c["messages"] for c in short]
    assert all(c["tools"] == [] and c["messages"][0]["role"] == "user" for c in short)


def test_a_short_share_drops_the_prompt_of_that_share_of_training_requests_only(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS))
    reading_probe.write_data(tmp_path / "mix", tools, 400, 90, short_share=0.5)
    train = [json.loads(line) for line in (tmp_path / "mix" / "train.jsonl").open()]
    val = [json.loads(line) for line in (tmp_path / "mix" / "val.jsonl").open()]
    short = [c for c in train if c["tools"] == []]
    assert 0.4 < len(short) / len(train) < 0.6
    assert all(c["messages"][0]["role"] == "user" for c in short)
    assert all(len(c["tools"]) == 4 for c in train if c not in short)
    assert val == _data(tmp_path)  # the held-out requests keep every prompt


def test_choice_counts_the_right_tool_and_action_and_not_one_call_for_all() -> None:
    from enlace_data.chat.builtin import builtin_conversations

    convs = reading_probe.household_requests(builtin_conversations("val", 400, tools=TOOLS))
    expected = Counter(
        reading_probe.household_call(
            next(m for m in c["messages"] if m["role"] == "assistant")["tool_calls"][0]["function"]
        )
        for c in convs
    )
    assert set(expected) == {
        "recordar", "olvidar", "lista_de_la_compra añadir", "lista_de_la_compra quitar",
        "lista_de_la_compra ver",
    }  # fmt: skip

    def reference(c: dict) -> list[ToolCall]:
        f = next(m for m in c["messages"] if m["role"] == "assistant")["tool_calls"][0]["function"]
        return [ToolCall(f["name"], f["arguments"])]

    reads = reading_probe.choice(convs, [reference(c) for c in convs])
    assert all(tool == both == n for tool, both, n in reads.values())
    usual = reading_probe.choice(convs, [[ToolCall("recordar", {"texto": "x"})]] * len(convs))
    assert sum(both for _, both, _ in usual.values()) == expected["recordar"]
    assert usual["recordar"][1] == usual["recordar"][2] and usual["olvidar"][0] == 0
    one_action = reading_probe.choice(  # the list's tool for every list request, always «ver»
        convs,
        [
            [ToolCall("lista_de_la_compra", {"accion": "ver"})]
            if "lista" in reading_probe.household_call(reference(c)[0])
            else None
            for c in convs
        ],
    )
    added = one_action["lista_de_la_compra añadir"]
    assert added[0] == added[2] > 0 and added[1] == 0  # right tool, wrong action
    assert one_action["recordar"][:2] == (0, 0)  # no call at all


def _remembers() -> list[dict]:
    from enlace_data.chat.builtin import builtin_conversations

    convs = builtin_conversations("val", 400, tools=TOOLS)
    return [c for c in convs if (c.get("expect") or {}).get("memory")]


def test_copy_pairs_point_from_the_predicting_position_to_the_same_byte_in_the_request() -> None:
    from enlace_data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    convs = _remembers()[:12]
    assert convs
    for c in convs:
        ids, pairs = reading_probe.copy_pairs(c, tok)
        request = list(next(m for m in c["messages"] if m["role"] == "user")["content"].encode())
        start = max(i for i in range(len(ids)) if ids[i : i + len(request)] == request)
        call = next(i for i in range(start, len(ids)) if ids[i : i + 11] == list(b'"arguments"'))
        entities = c["expect"]["memory"]
        assert len(pairs) == sum(len(e) - 1 for e in entities)  # every byte after the first
        for predicting, source in pairs:
            assert ids[predicting + 1] == ids[source]  # the byte to write is the source's
            assert start <= source < start + len(request) and predicting >= call
        ids_first, firsts = reading_probe.copy_pairs(c, tok, first_bytes=True)
        assert ids_first == ids and len(firsts) == len(entities)  # one per name or fact
        for (predicting, source), entity in zip(firsts, entities, strict=True):
            assert ids[predicting + 1 : predicting + 1 + len(entity.encode())] == list(
                entity.encode()
            )
            assert ids[source] == ids[predicting + 1] and start <= source < start + len(request)


def test_copy_pairs_of_a_query_that_is_the_request_itself_point_into_the_request() -> None:
    """A search query is the question's own words: unpunctuated, it is the request byte for byte,
    and the sources must still be found in the user's turn, not in the call."""
    from enlace_data.chat.builtin import builtin_conversations
    from enlace_data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    searches = [
        c for c in builtin_conversations("val", 400) if (c.get("expect") or {}).get("query")
    ]
    same = [c for c in searches if _request(c) == _query(c)]
    assert same, "no query equal to its request in the sample"
    for c in same[:3] + searches[:3]:
        ids, pairs = reading_probe.copy_pairs(c, tok)
        call = max(i for i in range(len(ids)) if ids[i : i + 11] == list(b'"arguments"'))
        assert pairs and all(source < call <= predicting for predicting, source in pairs)
        assert all(ids[predicting + 1] == ids[source] for predicting, source in pairs)


def _request(conversation: dict) -> str:
    return next(m for m in conversation["messages"] if m["role"] == "user")["content"]


def _query(conversation: dict) -> str:
    call = next(m for m in conversation["messages"] if m.get("tool_calls"))
    return call["tool_calls"][0]["function"]["arguments"]["consulta"]


def test_copy_attention_tells_an_induction_head_from_a_spread_one() -> None:
    import torch

    T, pairs = 50, [(40, 10), (41, 11), (45, 20)]
    spread = torch.ones(T, T).tril()
    spread = spread / spread.sum(-1, keepdim=True)
    induction = torch.zeros(T, T)
    for q, t in pairs:
        induction[q, t] = 1.0
    probs = [torch.stack([spread, induction])]  # one layer, two heads
    mass = reading_probe.copy_attention(probs, pairs)
    assert mass.shape == (1, 2) and mass[0, 1] == 1.0
    assert abs(float(mass[0, 0]) - (1 / 41 + 1 / 42 + 1 / 46) / 3) < 1e-6


def test_copying_reads_a_model_teacher_forced() -> None:
    """Wired to a real model: uniform attention puts 1/(q+1) on each source, and its guesses
    are the model's argmax at the predicting positions."""
    from enlace_data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    convs = _remembers()[:2]
    rows = [reading_probe.copy_pairs(c, tok) for c in convs]
    accuracy, mass, n, by_key = reading_probe.copying(_model(264), rows)
    assert 0 < sum(total for _, total in by_key.values()) <= n  # bytes no key tells: none
    pairs = [p for _, row_pairs in rows for p in row_pairs]
    assert n == len(pairs) and 0.0 <= accuracy <= 1.0
    expected = sum(1 / (q + 1) for q, _ in pairs) / len(pairs)
    assert abs(float(mass.max()) - expected) < 1e-5 and abs(float(mass.min()) - expected) < 1e-5


def test_record_pairs_point_at_the_copied_bytes_source() -> None:
    row, pairs = reading_probe.record_pairs(seed=3)
    assert len(row) == 128 and len(pairs) > 40
    text = bytes(row).decode("utf-8", errors="replace")
    assert "|" in text
    for predicting, source in pairs:
        assert row[predicting + 1] == row[source] and source < predicting
        assert (
            0 < predicting + 1 - source <= 2 * 16 + 2
        )  # a few positions back: «A|A», A <= 16 bytes


def test_recall_pairs_need_the_whole_key_to_find_a_values_first_byte() -> None:
    """recall_pairs point from the «=» before each value after the «|» to that value's first byte
    in the first half; a head keyed on the key's bytes and the «=» predicts them all, one keyed
    on the «=» or on «d=» alone (the letter records' one-byte copy) mostly does not."""
    rows = [reading_probe.recall_pairs(seed) for seed in range(20)]
    hits = {n: 0 for n in (1, 2, 3)}
    total = 0
    for ids, pairs in rows:
        assert len(ids) == 128 and pairs
        for predicting, source in pairs:
            assert ids[predicting] == ord("=") and ids[predicting + 1] == ids[source]
            assert ids[predicting - 2 : predicting + 1] == ids[source - 3 : source]  # «cd=»
            assert source < predicting and ord("|") in ids[source:predicting]
            for n in hits:
                hits[n] += induction(ids, n)[predicting] == ids[predicting + 1]
            total += 1
    assert hits[3] == total and hits[1] < 0.5 * total and hits[2] < 0.8 * total, (hits, total)


def test_key_needed_is_the_fewest_bytes_that_say_where_the_copy_was() -> None:
    """«¿A qué hora abre la estación de tren de Antequera?» copied into its query: after «de » the
    request goes on with «tren» once and «Antequera» once, so the «A» needs «en de » (6 bytes)
    and the «t» of «tren» needs «ón de » — where a model keyed on three bytes writes «de tren de
    tren» (CHAT.md, twelfth session)."""
    request = "¿A qué hora abre la estación de tren de Antequera?"
    query = "A qué hora abre la estación de tren de Antequera"
    ids = list(f"user: {request}\ncall: {query}".encode())
    call = len(ids) - len(query.encode())
    at = {w: call + len(query[: query.index(w)].encode()) - 1 for w in ("Antequera", "tren")}
    assert reading_probe.key_needed(ids, at["Antequera"]) == 6  # «en de »
    assert reading_probe.key_needed(ids, at["tren"]) == 6  # «ón de » from the «ó»'s second byte
    assert reading_probe.key_needed(ids, call + len("A qué ".encode()) - 1) == 2  # «é »: «hora»
    assert reading_probe.key_needed(list(b"abc|abd"), 5) is None  # «ab» was followed by «c»


def _keyed(ids: list[int], pairs: list[tuple[int, int]], longest: int) -> list[int]:
    """An induction head keyed on at most `longest` tokens: at each position (the pairs' predicting
    ones, the rest -1), what followed the latest earlier occurrence of the longest key that
    occurred before (else the current token)."""
    out = [-1] * len(ids)
    for t, _ in pairs:
        guess = ids[t]
        for n in range(min(longest, t), 0, -1):
            key = ids[t - n + 1 : t + 1]
            m = next((m for m in range(t - 1, n - 2, -1) if ids[m - n + 1 : m + 1] == key), None)
            if m is not None:
                guess = ids[m + 1]
                break
        out[t] = guess
    return out


def test_accuracy_by_key_tells_a_head_keyed_on_three_bytes_from_one_keyed_on_more() -> None:
    """Teacher-forced copies of the built-in questions into their search calls, tallied by the
    key each byte needs: a head keyed on at most three bytes gets every byte that needs three or
    fewer and misses most of those that need more; keyed on up to 12, it gets them all."""
    from enlace_data.chat.builtin import builtin_conversations
    from enlace_data.tokenizer import ByteTokenizer

    tok = ByteTokenizer()
    searches = [
        c for c in builtin_conversations("val", 400) if (c.get("expect") or {}).get("query")
    ][:40]
    rows = [
        reading_probe.copy_pairs(c, tok, first_bytes=first)
        for c in searches
        for first in (False, True)
    ]
    three = reading_probe.accuracy_by_key(rows, [_keyed(ids, pairs, 3) for ids, pairs in rows])
    more = reading_probe.accuracy_by_key(rows, [_keyed(ids, pairs, 12) for ids, pairs in rows])
    assert list(three) == ["1", "2", "3", "4", "5", "6+"]
    assert all(three[k][0] == three[k][1] > 0 for k in ("1", "2", "3")), three
    longer = [three[k] for k in ("4", "5", "6+")]
    assert sum(r for r, _ in longer) < 0.5 * sum(n for _, n in longer), three
    assert all(r == n for r, n in more.values()), more
