"""The GGUF export, read back with gguf's own reader (no llama.cpp build needed here; the
`llamacpp` test stage runs the files in llama.cpp): every tensor equals the checkpoint's (exactly in
f32, within the type's rounding otherwise), every hyperparameter and tokenizer key is present and
right, for qwen3 (QK-norm) and llama (no QK-norm, permuted q/k) layouts, SentencePiece and byte
vocabularies, their tokenizer read from the files enlace-data wrote into the checkpoint; the CLI.
(Top level: the checkpoints need enlace-data's real tokenizer files.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from enlace_config.schema.model import ModelConfig
from enlace_data.chat import CHAT_TEMPLATE as ENLACE_CHAT_TEMPLATE
from enlace_data.tokenizer import ByteTokenizer, Tokenizer, train_tokenizer
from enlace_model import atomic_checkpoint, build_model, save_model
from enlace_model.cli import main as cli_main
from enlace_model.gguf_export import INERT_MERGE, export_gguf, gguf_tensor_names

gguf = pytest.importorskip("gguf")

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "packages" / "enlace-data" / "tests" / "sample_es.txt"
BYTE_ROWS = 264  # ByteTokenizer's 263 ids (bytes, then the specials), padded as the chat model is
CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"


def tiny_config(**overrides: object) -> ModelConfig:
    """The smoke model's shape (configs/model/smoke.yaml), with overrides."""
    smoke = yaml.safe_load((REPO / "configs" / "model" / "smoke.yaml").read_text())
    return ModelConfig.model_validate(smoke | overrides)


def perturb_norms(model: torch.nn.Module) -> None:
    """Norm weights start at 1; spread them so a test sees whether each one is exported."""
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.3)


def fields(reader) -> dict:
    return {name: f.contents() for name, f in reader.fields.items()}


def add_chat_template(d: Path, template: str) -> None:
    """A chat model's template lives in its tokenizer_config.json."""
    f = d / "tokenizer_config.json"
    f.write_text(json.dumps(json.loads(f.read_text()) | {"chat_template": template}))


def byte_run(tmp_path, cfg):
    model = build_model(cfg)
    perturb_norms(model)
    with atomic_checkpoint(tmp_path / "run", 1) as d:
        save_model(d, model, cfg)
        ByteTokenizer().save(d)
    return model, tmp_path / "run"


@dataclass
class SentencePieceRun:
    run: Path
    tok: Tokenizer


@pytest.fixture(scope="module")
def sp_tokenizer() -> Tokenizer:
    return train_tokenizer(SAMPLE.read_text(encoding="utf-8").split("\n"), vocab_size=600)


