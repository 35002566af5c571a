"""Sources of kind hub (and a chat recipe's sources): parquet files of a Hugging Face Hub dataset,
fetched with `huggingface_hub`.

The matching files are listed once, sorted, and downloaded one at a time as the build reaches them
(into the Hugging Face cache): a source with `max_bytes` downloads only what it reads, and a cut
download resumes. HF_HUB_OFFLINE=1 lists and reads the cached snapshot only; HF_ENDPOINT, HF_HOME
and HF_TOKEN work as in huggingface_hub.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from enlace_data.errors import DataError


class HubLocation(Protocol):
    """Where a source's files are on the Hub: a corpus source or a chat recipe's source."""

    @property
    def dataset(self) -> str | None: ...
    @property
    def subset(self) -> str | None: ...
    @property
    def split(self) -> str: ...
    @property
    def files(self) -> str: ...
    @property
    def revision(self) -> str | None: ...


def _explain(exc: Exception, source: HubLocation, where: str) -> DataError:
    """A huggingface_hub or network error as a message the user can act on."""
    from huggingface_hub import errors

    what = f"{where}: dataset {source.dataset!r}"
    if source.revision:
        what += f" at revision {source.revision!r}"
    if isinstance(exc, errors.RepositoryNotFoundError):
        why = (
            "does not exist on the Hub, or is private or gated (log in: hf auth login, or HF_TOKEN)"
        )
    elif isinstance(exc, errors.RevisionNotFoundError):
        why = "has no such revision; fix `revision`"
    elif isinstance(exc, errors.OfflineModeIsEnabled | errors.LocalEntryNotFoundError):
        why = (
            "is not in the Hugging Face cache and HF_HUB_OFFLINE is set (or the Hub is "
            f"unreachable: {exc}); download it once online, or unset HF_HUB_OFFLINE"
        )
    else:
        detail = " ".join(str(exc).split())
        why = f"could not be read ({type(exc).__name__}: {detail}); check the network (or "
        why += "HF_ENDPOINT) and rerun where the Hub is reachable: finished downloads are kept, a "
        why += "cut one resumes, and HF_HUB_OFFLINE=1 then reads them from the cache"
    return DataError(f"{what} {why}")


def hub_files(source: HubLocation, where: str) -> Iterator[Path]:
    """The local paths of the source's files, each downloaded (or found in the cache) when the
    iteration reaches it."""
    names = hub_file_names(source, where)
    for name in names:
        yield hub_download(source, name, where)


def hub_check(source: HubLocation, where: str) -> None:
    """One request for the dataset's information, without huggingface_hub's retries: a Hub that
    cannot be reached, or a dataset that does not exist, fails here at once (with HF_HUB_OFFLINE
    set, nothing is asked)."""
    from huggingface_hub import HfApi, constants

    if constants.HF_HUB_OFFLINE:
        return
    try:
        HfApi().dataset_info(source.dataset or "", revision=source.revision)
    except Exception as e:  # huggingface_hub raises many types; all mean "cannot read it"
        raise _explain(e, source, where) from e


def hub_file_names(source: HubLocation, where: str) -> list[str]:
    """The sorted names of the source's parquet files in the dataset repository (listed on the Hub,
    or in the cache when HF_HUB_OFFLINE is set)."""
    try:
        from huggingface_hub import HfApi, constants, snapshot_download
    except ImportError:
        raise DataError(
            "sources of kind hub need huggingface_hub and pyarrow: install enlace-data's web "
            "extra (pip install 'enlace-data[web]', or uv sync --extra web)"
        ) from None
    assert source.dataset is not None
    pattern = source.files.replace("{subset}", source.subset or "").replace("{split}", source.split)
    try:
        if constants.HF_HUB_OFFLINE:
            root = Path(
                snapshot_download(
                    source.dataset,
                    repo_type="dataset",
                    revision=source.revision,
                    allow_patterns=[pattern],
                    local_files_only=True,
                )
            )
            listed = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()]
        else:
            listed = HfApi().list_repo_files(
                source.dataset, repo_type="dataset", revision=source.revision
            )
    except Exception as e:  # huggingface_hub raises many types; all mean "cannot list"
        raise _explain(e, source, where) from e
    names = sorted(n for n in listed if fnmatch.fnmatchcase(n, pattern))
    if not names:
        raise DataError(
            f"{where}: no file of dataset {source.dataset!r} matches {pattern!r} (from files: "
            f"{source.files!r}, subset {source.subset!r}, split {source.split!r}); list the "
            "dataset's files on its Hub page and fix the pattern"
        )
    for name in names:
        if not name.endswith(".parquet"):
            raise DataError(f"{where}: {name} of dataset {source.dataset!r} is not a parquet file")
    return names


def hub_download(source: HubLocation, name: str, where: str) -> Path:
    """The local path of one file of the source (downloaded into the cache, or found there)."""
    from huggingface_hub import hf_hub_download

    assert source.dataset is not None
    try:
        path = hf_hub_download(source.dataset, name, repo_type="dataset", revision=source.revision)
    except Exception as e:
        raise _explain(e, source, f"{where}, file {name}") from e
    return Path(path)
