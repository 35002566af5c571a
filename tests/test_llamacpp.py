"""The GGUF export run by the real llama.cpp (llama-cpp-python over the libllama that
scripts/build-llama-server.sh builds, named by LLAMA_CPP_LIB_PATH): the `llamacpp` stage of
scripts/test.sh, deselected from the default run.

For a SentencePiece model (a tokenizer trained by enlace-data) and a byte-level model:
- tokenization identical to Enlace's on two whole texts, line by line and whole, and on edge
  strings (accents, ñ, ¿¡, emoji, CJK, tabs, runs of spaces, NFD, empty); the texts are two novels
  from the shared data when ENLACE_SHARED_DATA holds them, else the smoke corpus built into
  enlace-data (the same 14 books), so a fresh clone verifies everything and skips nothing;
- logits within LOGIT_ATOL of Enlace's (float32 weights and KV cache);
- greedy generation of 64 tokens identical for f32; top-1 agreement >= 98% for q8_0;
- llama-cpp-python's OpenAI-compatible server answers a chat completion on 127.0.0.1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import unicodedata
import urllib.request
from functools import cache
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("llama_cpp") and not os.environ.get("LLAMA_CPP_LIB_PATH"):
    pytest.fail(
        "LLAMA_CPP_LIB_PATH is not set: llama-cpp-python is installed without a libllama of its "
        "own; run `scripts/test.sh llamacpp`, or set it to the folder of the llama-server that "
        "scripts/build-llama-server.sh prints (the libraries lie next to it)",
        pytrace=False,
    )
llama_cpp = pytest.importorskip("llama_cpp", reason="the llamacpp stage installs llama-cpp-python")
pytestmark = pytest.mark.llamacpp

from enlace_config.schema.model import ModelConfig  # noqa: E402
from enlace_data.chat import render  # noqa: E402
from enlace_data.sample import builtin_split  # noqa: E402
from enlace_data.tokenizer import (  # noqa: E402
    ByteTokenizer,
    Tokenizer,
    train_tokenizer,
)
from enlace_model import atomic_checkpoint, build_model, generate, save_model  # noqa: E402
from enlace_model.gguf_export import export_gguf  # noqa: E402

BOOKS = ("valera-pepita-jimenez.txt", "unamuno-niebla.txt")
BUILTIN_CHARS = 300_000  # of the built-in train split, at each end: about one novel
TRAIN_STEPS = 150
LOGIT_ATOL = 2e-3  # float32 in both; llama.cpp sums in another order (and in blocks)
EDGE_STRINGS = [
    "",
    " ",
    "a",
    "áéíóú ÁÉÍÓÚ ü Ü",
    "ñandú, Ñuñoa, año",
    "¿Qué tal? ¡Muy bien!",
    "emoji: 😀👍🏽👨‍👩‍👧 ❤️",
    "CJK: 漢字かなカナ 한국어",
    "\ttab\t\tdos tabs\t",
    "varios     espacios   y  dos",
    "   al principio y al final   ",
    unicodedata.normalize("NFD", "canción, pingüino, año, ÁRBOL"),
    "\n",
    "\n\nlíneas\n\n\nvacías\n",
    "El texto literal <|endoftext|> no es un token especial.",
    "1605, 3.250 maravedís; 0,5 %; 2026-12-03",
    "comillas «latinas» y “curvas” — raya … elipsis",
    "\u00a0espacio duro\u200b cero",
]
# Enlace encodes a literal U+2581 as its three bytes; llama.cpp's SentencePiece tokenizer (like
# `tokenizers`) reads it as the space marker. Bytes models have no such difference.
SPACE_MARKER = "a\u2581b"


@cache
def texts() -> dict[str, str]:
    """Two real Spanish texts by name: the two novels from ENLACE_SHARED_DATA/es-pd when both are
    there, else the smoke corpus built into enlace-data: its train split's first and last
    BUILTIN_CHARS characters, cut at line ends (Bécquer's prose and verse; the last pages of
    Unamuno's Niebla and Valera's Pepita Jiménez, the last of the 14 books)."""
    root = os.environ.get("ENLACE_SHARED_DATA")
    paths = [Path(root, "es-pd", name) for name in BOOKS] if root else []
    if paths and all(p.is_file() for p in paths):
        return {p.name: p.read_text(encoding="utf-8") for p in paths}
    train = builtin_split("train").decode("utf-8")
    start, end = train[:BUILTIN_CHARS], train[-BUILTIN_CHARS:]
    return {
        "enlace-data smoke_train.txt (start)": start[: start.rindex("\n") + 1],
        "enlace-data smoke_train.txt (end)": end[end.index("\n") + 1 :],
    }


# The attention layouts a run can choose (issue 35), each exported and checked the same way: q/k-norm
# with gains from 1 (GGUF qwen3), q/k-norm with gains from 3 (qwen3, the gains in its norm weights),
# no q/k-norm (GGUF llama, q/k rows permuted to interleaved pairs), a short convolution below the
# attention (GGUF lfm2: its recurrent state replaces the KV cache in that layer).
LAYOUTS: dict[str, dict[str, object]] = {
    "bytes-gain3": {"qk_norm_gain_init": 3.0},
    "bytes-llama": {"qk_norm": False},
    "bytes-lfm2": {"conv_layers": [0], "conv_kernel": 4},
}
KINDS = ["sp", "bytes", *LAYOUTS]


def make_run(
    root: Path, tok: Tokenizer | ByteTokenizer, text: str, **overrides: object
) -> tuple[torch.nn.Module, Path]:
    """A tiny model trained for a few hundred steps on `text` (a random model's near-flat logits
    would measure quantization noise, not what a served model sees), saved with its tokenizer and,
    for SentencePiece, a chat template."""
    cfg = ModelConfig.model_validate(
        {
            "vocab_size": tok.vocab_size,
            "context_length": 256,
            "d_model": 64,
            "n_layers": 2,
            "n_heads": 4,
            "n_kv_heads": 2,
            "ffn_hidden": 192,
            **overrides,
        }
    )
    torch.manual_seed(0)
    model = build_model(cfg)
    data = torch.tensor(tok.encode(text))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(0, len(data) - 65, (16,))
        rows = torch.stack([data[i : i + 65] for i in starts.tolist()])
        loss = model(rows[:, :-1], rows[:, 1:]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with atomic_checkpoint(root, 1) as d:
        save_model(d, model, cfg)
        tok.save(d)  # with enlace-data's chat template in tokenizer_config.json
    return model, root


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    """One thread for torch and llama.cpp: on the shared 2-core machine two threads stall on each
    other (a training step went from 0.1 s to several seconds), and these shapes gain nothing."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, dict]:
    """{"sp": ..., "bytes": ..., and the byte model in each of LAYOUTS}: the Enlace tokenizer,
    model, and GGUF files (f32, q8_0)."""
    print(f"texts: {', '.join(texts())}")  # shown by the stage's -rP
    lines = [ln for ln in next(iter(texts().values())).splitlines() if ln.strip()]
    out: dict[str, dict] = {}
    tokenizers = {"sp": train_tokenizer(lines, vocab_size=2000), "bytes": ByteTokenizer()}
    for kind in KINDS:
        tok = tokenizers.get(kind, tokenizers["bytes"])
        root = tmp_path_factory.mktemp(kind)
        model, run = make_run(root / "run", tok, "\n".join(lines[:3000]), **LAYOUTS.get(kind, {}))
        files = {t: export_gguf(run, root / f"{t}.gguf", outtype=t) for t in ("f32", "q8_0")}
        out[kind] = {"tok": tok, "model": model, "files": files}
    return out


