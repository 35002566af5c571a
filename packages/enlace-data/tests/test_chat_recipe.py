"""`enlace-data chat RECIPE.yaml OUT_DIR`: the GPU runs' chat data recipe (configs/chat/) built end
to end from small parquet files in the Hub's layout, read through huggingface_hub from a local
Hugging Face cache (HF_HOME, HF_HUB_OFFLINE=1: the path a download fills), never the internet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
RECIPE = REPO_ROOT / "configs" / "chat" / "sft-es.yaml"
COMMIT = "c0" * 20


def write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


def put_dataset(hf_home: Path, repo: str, files: dict[str, list[dict[str, Any]]]) -> None:
    """The dataset as huggingface_hub leaves it in its cache after a download."""
    root = hf_home / "hub" / f"datasets--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(COMMIT)
    for name, rows in files.items():
        write_parquet(root / "snapshots" / COMMIT / name, rows)


def oasst_rows() -> list[dict[str, Any]]:
    """OpenAssistant's message rows (oasst2's columns): Spanish and English trees; in each, two
    ranked replies to the prompt and a follow-up under the best one."""
    rows: list[dict[str, Any]] = []

    def row(t: int, mid: str, parent: str | None, text: str, role: str, rank: int | None) -> None:
        rows.append(
            {
                "message_id": mid,
                "parent_id": parent,
                "user_id": f"u{t}",
                "created_date": "2023-11-05T00:00:00",
                "text": text,
                "role": role,
                "lang": "es" if t % 3 else "en",
                "review_count": 3,
                "review_result": True,
                "deleted": False,
                "rank": rank,
                "synthetic": False,
                "model_name": None,
                "message_tree_id": f"t{t}",
                "tree_state": "ready_for_export",
            }
        )

    for t in range(12):
        lang = "es" if t % 3 else "en"
        word = "pregunta" if lang == "es" else "question"
        row(t, f"t{t}", None, f"Primera {word} {t}", "prompter", None)
        row(t, f"t{t}a", f"t{t}", f"Mejor respuesta {t} ({lang})", "assistant", 0)
        row(t, f"t{t}b", f"t{t}", f"Peor respuesta {t} ({lang})", "assistant", 1)
        row(t, f"t{t}c", f"t{t}a", f"Segunda {word} {t}", "prompter", 0)
        row(t, f"t{t}d", f"t{t}c", f"Respuesta final {t} ({lang})", "assistant", 0)
    return rows


def aya_rows() -> list[dict[str, Any]]:
    rows = []
    for i in range(40):
        spanish = i % 2 == 0
        rows.append(
            {
                "inputs": f"¿Qué es la palabra {i}?" if spanish else f"What is word {i}?",
                "targets": f"Es una palabra ({i})." if spanish else f"It is a word ({i}).",
                "language": "Spanish" if spanish else "English",
                "language_code": "spa" if spanish else "eng",
                "annotation_type": "original-annotations",
                "user_id": f"user{i % 5}",
            }
        )
    rows.append({**rows[0], "targets": ""})  # an empty answer: skipped and counted
    return rows


def dolly_rows(lang: str) -> list[dict[str, Any]]:
    return [
        {
            "instruction": f"Instrucción {lang} {i}",
            "context": f"Contexto {i}" if i % 2 else "",
            "response": f"Respuesta {lang} {i}",
            "category": "closed_qa" if i % 2 else "open_qa",
            "instruction_en": f"Instruction {i}",
            "context_en": "",
            "response_en": f"Response {i}",
        }
        for i in range(60)
    ]


@pytest.fixture
def hf_home(tmp_path: Path) -> Path:
    home = tmp_path / "hf"
    put_dataset(home, "OpenAssistant/oasst2", {"data/train-00000-of-00001.parquet": oasst_rows()})
    put_dataset(home, "CohereLabs/aya_dataset", {"data/train-00000-of-00001.parquet": aya_rows()})
    put_dataset(
        home,
        "argilla/databricks-dolly-15k-curated-multilingual",
        {f"data/{lang}-00000-of-00001.parquet": dolly_rows(lang) for lang in ("es", "de")},
    )
    return home


def env_for(hf_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HOME=str(hf_home), HF_HUB_DISABLE_TELEMETRY="1", **extra)
    return env


def build(
    recipe: Path, out: Path, env: dict[str, str], *overrides: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "enlace_data.cli", "chat", str(recipe), str(out), *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_gpu_recipe_builds_end_to_end_with_its_shares_and_licenses(
    tmp_path: Path, hf_home: Path
) -> None:
    env = env_for(hf_home, HF_HUB_OFFLINE="1")
    out = tmp_path / "chat"
    proc = build(RECIPE, out, env, "train_conversations=400", "tool_use.val_conversations=20")
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    shares = {"oasst2-es": 0.25, "aya-es": 0.15, "dolly-es": 0.25}
    by_name = {s["name"]: s for s in manifest["sources"]}
    assert set(by_name) == set(shares)
    assert {n: s["license"] for n, s in by_name.items()} == {
        "oasst2-es": "apache-2.0",
        "aya-es": "apache-2.0",
        "dolly-es": "cc-by-sa-3.0",
    }
    for name, share in shares.items():
        assert by_name[name]["train"] == round(share * 400), name
    assert manifest["tool_use"]["share"] == 0.35 and manifest["tool_use"]["train"] == 140
    assert manifest["train_conversations"] == sum(s["train"] for s in manifest["sources"]) + 140
    # What each source read: only its Spanish rows; the empty answer skipped and said why.
    assert by_name["oasst2-es"]["conversations"] == 8  # 8 Spanish trees, one thread each
    assert by_name["aya-es"]["conversations"] == 20 and by_name["aya-es"]["skipped"] == 1
    assert "empty assistant turn" in by_name["aya-es"]["skipped_examples"][0]
    assert by_name["dolly-es"]["conversations"] == 60
    assert by_name["dolly-es"]["files"] == ["data/es-00000-of-00001.parquet"]
    assert {s["commit"] for s in manifest["sources"]} == {COMMIT}  # the revision actually read
    assert by_name["oasst2-es"]["repeats"] > 1  # 100 asked of 8 conversations

    train = lines(out / "train.jsonl")
    assert len(train) == manifest["train_conversations"]
    text = json.dumps(train, ensure_ascii=False)
    assert "What is word" not in text and "question" not in text and "Instrucción de" not in text
    # oasst: the best-ranked branch, both turns of it, never the worse reply.
    thread = next(c for c in train if c["messages"][0]["content"] == "Primera pregunta 1")
    assert [m["content"] for m in thread["messages"]] == [
        "Primera pregunta 1",
        "Mejor respuesta 1 (es)",
        "Segunda pregunta 1",
        "Respuesta final 1 (es)",
    ]
    assert "Peor respuesta" not in text
    # dolly: the context follows the instruction.
    assert any(c["messages"][0]["content"] == "Instrucción es 1\n\nContexto 1" for c in train)
    # The tool-use share: built-in conversations offering the search tool.
    assert sum("tools" in c for c in train) > 0
    val = lines(out / "val.jsonl")
    assert sum("expect" in c for c in val) > 0  # the held-out searches the measures read


def test_the_same_recipe_and_seed_give_the_same_bytes(tmp_path: Path, hf_home: Path) -> None:
    env = env_for(hf_home, HF_HUB_OFFLINE="1")
    small = ("train_conversations=120", "tool_use.val_conversations=10")
    outs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for out, seed in zip(outs, (0, 0, 1), strict=True):
        proc = build(RECIPE, out, env, *small, f"seed={seed}")
        assert proc.returncode == 0, proc.stderr
    read = [{f: (o / f).read_bytes() for f in ("train.jsonl", "val.jsonl")} for o in outs]
    assert read[0] == read[1]
    assert read[0]["train.jsonl"] != read[2]["train.jsonl"]


def recipe_text(**source: Any) -> str:
    aya = {
        "name": "aya-es",
        "dataset": "CohereLabs/aya_dataset",
        "license": "apache-2.0",
        "format": "pair",
        "prompt_column": "inputs",
        "response_column": "targets",
        "match": {"language_code": "spa"},
        "share": 0.5,
        **source,
    }
    recipe = {
        "name": "t",
        "train_conversations": 20,
        "sources": [aya],
        "tool_use": {"share": 0.5, "val_conversations": 5},
    }
    return "# a test recipe\n" + json.dumps(recipe)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"prompt_column": "instruction"},
            [
                "sources[0].prompt_column",
                "'instruction'",
                "CohereLabs/aya_dataset",
                "inputs, targets, language",
            ],
        ),
        ({"match": {"lang": "es"}}, ["sources[0].match", "'lang'", "language_code"]),
        ({"license": "cc-by-nc-4.0"}, ["sources.0.license", "cc-by-nc-4.0", "apache-2.0"]),
        ({"shares": 0.5}, ["sources.0.shares", "share"]),
    ],
    ids=["missing-column", "missing-match-column", "bad-license", "unknown-key"],
)
def test_a_bad_recipe_fails_at_start_up_naming_key_file_and_expectation(
    tmp_path: Path, hf_home: Path, source: dict[str, Any], expected: list[str]
) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text(recipe_text(**source))
    out = tmp_path / "chat"
    proc = build(recipe, out, env_for(hf_home, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "bad.yaml" in proc.stderr
    for words in expected:
        assert words in proc.stderr, (words, proc.stderr)
    assert not out.exists()


def test_an_unreachable_hub_fails_at_once_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = env_for(tmp_path / "hf", HF_ENDPOINT=f"http://127.0.0.1:{port}")
    out = tmp_path / "chat"
    start = time.monotonic()
    proc = build(RECIPE, out, env)
    assert proc.returncode == 2, proc.stderr
    assert time.monotonic() - start < 60
    assert "Traceback" not in proc.stderr
    assert "OpenAssistant/oasst2" in proc.stderr and "HF_HUB_OFFLINE" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1  # one paragraph
    assert not out.exists()


def test_the_recipe_is_mixed_by_shares_not_by_file_order(tmp_path: Path, hf_home: Path) -> None:
    env = env_for(hf_home, HF_HUB_OFFLINE="1")
    out = tmp_path / "chat"
    proc = build(RECIPE, out, env, "train_conversations=200", "tool_use.val_conversations=10")
    assert proc.returncode == 0, proc.stderr
    first_half = lines(out / "train.jsonl")[:100]
    kinds = Counter(
        "tools"
        if "tools" in c
        else "dolly"
        if "Instrucción" in c["messages"][0]["content"]
        else "other"
        for c in first_half
    )
    assert kinds["dolly"] > 5 and kinds["other"] > 5  # interleaved, not one source after another


def test_a_sharegpt_column_is_read_as_messages(tmp_path: Path, hf_home: Path) -> None:
    turns = [
        [{"from": "human", "value": f"Hola {i}"}, {"from": "gpt", "value": f"¡Hola! ({i})"}]
        for i in range(30)
    ]
    put_dataset(
        hf_home, "org/charla-es", {"data/train-00000-of-00001.parquet": [
            {"conversations": t, "source": "x"} for t in turns
        ]}
    )  # fmt: skip
    recipe = tmp_path / "sharegpt.yaml"
    source = {"name": "charla", "dataset": "org/charla-es", "license": "cc-by-4.0",
              "messages_column": "conversations", "share": 0.5}  # fmt: skip
    body = {"name": "s", "train_conversations": 20, "sources": [source],
            "tool_use": {"share": 0.5, "val_conversations": 4}}  # fmt: skip
    recipe.write_text("# a ShareGPT set\n" + json.dumps(body))
    out = tmp_path / "chat"
    proc = build(recipe, out, env_for(hf_home, HF_HUB_OFFLINE="1"))
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sources"][0]["skipped"] == 0 and manifest["sources"][0]["train"] == 10
    hola = [c for c in lines(out / "train.jsonl") if c["messages"][0]["content"].startswith("Hola")]
    assert len(hola) == 10 and [m["role"] for m in hola[0]["messages"]] == ["user", "assistant"]
