"""Stage 2 sources: a Hugging Face Hub dataset read through huggingface_hub against a local
server (HF_ENDPOINT on 127.0.0.1: listing, download, resume of a cut download, only the files a
limit needs, the offline cache), and a build killed from outside that resumes to the same bytes."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest
from enlace_data.shards import list_shards

SAMPLE = (Path(__file__).parent / "sample_es.txt").read_text(encoding="utf-8")
PARAGRAPHS = [p for p in SAMPLE.split("\n\n") if len(p) > 300]
REPO = "org/es-web"
COMMIT = "a1" * 20


def spanish_doc(k: int) -> str:
    rng = random.Random(k)
    words = " ".join(rng.choice(PARAGRAPHS) for _ in range(3)).split()
    rng.shuffle(words)
    return " ".join(words)


def parquet_bytes(texts: list[str], padding: int = 0) -> bytes:
    """A parquet file of `texts`, with an unread column of `padding` random bytes (to make a file
    larger than huggingface_hub's 10 MB download chunk, which is what a resume restarts from)."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    pad = [b""] * len(texts)
    pad[0] = random.Random(0).randbytes(padding)
    buf = io.BytesIO()
    table = pa.table({"text": texts, "blob": pad})
    pq.write_table(table, buf, row_group_size=8, compression="none")
    return buf.getvalue()


class HubServer:
    """Just enough of the Hub's API for huggingface_hub: the tree listing and resolve/ with HEAD,
    ETag, X-Repo-Commit and Range. `requests` logs (method, path, Range header)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.cut_once: set[str] = set()  # files whose next full GET stops after half the bytes
        self.requests: list[tuple[str, str, str | None]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self, head: bool) -> None:
                path = unquote(urlparse(self.path).path)
                server.requests.append((self.command, path, self.headers.get("Range")))
                tree = f"/api/datasets/{REPO}/tree/main"
                resolve = f"/datasets/{REPO}/resolve/main/"
                if path == tree:
                    entries = [
                        {
                            "type": "file",
                            "path": p,
                            "size": len(b),
                            "oid": hashlib.sha1(b).hexdigest(),
                        }
                        for p, b in sorted(server.files.items())
                    ]
                    return self._send(200, json.dumps(entries).encode(), head)
                if path.startswith(resolve) and path[len(resolve) :] in server.files:
                    data = server.files[path[len(resolve) :]]
                    start = 0
                    rng = self.headers.get("Range")
                    if rng and not head:
                        start = int(rng.removeprefix("bytes=").split("-")[0])
                    etag = hashlib.sha256(data).hexdigest()
                    extra = {"ETag": f'"{etag}"', "X-Repo-Commit": COMMIT}
                    if start:
                        extra["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
                    if not head and not start and path in server.cut_once:
                        server.cut_once.discard(path)
                        self.send_response(200)
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data[: len(data) * 7 // 8])  # the connection drops here
                        self.close_connection = True
                        return None
                    return self._send(206 if start else 200, data[start:], head, extra)
                self._send(404, b'{"error": "not found"}', head, {"X-Error-Code": "RepoNotFound"})

            def _send(
                self, code: int, body: bytes, head: bool, extra: dict[str, str] | None = None
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(head=False)

            def do_HEAD(self) -> None:
                self._serve(head=True)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


FILE_DOCS = 40
FILES = {
    f"data/spa_Latn/train/{i:03d}.parquet": parquet_bytes(
        [spanish_doc(FILE_DOCS * i + k) for k in range(FILE_DOCS)], (12 << 20) if i == 2 else 0
    )
    for i in range(3)
}
FILES["data/por_Latn/train/000.parquet"] = parquet_bytes(["nada"])
FILES["README.md"] = b"# es-web\n"


@pytest.fixture
def hub() -> Iterator[HubServer]:
    server = HubServer(FILES)
    yield server
    server.close()


def hub_config(out: Path, **source: Any) -> dict[str, Any]:
    return {
        "name": "hub",
        "out_dir": str(out),
        "sources": [
            {
                "name": "web",
                "kind": "hub",
                "dataset": REPO,
                "subset": "spa_Latn",
                "files": "data/{subset}/{split}/*.parquet",
                **source,
            }
        ],
        "split": {"val_fraction": 0.1},
        "tokenizer": {"vocab_size": 512, "num_threads": 1},
        "encoding": {"shard_tokens": 2000, "workers": 1, "batch_chars": 4000},
    }


def run_corpus(
    tmp_path: Path, cfg: dict[str, Any], env: dict[str, str], name: str = "c.yaml"
) -> subprocess.CompletedProcess[str]:
    cfg_file = tmp_path / name
    cfg_file.write_text(json.dumps(cfg))
    return subprocess.run(
        [sys.executable, "-m", "enlace_data.cli", "corpus", str(cfg_file), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def hub_env(tmp_path: Path, server: HubServer, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=server.url,
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        **extra,
    )
    return env


def test_hub_source_downloads_only_what_it_reads_once_and_resumes_a_cut_download(
    tmp_path: Path, hub: HubServer
) -> None:
    env = hub_env(tmp_path, hub)
    proc = run_corpus(tmp_path, hub_config(tmp_path / "out", max_docs=FILE_DOCS + 5), env)
    assert proc.returncode == 0, proc.stderr

    def gets() -> list[tuple[str, str | None]]:
        return [
            (p.rsplit("/", 1)[1], r) for m, p, r in hub.requests if m == "GET" and "/resolve/" in p
        ]

    assert gets() == [("000.parquet", None), ("001.parquet", None)]  # not 002: past the limit
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    web = report["sources"]["web"]
    assert web["read"]["docs"] == FILE_DOCS + 5 and web["read"]["files"] == 2
    assert web["stopped_at_limit"]
    assert list_shards(tmp_path / "out", "train")

    # The whole dataset: files already in the cache are not downloaded again, and a download
    # whose connection drops halfway resumes from where it stopped (a Range request).
    hub.requests.clear()
    third = f"/datasets/{REPO}/resolve/main/data/spa_Latn/train/002.parquet"
    hub.cut_once.add(third)
    proc = run_corpus(tmp_path, hub_config(tmp_path / "all"), env)
    assert proc.returncode == 0, proc.stderr
    size = len(FILES["data/spa_Latn/train/002.parquet"])
    (first, no_range), (again, rng) = gets()
    assert first == again == "002.parquet" and no_range is None and rng is not None
    assert 0 < int(rng.removeprefix("bytes=").rstrip("-")) < size
    report = json.loads((tmp_path / "all" / "report.json").read_text())
    assert report["sources"]["web"]["read"]["docs"] == 3 * FILE_DOCS

    # Offline, from the cache alone: the same documents, no request to the server.
    hub.requests.clear()
    offline = hub_env(tmp_path, hub, HF_HUB_OFFLINE="1")
    proc = run_corpus(tmp_path, hub_config(tmp_path / "out2", max_docs=FILE_DOCS + 5), offline)
    assert proc.returncode == 0, proc.stderr
    assert hub.requests == []
    manifest = [json.loads((tmp_path / o / "manifest.json").read_text()) for o in ("out", "out2")]
    assert manifest[0]["splits"] == manifest[1]["splits"]


def test_hub_errors_are_one_clear_message(tmp_path: Path, hub: HubServer) -> None:
    env = hub_env(tmp_path, hub)
    cfg = hub_config(tmp_path / "out")
    cfg["sources"][0]["dataset"] = "org/missing"
    proc = run_corpus(tmp_path, cfg, env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'org/missing' does not exist on the Hub" in proc.stderr
    cfg = hub_config(tmp_path / "out", files="data/{subset}/test/*.parquet")
    proc = run_corpus(tmp_path, cfg, env)
    assert proc.returncode == 2 and "matches 'data/spa_Latn/test/*.parquet'" in proc.stderr
    offline = hub_env(tmp_path, hub, HF_HUB_OFFLINE="1")
    proc = run_corpus(tmp_path, hub_config(tmp_path / "out"), offline)
    assert proc.returncode == 2 and "HF_HUB_OFFLINE" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_build_killed_from_outside_resumes_to_the_same_bytes(
    tmp_path: Path, hub: HubServer
) -> None:
    env = hub_env(tmp_path, hub)
    cfg = hub_config(tmp_path / "whole")
    assert run_corpus(tmp_path, cfg, env).returncode == 0
    whole = {p.name: p.read_bytes() for p in (tmp_path / "whole").glob("*.shard")}
    assert len(whole) >= 4
    cfg_file = tmp_path / "k.yaml"
    out = tmp_path / "killed"
    cfg_file.write_text(json.dumps(hub_config(out)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "enlace_data.cli", "corpus", str(cfg_file), "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(list(out.glob("train_*.shard"))) < 2 and time.monotonic() < deadline:
        assert proc.poll() is None, "the build finished before it could be killed"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists()  # written last: an unfinished build has none
    done = {p.name: p.stat().st_mtime_ns for p in out.glob("*.shard")}
    assert run_corpus(tmp_path, hub_config(out), env, "k.yaml").returncode == 0
    for name, stamp in done.items():  # finished shards were not redone
        assert (out / name).stat().st_mtime_ns == stamp
    assert {p.name: p.read_bytes() for p in out.glob("*.shard")} == whole
