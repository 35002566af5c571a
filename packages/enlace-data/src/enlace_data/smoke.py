"""`enlace-data smoke`: prepare the smoke corpus (data/smoke/train.txt and val.txt).

It downloads a pinned list of public-domain Spanish books from Project Gutenberg (`--url-base`: a
mirror; `--books FILE`: another list, a JSON list of {"name", "url", "sha256"}), or reads local .txt
files (`--from DIR`), cleans each (`gutenberg.clean_book`) and checks the sha256 of the cleaned
text against its pin: the pins were computed from the shared test data's copies, so they survive
Gutenberg changing its boilerplate. A local file named like a pinned book (``<name>.txt``) must
match its pin, so a truncated or re-encoded copy never slips in; other local files are used as
they are. Each book splits at the first paragraph break at or after 95% of its bytes (train before,
val after). Everything is checked in memory first, then the files are written atomically, so a
failed download leaves an earlier corpus untouched.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from enlace_data._fs import json_bytes, write_atomic
from enlace_data.errors import DataError
from enlace_data.gutenberg import clean_book
from enlace_data.sample import split_point

DEFAULT_URL_BASE = "https://www.gutenberg.org"
DEFAULT_OUT = Path("data/smoke")
VAL_FRACTION = 0.05
TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Book:
    name: str
    url: str  # absolute, or relative to the URL base
    sha256: str  # of the cleaned text (UTF-8)
    title: str = ""


def _pg(name: str, pg_id: int, sha256: str, title: str) -> Book:
    return Book(name=name, url=f"cache/epub/{pg_id}/pg{pg_id}.txt", sha256=sha256, title=title)


# Pinned: name (as in es-pd/), Project Gutenberg number, sha256 of the cleaned text.
BOOKS: tuple[Book, ...] = (
    _pg("becquer-obras-escogidas", 53552, "be4a4d558e0f23075ac9d1476d7e46dc278209750efa5f8401a257ca441f7f37", "Bécquer, Obras escogidas"),
    _pg("blasco-ibanez-la-barraca", 14944, "6c2c8d39be24bdf189450257a14f8c0251b780e6a34987c90fdaf50e55f8f939", "Blasco Ibáñez, La barraca"),
    _pg("cervantes-don-quijote", 2000, "89ad3edee52affda1189fa61496b4cc8df5466dd814e1d854325e91ba5e1e0fc", "Cervantes, Don Quijote"),
    _pg("clarin-la-regenta", 17073, "d4b8f2c513bdb2007df77fb3487746bbfddcfbe9454b2960df994705dda17e4e", "Clarín, La Regenta"),
    _pg("dario-azul", 52894, "db2189cf7b3033539bd6354a0e835abc1b3f3300b94ef68c3376901a8381b0d7", "Darío, Azul..."),
    _pg("hernandez-el-gaucho-martin-fierro", 14765, "db5d95c78527a79f63f9f2978f440b159e6e75a7be811d7f0b7d5e65ab9e8d7d", "Hernández, El gaucho Martín Fierro"),
    _pg("marti-la-edad-de-oro", 19898, "ab39341e3b076ac03feda04ccb8fcad8672d85366560304ba143dc4445b31951", "Martí, La Edad de Oro"),
    _pg("palma-tradiciones-peruanas", 21282, "303a5408adfb5216e063c945b89ae036948f413bc6d02cd0d3f45a2a2dabc58a", "Palma, Tradiciones peruanas"),
    _pg("pardo-bazan-los-pazos-de-ulloa", 18005, "a6094c9fa33f54219049e259533c1c7bf9973258345de3fe04090360cf0548b3", "Pardo Bazán, Los pazos de Ulloa"),
    _pg("perez-galdos-misericordia", 21831, "69d5eb4cbb47c8a8b84173bbc9901f6640ee2df8db121d1414e1f84c69313552", "Pérez Galdós, Misericordia"),
    _pg("quiroga-cuentos-de-amor-de-locura-y-de-muerte", 13507, "b5fe6ada8dcc38ff746ede6057f2862c4242aedfc45dea8b0c07ad03f4c58d95", "Quiroga, Cuentos de amor de locura y de muerte"),
    _pg("riva-palacio-monja-y-casada-virgen-y-martir", 49560, "69533e70c2f473974cc17667a42dcc53606d14f096682a95e226f16de099bc53", "Riva Palacio, Monja y casada, vírgen y mártir"),
    _pg("unamuno-niebla", 49836, "5d7ac83099b8283d5a14586fe88c2fc7f16b64d1893e7fe9c92dc29a062eae3d", "Unamuno, Niebla"),
    _pg("valera-pepita-jimenez", 17223, "4659b41d15950508cb7afacadbd50935e469b5affc54c628076cd2d8ccd560f5", "Valera, Pepita Jiménez"),
)  # fmt: skip


@dataclass
class PreparedBook:
    name: str
    source: str
    sha256: str
    verified: bool
    train_bytes: int
    val_bytes: int


@dataclass
class SmokeResult:
    out_dir: Path
    books: list[PreparedBook]
    train_bytes: int
    val_bytes: int


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------- download
def download(url: str, *, label: str, progress: bool = True, timeout: float = TIMEOUT_S) -> bytes:
    """GET `url` into memory with a progress bar; every failure is a DataError naming the URL."""
    from tqdm import tqdm

    hint = "check the network, or prepare from local files with `enlace-data smoke --from DIR`"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            data = bytearray()
            with tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc=label[:40],
                disable=not progress,
                file=sys.stderr,
                leave=False,
            ) as bar:
                while chunk := resp.read(1 << 16):
                    data += chunk
                    bar.update(len(chunk))
    except urllib.error.HTTPError as e:
        raise DataError(
            f"download failed: HTTP {e.code} {e.reason} for {url}; {hint}", path=url
        ) from None
    except urllib.error.URLError as e:
        raise DataError(f"cannot reach {url}: {e.reason}; {hint}", path=url) from None
    except (http.client.IncompleteRead, ConnectionError, http.client.HTTPException) as e:
        raise DataError(
            f"download of {url} was cut ({type(e).__name__}: {e}); rerun to retry, or {hint}",
            path=url,
        ) from None
    except TimeoutError:
        raise DataError(
            f"download of {url} timed out after {timeout:.0f} s; {hint}", path=url
        ) from None
    if total is not None and len(data) != total:
        raise DataError(
            f"download of {url} was cut after {len(data)} of {total} bytes; rerun to retry, or "
            f"{hint}",
            path=url,
        )
    return bytes(data)


def _resolve(url: str, base: str) -> str:
    if urllib.parse.urlparse(url).scheme:
        return url
    return base.rstrip("/") + "/" + url.lstrip("/")


def load_books_file(path: Path) -> tuple[Book, ...]:
    """A JSON list of {"name", "url", "sha256"[, "title"]} replacing the pinned list."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        books = tuple(Book(**item) for item in items)
    except FileNotFoundError:
        raise DataError("books file does not exist", path=path) from None
    except (ValueError, TypeError) as e:
        raise DataError(
            f'books file must be a JSON list of {{"name", "url", "sha256"}} objects: {e}', path=path
        ) from None
    if not books:
        raise DataError("books file lists no books", path=path)
    return books


