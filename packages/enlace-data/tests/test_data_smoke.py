"""The smoke corpus: Gutenberg cleaning, the pinned books, --from DIR, and downloads from a local server."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from enlace_config.schema.data import DataConfig
from enlace_data import DataError
from enlace_data.cli import main as cli_main
from enlace_data.gutenberg import clean_book, normalize_text, strip_gutenberg
from enlace_data.loader import build_loader, eval_batches
from enlace_data.smoke import BOOKS, Book, prepare_smoke

BODY = (
    "Capítulo primero\n\nEn un pueblo del valle vivía una familia que cocinaba los domingos.\n"
    "La abuela hacía pan, y los niños ayudaban.\n\n¿Quién sabe por qué llueve? ¡Nadie!\n"
)


def _pg_file(body: str, *, title: str = "PRUEBA", style: int = 0) -> bytes:
    """A Project Gutenberg-style file around `body`, in a few historical variants."""
    start, end = [
        (
            f"*** START OF THIS PROJECT GUTENBERG EBOOK {title} ***",
            f"*** END OF THIS PROJECT GUTENBERG EBOOK {title} ***",
        ),
        (
            f"***START OF THE PROJECT GUTENBERG EBOOK {title}***",
            f"***END OF THE PROJECT GUTENBERG EBOOK {title}***",
        ),
        (
            f"*** START OF THE PROJECT GUTENBERG EBOOK {title} ***",
            f"*** END OF THE PROJECT GUTENBERG EBOOK {title} ***",
        ),
    ][style % 3]
    text = (
        f"The Project Gutenberg EBook of {title}\n\nThis eBook is for the use of anyone anywhere.\n\n"
        f"{start}\n\n\n\nProduced by Some Volunteers and the Online Distributed\n"
        "Proofreading Team at http://www.pgdp.net\n\n\n"
        f"{body}\n\n\n\nEnd of the Project Gutenberg EBook of {title}\n\n{end}\n\n"
        "***** This file should be named 1-8.txt *****\n\nSTART: FULL LICENSE\nGutenberg terms.\n"
    )
    if style == 1:
        return (
            "\ufeff".encode() + text.replace("\n", "\r\r\n").encode()
        )  # the es-pd originals' endings
    if style == 2:
        return unicodedata.normalize("NFD", text).replace("\n", "\r\n").encode()
    return text.encode()


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------- cleaning
@pytest.mark.parametrize("style", [0, 1, 2])
def test_clean_book_strips_header_footer_and_credits(style: int) -> None:
    cleaned = clean_book(_pg_file(BODY, style=style))
    assert cleaned == BODY
    assert "gutenberg" not in cleaned.lower() and "Produced by" not in cleaned
    assert unicodedata.is_normalized("NFC", cleaned) and "\r" not in cleaned


def test_clean_book_keeps_plain_text_and_normalises_it() -> None:
    raw = "Hola\r\n\r\n\r\n\r\nQué tal   \r\n".encode()
    assert clean_book(raw) == "Hola\n\nQué tal\n"
    assert normalize_text("e\u0301") == "é"
    assert clean_book("Latin-1 café".encode("latin-1")) == "Latin-1 café\n"
    # Without markers, a paragraph that merely mentions Gutenberg (history) stays.
    assert "Gutenberg" in strip_gutenberg("La imprenta de Gutenberg cambió el mundo.\n")


def _shared_books() -> Path:
    root = os.environ.get("ENLACE_SHARED_DATA")
    if not root:
        pytest.skip(
            "ENLACE_SHARED_DATA is not set: the shared es-pd books are needed (the test command sets it)"
        )
    books = Path(root) / "es-pd"
    if not books.is_dir():
        pytest.skip(f"{books} does not exist: the shared es-pd books are needed")
    return books


@pytest.fixture(scope="module")
def cleaned_shared() -> dict[str, str]:
    books = _shared_books()
    return {b.name: clean_book((books / f"{b.name}.txt").read_bytes()) for b in BOOKS}


def test_pins_match_the_shared_books(cleaned_shared: dict[str, str]) -> None:
    for book in BOOKS:
        cleaned = cleaned_shared[book.name]
        assert _sha(cleaned) == book.sha256, book.name
        assert "gutenberg" not in cleaned.lower(), book.name
        assert len(cleaned) > 50_000, book.name


def test_smoke_from_shared_books(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cleaned_shared: dict[str, str]
) -> None:
    books = _shared_books()
    out = tmp_path / "data" / "smoke"
    assert cli_main(["smoke", "--from", str(books), "--out", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("verified") == len(BOOKS)
    train, val = (out / "train.txt").read_bytes(), (out / "val.txt").read_bytes()
    manifest = json.loads((out / "sources.json").read_text())
    assert [b["name"] for b in manifest["books"]] == [b.name for b in BOOKS]
    assert all(b["verified"] for b in manifest["books"])
    assert 0.03 < len(val) / (len(train) + len(val)) < 0.08
    # Per book, train part + val part is the cleaned book: a partition, so no overlap.
    pos_t = pos_v = 0
    for b in manifest["books"]:
        whole = cleaned_shared[b["name"]].encode()
        part_t = train[pos_t : pos_t + b["train_bytes"]]
        part_v = val[pos_v : pos_v + b["val_bytes"]]
        assert part_t + part_v == whole
        pos_t += b["train_bytes"]
        pos_v += b["val_bytes"] + 1  # one "\n" between val parts
    assert pos_t == len(train) and pos_v == len(val) + 1
    # The loaders read it.
    cfg = DataConfig(kind="bytes", path=str(out), context_length=64, eval_batches=2)
    loader = build_loader(cfg, micro_batch_size=2, seed=0)
    assert loader.description == f"prepared corpus {out}"
    x, _ = next(loader)
    assert x.shape == (2, 64)
    assert len(eval_batches(cfg, micro_batch_size=2)) == 2


def test_from_dir_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["smoke", "--from", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "needs a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert cli_main(["smoke", "--from", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "no .txt files" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    with pytest.raises(DataError):
        cli_main(
            ["--debug", "smoke", "--from", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]
        )


def test_from_dir_accepts_unpinned_text(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(_pg_file(BODY * 40))
    result = prepare_smoke(tmp_path / "out", source_dir=src, progress=False, log=lambda _m: None)
    assert [b.verified for b in result.books] == [False]
    written = (tmp_path / "out" / "train.txt").read_bytes() + (
        tmp_path / "out" / "val.txt"
    ).read_bytes()
    assert written == clean_book(_pg_file(BODY * 40)).encode()
    assert result.train_bytes > result.val_bytes > 0


# ---------------------------------------------------------------------------- downloads
class _Server:
    """A threaded HTTP server on 127.0.0.1 (port 0) serving `routes`; modes per path."""

    def __init__(self) -> None:
        self.routes: dict[str, bytes] = {}
        self.cut: set[str] = set()
        routes, cut = self.routes, self.cut

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = routes.get(self.path)
                if body is None:
                    self.send_error(404, "Not Found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.path in cut:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


def _synthetic_books(server: _Server, tmp_path: Path, n: int = 3) -> Path:
    books = []
    for i in range(n):
        body = f"Libro {i}.\n\n" + "".join(
            f"Párrafo {j} del libro {i}: la casa, el río y el pan.\n\n" for j in range(200)
        )
        raw = _pg_file(body, title=f"LIBRO {i}", style=i)
        server.routes[f"/cache/epub/{i}/pg{i}.txt"] = raw
        books.append(
            {
                "name": f"libro-{i}",
                "url": f"cache/epub/{i}/pg{i}.txt",
                "sha256": _sha(clean_book(raw)),
            }
        )
    path = tmp_path / "books.json"
    path.write_text(json.dumps(books))
    return path


def _smoke(server: _Server, books: Path, out: Path, *extra: str) -> int:
    return cli_main(
        ["smoke", "--url-base", server.base, "--books", str(books), "--out", str(out), *extra]
    )


def test_download_success_with_progress(
    server: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = _synthetic_books(server, tmp_path)
    out = tmp_path / "smoke"
    assert _smoke(server, books, out) == 0
    err = capsys.readouterr().err
    assert "[1/3] libro-0" in err and "[3/3]" in err and "wrote" in err
    assert "100%" in err or "B/s" in err  # the progress bar
    train = (out / "train.txt").read_text()
    assert "Libro 0." in train and "Libro 2." in train and "Gutenberg" not in train
    assert sorted(os.listdir(out)) == ["sources.json", "train.txt", "val.txt"]


def _previous_corpus(out: Path) -> None:
    out.mkdir(parents=True)
    (out / "train.txt").write_text("old train")
    (out / "val.txt").write_text("old val")


def _assert_untouched(out: Path) -> None:
    assert (out / "train.txt").read_text() == "old train"
    assert (out / "val.txt").read_text() == "old val"
    assert sorted(os.listdir(out)) == ["train.txt", "val.txt"]  # no temporaries left


def test_checksum_mismatch_writes_nothing(
    server: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = _synthetic_books(server, tmp_path)
    server.routes["/cache/epub/1/pg1.txt"] = server.routes["/cache/epub/1/pg1.txt"].replace(
        b"casa", b"cosa"
    )
    out = tmp_path / "smoke"
    _previous_corpus(out)
    assert _smoke(server, books, out, "--quiet") == 2
    err = capsys.readouterr().err
    assert (
        "checksum mismatch for libro-1" in err
        and "/cache/epub/1/pg1.txt" in err
        and "Traceback" not in err
    )
    _assert_untouched(out)


def test_http_404_writes_nothing(
    server: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = _synthetic_books(server, tmp_path)
    del server.routes["/cache/epub/2/pg2.txt"]
    out = tmp_path / "smoke"
    assert _smoke(server, books, out, "--quiet") == 2
    err = capsys.readouterr().err
    assert "HTTP 404" in err and "pg2.txt" in err and "--from DIR" in err
    assert not out.exists()


def test_connection_cut_mid_file_writes_nothing(
    server: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = _synthetic_books(server, tmp_path)
    server.cut.add("/cache/epub/1/pg1.txt")
    out = tmp_path / "smoke"
    _previous_corpus(out)
    assert _smoke(server, books, out, "--quiet") == 2
    err = capsys.readouterr().err
    assert "was cut after" in err and "pg1.txt" in err
    _assert_untouched(out)


def test_unreachable_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _Server()
    base = s.base
    s.close()  # nothing listens on that port any more
    books = tmp_path / "books.json"
    books.write_text(json.dumps([{"name": "x", "url": "x.txt", "sha256": "0" * 64}]))
    assert (
        cli_main(
            [
                "smoke",
                "--url-base",
                base,
                "--books",
                str(books),
                "--out",
                str(tmp_path / "o"),
                "--quiet",
            ]
        )
        == 2
    )
    assert "cannot reach" in capsys.readouterr().err


def test_bad_books_file_and_unknown_book(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    books = tmp_path / "books.json"
    books.write_text('[{"name": "x"}]')
    assert cli_main(["smoke", "--books", str(books)]) == 2
    assert "JSON list" in capsys.readouterr().err
    assert cli_main(["smoke", "--book", "no-such-book"]) == 2
    assert "unknown book" in capsys.readouterr().err


def test_download_real_books_from_local_mirror(server: _Server, tmp_path: Path) -> None:
    """The pinned list itself, served from the shared copies as Gutenberg would serve them."""
    shared = _shared_books()
    chosen = [b for b in BOOKS if b.name in ("hernandez-el-gaucho-martin-fierro", "dario-azul")]
    for book in chosen:
        server.routes["/" + book.url] = (shared / f"{book.name}.txt").read_bytes()
    out = tmp_path / "smoke"
    args = ["smoke", "--url-base", server.base, "--out", str(out), "--quiet"]
    for book in chosen:
        args += ["--book", book.name]
    assert cli_main(args) == 0
    manifest = json.loads((out / "sources.json").read_text())
    assert [b["name"] for b in manifest["books"]] == [b.name for b in chosen]
    assert all(b["verified"] for b in manifest["books"])


def test_pinned_urls_are_gutenberg_plain_text() -> None:
    assert len(BOOKS) == 14 and len({b.sha256 for b in BOOKS}) == 14
    for book in BOOKS:
        assert isinstance(book, Book)
        assert book.url.startswith("cache/epub/") and book.url.endswith(".txt")


def test_download_errors_name_the_url() -> None:
    err = DataError("download failed for http://127.0.0.1:9/x.txt", path="http://127.0.0.1:9/x.txt")
    assert err.path == "http://127.0.0.1:9/x.txt"
    assert isinstance(DataError("bad", path="data/x.shard").path, Path)


@pytest.mark.parametrize("damage", ["truncated", "latin-1"])
def test_from_dir_refuses_a_pinned_book_that_does_not_match_and_keeps_the_old_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    body = (BODY + "Dijo «adiós» — y se fue… “lejos”.\n\n") * 40  # “—…” are not in Latin-1
    good = _pg_file(body)
    other = _pg_file(BODY * 30, title="OTRO")
    books_file = tmp_path / "books.json"
    books_file.write_text(
        json.dumps(
            [
                {"name": "libro", "url": "x", "sha256": _sha(clean_book(good))},
                {"name": "otro", "url": "y", "sha256": _sha(clean_book(other))},
            ]
        )
    )
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "libro.txt").write_bytes(good)
    (src / "otro.txt").write_bytes(other)
    args = ["smoke", "--from", str(src), "--out", str(out), "--books", str(books_file), "--quiet"]
    assert cli_main(args) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    if damage == "truncated":
        (src / "libro.txt").write_bytes(good[: len(good) * 2 // 3])
    else:
        (src / "libro.txt").write_bytes(good.decode().encode("latin-1", errors="replace"))
    capsys.readouterr()
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "libro.txt" in err and "sha256" in err and "Traceback" not in err
    if damage == "latin-1":
        assert "not UTF-8" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # the old corpus, intact