@pytest.fixture
def sentencepiece_run(tmp_path, sp_tokenizer) -> Callable[..., SentencePieceRun]:
    """sentencepiece_run(chat_template=None): a run whose checkpoint holds a tiny model and the
    tokenizer files of a SentencePiece tokenizer trained by enlace-data."""

    def make(chat_template: str | None = None) -> SentencePieceRun:
        cfg = tiny_config(vocab_size=sp_tokenizer.vocab_size)
        model = build_model(cfg)
        perturb_norms(model)
        with atomic_checkpoint(tmp_path / "run", 1) as d:
            save_model(d, model, cfg)
            sp_tokenizer.save(d)
            if chat_template is not None:
                add_chat_template(d, chat_template)
        return SentencePieceRun(tmp_path / "run", sp_tokenizer)

    return make


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k permutation (interleaved pairs back to halves)."""
    return (
        w.reshape(n_heads, w.shape[0] // n_heads // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def gguf_tensors(path) -> dict[str, tuple[str, np.ndarray]]:
    """name -> (type name, float32 array in PyTorch's (out, in) layout)."""
    out = {}
    for t in gguf.GGUFReader(path).tensors:
        data = gguf.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[t.name] = (t.tensor_type.name, data.reshape([int(d) for d in reversed(t.shape)]))
    return out


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"conv_layers": []},
        {"conv_layers": [], "tie_embeddings": False},
        {"conv_layers": [], "qk_norm": False, "n_kv_heads": 1},
        {"conv_layers": [1], "conv_kernel": 4, "n_layers": 3},
    ],
    ids=["lfm2-smoke", "qwen3-tied", "qwen3-untied", "llama-mqa", "lfm2-conv-middle"],
)
def test_f32_tensors_equal_the_checkpoint_and_metadata_is_complete(tmp_path, overrides):
    cfg = tiny_config(vocab_size=BYTE_ROWS, rope_theta=5000.0, norm_eps=1e-5, **overrides)
    model, run = byte_run(tmp_path, cfg)
    path = export_gguf(run, tmp_path / "m.gguf", outtype="f32")
    tensors = gguf_tensors(path)
    state = model.state_dict()
    names = gguf_tensor_names(cfg, list(state))
    assert sorted(tensors) == sorted(names.values())
    for key, want in state.items():
        kind, got = tensors[names[key]]
        assert kind == "F32"
        if not cfg.qk_norm and key.endswith("q_proj.weight"):
            got = unpermute(got, cfg.n_heads)
        elif not cfg.qk_norm and key.endswith("k_proj.weight"):
            got = unpermute(got, cfg.n_kv_heads)
        elif key.endswith("conv.conv_weight"):
            want = want[:, 0]  # llama.cpp's kernel is {K, C}: (C, K) here
        np.testing.assert_array_equal(got, want.numpy(), err_msg=key)

    f = fields(gguf.GGUFReader(path))
    arch = "lfm2" if cfg.conv_layers else "qwen3" if cfg.qk_norm else "llama"
    assert f["general.architecture"] == arch
    want_meta = {
        "context_length": cfg.context_length,
        "embedding_length": cfg.d_model,
        "block_count": cfg.n_layers,
        "feed_forward_length": cfg.ffn_hidden,
        "attention.head_count": cfg.n_heads,
        # LFM2: a layer without key/value heads is a convolution, of kernel shortconv.l_cache
        "attention.head_count_kv": [
            0 if i in cfg.conv_layers else cfg.n_kv_heads for i in range(cfg.n_layers)
        ]
        if cfg.conv_layers
        else cfg.n_kv_heads,
        "attention.key_length": cfg.head_dim,
        "attention.value_length": cfg.head_dim,
        "rope.dimension_count": cfg.head_dim,
        "vocab_size": BYTE_ROWS,
    }
    for key, value in want_meta.items():
        assert f[f"{arch}.{key}"] == value, key
    if cfg.conv_layers:
        assert f[f"{arch}.shortconv.l_cache"] == cfg.conv_kernel
    assert f[f"{arch}.rope.freq_base"] == pytest.approx(5000.0)
    assert f[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert f["general.languages"] == ["es"] and f["general.license"] == "mit"
    # Byte vocabulary: token i is byte i in GPT-2's byte-level alphabet, no merge can apply.
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == "qwen2"
    tokens = f["tokenizer.ggml.tokens"]
    alphabet = {c: b for b, c in enumerate(tokens)}
    assert len(tokens) == BYTE_ROWS and len(alphabet) == BYTE_ROWS
    assert [alphabet[tokens[b]] for b in range(256)] == list(range(256))
    specials = ByteTokenizer.special_ids
    assert {tokens[i]: i for i in specials.values()} == specials
    assert tokens[263] == "[PAD263]"  # the padding row, an unused token
    types = f["tokenizer.ggml.token_type"]
    assert types[263] == gguf.TokenType.UNUSED and types[256] == gguf.TokenType.CONTROL
    assert tokens[32] == "Ġ" and tokens[65] == "A"
    assert f["tokenizer.ggml.merges"] == [INERT_MERGE]
    assert all(len(part) > 1 for part in INERT_MERGE.split(" "))
    assert f["tokenizer.ggml.add_bos_token"] is False
    assert f["tokenizer.ggml.eos_token_id"] == ByteTokenizer.eot_id
    assert f["tokenizer.ggml.eot_token_id"] == specials["<|im_end|>"]


@pytest.mark.parametrize(
    ("outtype", "matrix", "atol"),
    [("f16", "F16", 1e-3), ("q8_0", "Q8_0", 4e-3), ("q4_0", "Q4_0", 6e-2)],
)
def test_quantized_types(tmp_path, outtype, matrix, atol):
    cfg = tiny_config(vocab_size=BYTE_ROWS, d_model=64, ffn_hidden=128, tie_embeddings=False)
    model, run = byte_run(tmp_path, cfg)
    tensors = gguf_tensors(export_gguf(run, tmp_path / "m.gguf", outtype=outtype))
    names = gguf_tensor_names(cfg, list(model.state_dict()))
    for key, want in model.state_dict().items():
        kind, got = tensors[names[key]]
        if key.endswith("conv.conv_weight"):
            want = want[:, 0]  # llama.cpp's kernel is {K, C}: (C, K) here
        if want.ndim == 1 or key.endswith("conv.conv_weight"):
            assert kind == "F32", key  # norms and convolution kernels stay f32
        elif outtype == "q4_0" and key == "embed.weight":
            assert kind == "Q8_0"  # the embedding keeps 8 bits
        else:
            assert kind == matrix, key
        np.testing.assert_allclose(got, want.numpy(), atol=atol, err_msg=key)
    ftype = fields(gguf.GGUFReader(tmp_path / "m.gguf"))["general.file_type"]
    assert ftype == {"f16": 1, "q8_0": 7, "q4_0": 2}[outtype]


def test_rows_that_do_not_fill_blocks_fall_back_to_f16(tmp_path):
    cfg = tiny_config(vocab_size=BYTE_ROWS, d_model=48, n_heads=4, n_kv_heads=2, ffn_hidden=80)
    _, run = byte_run(tmp_path, cfg)
    tensors = gguf_tensors(export_gguf(run, tmp_path / "m.gguf", outtype="q8_0"))
    assert tensors["blk.0.ffn_down.weight"][0] == "F16"  # rows of 80: not whole blocks of 32
    assert tensors["blk.0.shortconv.in_proj.weight"][0] == "F16"  # rows of 48
    assert tensors["blk.2.attn_q.weight"][0] == "F16"


def test_sentencepiece_vocabulary(tmp_path, sentencepiece_run):
    spm = pytest.importorskip("sentencepiece")
    run = sentencepiece_run(chat_template=CHAT_TEMPLATE)
    path = export_gguf(run.run, tmp_path / "sp.gguf", outtype="q8_0")
    f = fields(gguf.GGUFReader(path))
    sp = spm.SentencePieceProcessor(model_file=str(run.run / "checkpoints/step_1/tokenizer.model"))
    n = sp.get_piece_size()
    assert f["tokenizer.ggml.model"] == "llama"
    assert f["tokenizer.ggml.tokens"] == [sp.id_to_piece(i) for i in range(n)]
    kinds = gguf.TokenType
    types = f["tokenizer.ggml.token_type"]
    for i in range(n):
        piece = sp.id_to_piece(i)
        want = (
            kinds.UNKNOWN
            if sp.is_unknown(i)
            else kinds.CONTROL
            if sp.is_control(i)
            else kinds.BYTE
            if sp.is_byte(i)
            else kinds.USER_DEFINED
            if piece == "\n"
            else kinds.NORMAL
        )
        assert types[i] == want, (i, piece)
    # Scores order the normal pieces as SentencePiece's own scores do.
    scores = f["tokenizer.ggml.scores"]
    normal = [i for i in range(n) if types[i] == kinds.NORMAL]
    assert sorted(normal, key=lambda i: -scores[i]) == sorted(
        normal, key=lambda i: -sp.get_score(i)
    )
    assert f["tokenizer.ggml.add_space_prefix"] is False
    assert f["tokenizer.ggml.remove_extra_whitespaces"] is False
    assert f["tokenizer.ggml.add_bos_token"] is False and f["tokenizer.ggml.add_eos_token"] is False
    ids = {
        k: f[f"tokenizer.ggml.{k}_token_id"] for k in ("bos", "eos", "padding", "unknown", "eot")
    }
    im_end = run.tok.special_ids["<|im_end|>"]
    assert ids == {"bos": 1, "eos": 1, "padding": 1, "unknown": 0, "eot": im_end}
    assert f["tokenizer.chat_template"] == CHAT_TEMPLATE
    assert f[f"{f['general.architecture']}.vocab_size"] == n


@pytest.mark.parametrize("kind", ["bytes", "sentencepiece"])
def test_special_ids_are_the_hugging_face_exports(tmp_path, sentencepiece_run, kind):
    """Issue 31: the byte-level GGUF had no bos id, so llama.cpp took its gpt2 default, 11 (a 0x0B
    byte), where the Hugging Face export says 256. Both exports of one checkpoint now name the same
    ids: the GGUF's tokenizer.ggml.*_token_id, config.json and AutoTokenizer's."""
    pytest.importorskip("transformers")
    from enlace_model.export import export_hf
    from transformers import AutoTokenizer

    if kind == "bytes":
        _, run = byte_run(tmp_path, tiny_config(vocab_size=BYTE_ROWS))
    else:
        run = sentencepiece_run().run
    folder = export_hf(run, tmp_path / "hf")
    f = fields(gguf.GGUFReader(export_gguf(run, tmp_path / "m.gguf", outtype="f32")))
    gguf_key = {"bos": "bos", "eos": "eos", "pad": "padding", "unk": "unknown"}
    in_gguf = {role: f.get(f"tokenizer.ggml.{key}_token_id") for role, key in gguf_key.items()}
    tok = AutoTokenizer.from_pretrained(folder)
    assert {role: getattr(tok, f"{role}_token_id") for role in gguf_key} == in_gguf
    config = json.loads((folder / "config.json").read_text())
    assert {role: config[f"{role}_token_id"] for role in ("bos", "eos", "pad")} == {
        role: in_gguf[role] for role in ("bos", "eos", "pad")
    }
    eot = ByteTokenizer.eot_id if kind == "bytes" else 1
    assert in_gguf == {"bos": eot, "eos": eot, "pad": eot, "unk": None if kind == "bytes" else 0}
    assert f["tokenizer.ggml.add_bos_token"] is False  # named, never prepended (as Enlace)


def test_chat_template_hook_overrides(tmp_path, sentencepiece_run):
    run = sentencepiece_run()
    plain = fields(gguf.GGUFReader(export_gguf(run.run, tmp_path / "a.gguf", outtype="f32")))
    assert plain["tokenizer.chat_template"] == ENLACE_CHAT_TEMPLATE  # enlace-data's, saved
    path = export_gguf(run.run, tmp_path / "b.gguf", outtype="f32", chat_template=CHAT_TEMPLATE)
    assert fields(gguf.GGUFReader(path))["tokenizer.chat_template"] == CHAT_TEMPLATE


def test_cli_gguf_and_errors(tmp_path, capsys):
    _, run = byte_run(tmp_path, tiny_config(vocab_size=BYTE_ROWS))
    out = tmp_path / "out" / "m.gguf"
    assert cli_main(["export", str(run), str(out), "--format", "gguf", "--type", "q8_0"]) == 0
    assert "exported" in capsys.readouterr().out
    assert fields(gguf.GGUFReader(out))["general.file_type"] == 7
    assert not list(out.parent.glob(".*tmp*"))  # written under a temporary name, then renamed
    assert cli_main(["export", str(run), str(tmp_path), "--format", "gguf"]) == 2
    assert "is a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["export", str(run), str(out), "--format", "gguf", "--type", "q3"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli_main(["export", str(run), str(out), "--format", "gguf", "--tokenizer", str(tmp_path)])
    assert e.value.code == 2
    # A model whose tokenizer is missing cannot become a llama.cpp file.
    cfg = tiny_config(vocab_size=300)
    model = build_model(cfg)
    with atomic_checkpoint(tmp_path / "r2", 1) as d:
        save_model(d, model, cfg)
    assert (
        cli_main(["export", str(tmp_path / "r2"), str(tmp_path / "x.gguf"), "--format", "gguf"])
        == 2
    )
    assert "no tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


def test_folder_resaved_by_transformers_still_exports(tmp_path, sentencepiece_run):
    """save_pretrained drops tokenizer.model (transformers 5 writes only tokenizer.json): the GGUF
    export reads its vocabulary from tokenizer.json, so the re-saved folder gives the same file."""
    pytest.importorskip("transformers")
    from enlace_model.export import export_hf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = sentencepiece_run(chat_template=CHAT_TEMPLATE)
    folder = export_hf(run.run, tmp_path / "hf")
    resaved = tmp_path / "resaved"
    AutoTokenizer.from_pretrained(folder).save_pretrained(resaved)
    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(resaved)
    assert not (resaved / "tokenizer.model").exists()
    a = fields(gguf.GGUFReader(export_gguf(run.run, tmp_path / "a.gguf", outtype="f32")))
    b = fields(gguf.GGUFReader(export_gguf(resaved, tmp_path / "b.gguf", outtype="f32")))
    tokenizer_keys = [k for k in a if k.startswith("tokenizer.")]
    assert {k: a[k] for k in tokenizer_keys} == {k: b.get(k) for k in tokenizer_keys}
    ta, tb = gguf_tensors(tmp_path / "a.gguf"), gguf_tensors(tmp_path / "b.gguf")
    assert sorted(ta) == sorted(tb)
    for name, (_, data) in ta.items():
        np.testing.assert_array_equal(tb[name][1], data, err_msg=name)