# ----------------------------------------------------------------------------- prepare
def _collect_remote(
    books: Sequence[Book], url_base: str, progress: bool, log: Any
) -> list[tuple[Book, str, str, bool]]:
    out: list[tuple[Book, str, str, bool]] = []
    for i, book in enumerate(books, 1):
        url = _resolve(book.url, url_base)
        log(f"[{i}/{len(books)}] {book.title or book.name}: {url}")
        text = clean_book(download(url, label=book.name, progress=progress))
        digest = _sha(text)
        if digest != book.sha256:
            raise DataError(
                f"checksum mismatch for {book.name} from {url}: the cleaned text has sha256 "
                f"{digest}, the pin is {book.sha256}. The book changed upstream or the download is "
                "corrupt; nothing was written. Rerun, or prepare from local copies with "
                "`enlace-data smoke --from DIR`",
                path=url,
            )
        out.append((book, url, text, True))
    return out


def _collect_local(
    source_dir: Path, books: Sequence[Book], log: Any
) -> list[tuple[Book, str, str, bool]]:
    """Every *.txt of `source_dir`. A file named like a pinned book (``<name>.txt``) must hold
    that book: a text whose sha256 differs from the pin (truncated, another encoding, another
    edition) is an error, reported for every such file at once, before anything is written."""
    if not source_dir.is_dir():
        raise DataError("--from needs a directory of .txt files", path=source_dir)
    files = sorted(source_dir.glob("*.txt"))
    if not files:
        raise DataError("no .txt files in this directory", path=source_dir)
    by_sha = {b.sha256: b for b in books}
    by_name = {b.name: b for b in books}
    out: list[tuple[Book, str, str, bool]] = []
    mismatched: list[str] = []
    for f in files:
        raw = f.read_bytes()
        text = clean_book(raw)
        if not text.strip():
            raise DataError("no text left after cleaning; is it an empty or non-text file?", path=f)
        digest = _sha(text)
        pinned = by_sha.get(digest)
        named = by_name.get(f.stem)
        if named is not None and pinned is not named:
            try:
                raw.decode("utf-8-sig")
                why = ""
            except UnicodeDecodeError:
                why = ", and the file is not UTF-8 (it was read as Latin-1: convert it to UTF-8)"
            mismatched.append(
                f"{f} is named like pinned book {named.name!r} but its cleaned text ({len(text)} "
                f"characters) has sha256 {digest}, the pin is {named.sha256} (truncated or edited?{why})"
            )
            continue
        book = pinned or Book(name=f.stem, url=str(f), sha256=digest)
        log(
            f"{f.name}: {'verified (' + pinned.name + ')' if pinned else 'not in the pinned list, used as is'}"
        )
        out.append((book, str(f), text, pinned is not None))
    if mismatched:
        raise DataError(
            "pinned book(s) that do not match their pin; nothing was written (an earlier corpus "
            "is untouched): "
            + "; ".join(mismatched)
            + ". Copy the books again from the shared data or let `enlace-data smoke` download "
            "them; a file that is another text must not carry a pinned book's name",
            path=source_dir,
        )
    return out


