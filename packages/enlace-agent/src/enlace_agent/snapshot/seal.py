"""Sealed (encrypted) archives, with the optional extra `snapshot-crypto`: scrypt turns the
passphrase into an AES-256-GCM key; the archive is sealed in 1 MiB chunks, each authenticated
with its index and a last-chunk flag (so reordering or cutting is noticed), after a header with a
key check (a wrong passphrase is told apart from a damaged file)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from enlace_agent.snapshot.errors import ArchiveRefused, SnapshotError

CHUNK_BYTES = 1 << 20  # plain bytes per sealed chunk (part of the sealed format)
SEAL_MAGIC = b"ENLACE-SNAPSHOT-SEALED\x00\x01"
SEAL_CHECK = b"enlace-snapshot-key-check"
Sealer = Callable[[IO[bytes], IO[bytes], str, int], None]


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
    except ImportError:
        raise SnapshotError(
            "las copias cifradas necesitan el extra «snapshot-crypto»: "
            'pip install "enlace-agent[snapshot-crypto]".'
        ) from None
    return AESGCM, Scrypt


def _key(passphrase: str, salt: bytes, log2_n: int) -> bytes:
    _, scrypt = _crypto()
    return scrypt(salt=salt, length=32, n=2**log2_n, r=8, p=1).derive(passphrase.encode())


def _nonce(prefix: bytes, index: int, last: bool) -> bytes:
    return prefix + index.to_bytes(4, "big") + (b"\x01" if last else b"\x00")


def sealer() -> Sealer:
    aesgcm, _ = _crypto()

    def seal(source: IO[bytes], out: IO[bytes], passphrase: str, log2_n: int) -> None:
        salt, prefix = os.urandom(16), os.urandom(7)
        header = SEAL_MAGIC + salt + bytes([log2_n]) + prefix
        cipher = aesgcm(_key(passphrase, salt, log2_n))
        out.write(header + cipher.encrypt(_nonce(prefix, 0xFFFFFFFF, False), SEAL_CHECK, header))
        index, chunk = 0, source.read(CHUNK_BYTES)
        while True:
            following = source.read(CHUNK_BYTES)
            sealed = cipher.encrypt(_nonce(prefix, index, not following), chunk, header)
            out.write(len(sealed).to_bytes(4, "big") + sealed)
            if not following:
                return
            index, chunk = index + 1, following

    return seal


def unsealer() -> Callable[[IO[bytes], IO[bytes], str, Path], None]:
    aesgcm, _ = _crypto()
    from cryptography.exceptions import InvalidTag

    def unseal(raw: IO[bytes], out: IO[bytes], passphrase: str, path: Path) -> None:
        header = raw.read(len(SEAL_MAGIC) + 16 + 1 + 7)
        check = raw.read(len(SEAL_CHECK) + 16)
        if len(header) < len(SEAL_MAGIC) + 24 or len(check) < len(SEAL_CHECK) + 16:
            raise ArchiveRefused(
                path, "truncated", "está cortada (el fichero termina antes de tiempo)."
            )
        salt, log2_n, prefix = header[-24:-8], header[-8], header[-7:]
        if not 10 <= log2_n <= 24:
            raise ArchiveRefused(path, "corrupt", "está dañada: su cabecera no se entiende.")
        cipher = aesgcm(_key(passphrase, salt, log2_n))
        try:
            cipher.decrypt(_nonce(prefix, 0xFFFFFFFF, False), check, header)
        except InvalidTag:
            raise ArchiveRefused(
                path, "wrong_passphrase", "la contraseña no es la de esta copia (o está dañada)."
            ) from None
        index = 0
        while True:
            size_bytes = raw.read(4)
            if len(size_bytes) < 4:
                raise ArchiveRefused(path, "truncated", "está cortada (le falta el final).")
            size = int.from_bytes(size_bytes, "big")
            if size > CHUNK_BYTES + 16:
                raise ArchiveRefused(path, "corrupt", "está dañada (un trozo imposible).")
            sealed = raw.read(size)
            if len(sealed) < size:
                raise ArchiveRefused(path, "truncated", "está cortada (le falta el final).")
            last = not raw.read(1)
            if not last:
                raw.seek(-1, os.SEEK_CUR)
            try:
                out.write(cipher.decrypt(_nonce(prefix, index, last), sealed, header))
            except InvalidTag:
                problem = "truncated" if last else "corrupt"
                words = (
                    "está cortada (le falta el final)."
                    if last
                    else "está dañada (un byte cambiado)."
                )
                raise ArchiveRefused(path, problem, words) from None
            if last:
                return
            index += 1

    return unseal
