"""Batch-1 decoding of tiny-50m through llama.cpp (the GGUF export in f32, f16, q8_0) beside
`enlace_model.generate` and transformers (fp32), side by side in one run on this CPU.

    export LLAMA_CPP_LIB_PATH=$(dirname "$(scripts/build-llama-server.sh)")   # llama.cpp's libllama
    uv run --group llamacpp python benchmarks/bench_gguf.py [--threads 2] [--repeats 3] [--new-tokens 64]

Same random weights everywhere (tiny-50m: width 512, 8 layers, vocabulary 32768, tied). The GGUF
vocabulary is a stand-in (256 bytes plus control tokens up to 32768 ids): decoding speed does not
depend on what the tokens spell, and training a 32k SentencePiece model would cost minutes.
llama.cpp decodes through its own sampler (greedy), as its server does. Each implementation's time
per new token is the median over interleaved rounds (the load average is printed each round: the
machine is shared). The read-bandwidth bound for each weight size is the bytes of weights read per
token (every matrix once, the tied head included) over the measured read bandwidth.
Target for the home server: q8_0 through llama.cpp >= 2.5x Enlace's fp32 decoding.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
from bench_model import TINY_50M, read_bandwidth
from enlace_data.tokenizer.files import byte_tokenizer_json
from enlace_model import atomic_checkpoint, build_model, generate, save_model
from enlace_model.export import export_hf
from enlace_model.gguf_export import export_gguf

TYPES = ("f32", "f16", "q8_0")


def stand_in_tokenizer(folder: Path, vocab_size: int) -> None:
    """tokenizer.json with the 256 byte tokens and control tokens for the remaining ids."""
    tok = byte_tokenizer_json()
    tok["added_tokens"] = [
        {"id": i, "content": f"<|bench_{i}|>", "special": True} for i in range(256, vocab_size)
    ]
    (folder / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")


def weight_bytes(path: Path) -> int:
    """Bytes of tensor data in a GGUF file (the tied head reads the embedding: counted once)."""
    import gguf

    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-tokens", type=int, default=16)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    import llama_cpp
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, llama-cpp-python "
        f"{llama_cpp.__version__}, threads {args.threads}, load average {os.getloadavg()}"
    )
    cfg = TINY_50M
    model = build_model(cfg).eval()
    tmp = Path(tempfile.mkdtemp(prefix="bench-gguf-"))
    with atomic_checkpoint(tmp / "run", 0) as d:
        save_model(d, model, cfg)
    hf_dir = export_hf(tmp / "run", tmp / "hf")
    stand_in_tokenizer(hf_dir, cfg.vocab_size)
    files = {t: export_gguf(hf_dir, tmp / f"{t}.gguf", outtype=t) for t in TYPES}
    hf = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    llms = {
        t: llama_cpp.Llama(
            model_path=str(p),
            n_ctx=256,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            verbose=False,
        )
        for t, p in files.items()
    }
    prompt = torch.randint(256, cfg.vocab_size, (args.prompt_tokens,)).tolist()
    new = args.new_tokens

    def run_llama(llm) -> float:
        llm.reset()
        stream = llm.generate(prompt, top_k=1, temp=0.0, reset=True)
        next(stream)  # the prompt is evaluated and the first token sampled
        t0 = time.perf_counter()
        for _, _ in zip(range(new), stream, strict=False):
            pass
        return (time.perf_counter() - t0) / new

    def run_enlace() -> float:
        t0 = time.perf_counter()
        generate(model, [prompt], new)
        return (time.perf_counter() - t0) / new

    def run_hf() -> float:
        ids = torch.tensor([prompt])
        t0 = time.perf_counter()
        with torch.inference_mode():
            hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )
        return (time.perf_counter() - t0) / new

    runners = {f"llama.cpp {t}": (lambda llm=llm: run_llama(llm)) for t, llm in llms.items()}
    runners |= {"enlace fp32": run_enlace, "transformers fp32": run_hf}
    for fn in runners.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {name: [] for name in runners}
    for r in range(args.repeats):
        for name, fn in runners.items():
            times[name].append(fn())
        print(
            f"round {r + 1}: "
            + ", ".join(f"{n} {t[-1] * 1e3:.2f}" for n, t in times.items())
            + f" ms/token (load {os.getloadavg()[0]:.1f})"
        )

    bw = read_bandwidth()
    fp32_bytes = weight_bytes(files["f32"])
    sizes = {f"llama.cpp {t}": weight_bytes(p) for t, p in files.items()}
    sizes |= {"enlace fp32": fp32_bytes, "transformers fp32": fp32_bytes}
    base = statistics.median(times["enlace fp32"])
    print(
        f"\nread bandwidth {bw / 1e9:.1f} GB/s (best of 9); {new} new tokens, prompt "
        f"{args.prompt_tokens}, median of {args.repeats} rounds; load average {os.getloadavg()}"
    )
    print(
        f"{'':20} {'weights MB':>10} {'ms/token':>9} {'tokens/s':>9} {'bound t/s':>9} "
        f"{'of bound':>8} {'vs enlace fp32':>14}"
    )
    for name, ts in times.items():
        t = statistics.median(ts)
        bound = bw / sizes[name]
        print(
            f"{name:20} {sizes[name] / 1e6:10.1f} {t * 1e3:9.2f} {1 / t:9.1f} {bound:9.1f} "
            f"{1 / t / bound:8.0%} {base / t:13.2f}x"
        )


if __name__ == "__main__":
    main()