def prepare_smoke(
    out_dir: str | Path = DEFAULT_OUT,
    *,
    source_dir: str | Path | None = None,
    url_base: str = DEFAULT_URL_BASE,
    books: Sequence[Book] = BOOKS,
    progress: bool = True,
    log: Any = None,
) -> SmokeResult:
    """Download (or read) the books, clean, verify, split, and write the corpus atomically."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    out = Path(out_dir)
    if source_dir is not None:
        collected = _collect_local(Path(source_dir), books, say)
    else:
        collected = _collect_remote(books, url_base, progress, say)
    train_parts: list[bytes] = []
    val_parts: list[bytes] = []
    prepared: list[PreparedBook] = []
    for book, source, text, verified in collected:
        data = text.encode("utf-8")
        cut = split_point(data, VAL_FRACTION)
        train_parts.append(data[:cut])
        val_parts.append(data[cut:])
        prepared.append(
            PreparedBook(book.name, source, book.sha256, verified, cut, len(data) - cut)
        )
    # Train parts end at a paragraph break; separate val parts by one blank line too.
    train, val = b"".join(train_parts), b"\n".join(val_parts)
    manifest = {
        "about": "Smoke corpus prepared by `enlace-data smoke`: cleaned texts, split per book "
        f"({1 - VAL_FRACTION:.0%} train / {VAL_FRACTION:.0%} val at a paragraph break).",
        "train_bytes": len(train),
        "val_bytes": len(val),
        "books": [asdict(b) for b in prepared],
    }
    write_atomic(
        {out / "train.txt": train, out / "val.txt": val, out / "sources.json": json_bytes(manifest)}
    )
    say(
        f"wrote {out / 'train.txt'} ({len(train)} bytes) and {out / 'val.txt'} ({len(val)} bytes) from {len(prepared)} books"
    )
    return SmokeResult(out, prepared, len(train), len(val))


# ----------------------------------------------------------------------------- CLI
def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "smoke",
        help="prepare the smoke corpus (data/smoke/train.txt, val.txt)",
        description="Download the pinned public-domain Spanish books from Project Gutenberg (or\n"
        "read local .txt files with --from), strip the Gutenberg header and footer, normalise,\n"
        "verify each cleaned text's sha256, and write train.txt and val.txt atomically.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  enlace-data smoke --out data/smoke",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="output directory (default: %(default)s)",
    )
    p.add_argument(
        "--from",
        dest="source_dir",
        type=Path,
        metavar="DIR",
        help="read local .txt files instead of downloading",
    )
    p.add_argument(
        "--url-base",
        metavar="URL",
        default=DEFAULT_URL_BASE,
        help="where relative book URLs point (default: %(default)s)",
    )
    p.add_argument(
        "--books", type=Path, metavar="FILE", help="JSON list of books replacing the pinned list"
    )
    p.add_argument(
        "--book", action="append", metavar="NAME", help="only this book of the list (repeatable)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    books = load_books_file(args.books) if args.books else BOOKS
    if args.book:
        known = {b.name for b in books}
        unknown = [n for n in args.book if n not in known]
        if unknown:
            raise DataError(
                f"unknown book(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        books = tuple(b for b in books if b.name in args.book)
    prepare_smoke(
        args.out,
        source_dir=args.source_dir,
        url_base=args.url_base,
        books=books,
        progress=not args.quiet,
    )
    return 0
