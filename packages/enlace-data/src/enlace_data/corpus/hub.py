"""Sources of kind hub: parquet files of a Hugging Face Hub dataset, fetched with `huggingface_hub`.

The matching files are listed once, sorted, and downloaded one at a time as the build reaches them
(into the Hugging Face cache): a source with `max_bytes` downloads only what it reads, and a cut
download resumes. HF_HUB_OFFLINE=1 lists and reads the cached snapshot only; HF_ENDPOINT, HF_HOME
and HF_TOKEN work as in huggingface_hub.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from pathlib import Path

from enlace_config.schema.corpus import CorpusSource

from enlace_data.errors import DataError


def _explain(exc: Exception, source: CorpusSource, where: str) -> DataError:
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
        why = f"could not be read ({type(exc).__name__}: {exc}); check the network and rerun: "
        why += "finished downloads are kept and a cut one resumes"
    return DataError(f"{what} {why}")


def hub_files(source: CorpusSource, where: str) -> Iterator[Path]:
    """The local paths of the source's files, each downloaded (or found in the cache) when the
    iteration reaches it."""
    try:
        from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download
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
        try:
            path = hf_hub_download(
                source.dataset, name, repo_type="dataset", revision=source.revision
            )
        except Exception as e:
            raise _explain(e, source, f"{where}, file {name}") from e
        yield Path(path)