def load(path: Path, **kw) -> llama_cpp.Llama:
    f32 = 0  # GGML_TYPE_F32: the KV cache in float32, so only summation order differs
    return llama_cpp.Llama(
        model_path=str(path),
        n_ctx=256,
        n_batch=256,
        n_threads=1,
        n_threads_batch=1,
        logits_all=True,
        type_k=f32,
        type_v=f32,
        verbose=False,
        **kw,
    )


@pytest.mark.parametrize("kind", ["sp", "bytes"])
def test_tokenization_identical_on_two_books_and_edge_strings(models, kind):
    tok = models[kind]["tok"]
    llm = llama_cpp.Llama(
        model_path=str(models[kind]["files"]["f32"]), vocab_only=True, verbose=False
    )

    def same(text: str) -> bool:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False) == tok.encode(text)

    for name, text in texts().items():
        lines = text.splitlines(keepends=True)
        differ = [ln for ln in lines if not same(ln)]
        assert not differ, f"{name}: {len(differ)} of {len(lines)} lines differ: {differ[:3]}"
        assert same(text), f"{name}: the whole text tokenizes differently"
    for text in EDGE_STRINGS:
        assert same(text), repr(text)
    assert same(SPACE_MARKER) == (kind == "bytes")  # the documented U+2581 difference
    # Round trip: llama.cpp's detokenizer gives the text back.
    for text in EDGE_STRINGS[1:]:
        ids = tok.encode(text)
        assert llm.detokenize(ids).decode("utf-8") == text, repr(text)


def book_tokens(tok, n: int) -> list[int]:
    text = list(texts().values())[1]
    return tok.encode(text[20000:40000])[:n]


@pytest.mark.parametrize("kind", KINDS)
def test_f32_logits_and_greedy_generation(models, kind):
    m = models[kind]
    prompt = book_tokens(m["tok"], 128)
    llm = load(m["files"]["f32"])
    arch = {"bytes-llama": "llama", "bytes-lfm2": "lfm2"}.get(kind, "qwen3")
    assert llm.metadata["general.architecture"] == arch
    llm.eval(prompt)
    got = torch.from_numpy(llm.scores[: len(prompt)].copy())
    with torch.no_grad():
        want = m["model"](torch.tensor([prompt])).logits[0]
    err = (got - want).abs().max().item()
    print(f"{kind}: max |logit difference| {err:.2e} (logits std {want.std().item():.2f})")
    assert err <= LOGIT_ATOL
    # Greedy decoding through llama.cpp's KV cache, token by token.
    llm.reset()
    llm.eval(prompt[:16])
    ours = []
    for _ in range(64):
        nxt = int(llm.scores[llm.n_tokens - 1].argmax())
        ours.append(nxt)
        llm.eval([nxt])
    enlace = generate(m["model"], [prompt[:16]], 64, temperature=0.0)[0]
    assert ours == enlace


@pytest.mark.parametrize("kind", KINDS)
def test_q8_0_top1_agreement(models, kind):
    m = models[kind]
    prompt = book_tokens(m["tok"], 256)
    llm = load(m["files"]["q8_0"])
    llm.eval(prompt)
    got = torch.from_numpy(llm.scores[: len(prompt)].copy()).argmax(-1)
    with torch.no_grad():
        want = m["model"](torch.tensor([prompt])).logits[0].argmax(-1)
    agreement = (got == want).float().mean().item()
    print(f"{kind}: q8_0 top-1 agreement with Enlace f32: {agreement:.1%} of {len(prompt)}")
    assert agreement >= 0.98


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_openai_compatible_server_answers_a_chat_completion(models, tmp_path):
    pytest.importorskip("uvicorn", reason="llama-cpp-python's [server] extra")
    port = free_port()
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(models["sp"]["files"]["q8_0"]),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "256",
            "--n_threads",
            "1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=5) as r:
                    models_listed = json.load(r)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"server did not start: {(tmp_path / 'server.log').read_text()}")
                time.sleep(0.5)
        assert models_listed["data"]
        body = {
            "messages": [{"role": "user", "content": "¿Qué tiempo hace hoy en Madrid?"}],
            "max_tokens": 8,
            "temperature": 0,
        }
        req = urllib.request.Request(
            f"{base}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            answer = json.load(r)
        choice = answer["choices"][0]
        assert choice["message"]["role"] == "assistant"
        assert isinstance(choice["message"]["content"], str)
        # The prompt went through the GGUF's chat template: the ids enlace-data renders.
        assert answer["usage"]["completion_tokens"] <= 8
        want = render(body["messages"], models["sp"]["tok"], add_generation_prompt=True)
        assert answer["usage"]["prompt_tokens"] == len(want.ids)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
