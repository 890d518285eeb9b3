"""A Hub file's GGUF header without downloading the file: HTTP range requests for its first
bytes (4 MiB, doubled while the header runs past them, up to 64 MiB: a 256k vocabulary and its
merges can take ~10 MB) through huggingface_hub's own HTTP session, read by the model package's
bounded reader (`read_header_prefix`), which checks every count against the bytes at hand and
the tensor layout against the size the Hub lists."""

from __future__ import annotations

from typing import Any

from ..model.gguf.header import GGUFHeader, ModelFileError, read_header_prefix
from .hub import HubFile, explain, file_url, request_headers

FIRST_BYTES = 4 << 20
MAX_BYTES = 64 << 20


def _get_range(url: str, end: int) -> bytes:
    from huggingface_hub.utils import http_backoff

    headers = dict(request_headers(), Range=f"bytes=0-{end - 1}")
    from huggingface_hub.utils import hf_raise_for_status

    try:
        response: Any = http_backoff("GET", url, headers=headers)
        hf_raise_for_status(response)  # a gated repo's 401 becomes GatedRepoError, and so on
    except Exception as exc:  # noqa: BLE001
        raise explain(exc, f"read the start of {url.rsplit('/', 1)[-1]}") from exc
    return bytes(response.content[:end])


def fetch_header(repo_id: str, file: HubFile, commit: str) -> tuple[GGUFHeader, bytes]:
    """The header of `file` (at `commit`), read from its first MBs, and those bytes;
    ModelFileError when it is no GGUF or a corrupt one, HubError when the Hub cannot be read."""
    url = file_url(repo_id, file.path, commit)
    want = min(FIRST_BYTES, file.size) if file.size else FIRST_BYTES
    while True:
        data = _get_range(url, want)
        try:
            return read_header_prefix(f"{repo_id}/{file.path}", data, file.size or len(data)), data
        except ModelFileError as exc:
            ended_early = "the header ends early" in exc.reason
            if not ended_early or len(data) < want or want >= min(MAX_BYTES, file.size or MAX_BYTES):
                raise
            want = min(want * 2, MAX_BYTES, file.size or MAX_BYTES)


_verdicts: dict[str, str | None] = {}  # architecture -> llama.cpp's refusal (None: it runs)


def architecture_problem(header: GGUFHeader, data: bytes) -> str | None:
    """Does llama.cpp run this architecture? Its own answer, not a table: the header is written
    to a sparse file of the model's full size (no disk taken by the weights) and llama.cpp loads
    its vocabulary and hyper-parameters from it (`vocab_only`: no tensor is read). None when it
    loads; else llama.cpp's reason ("unknown model architecture: 'x'"). Kept per architecture."""
    import tempfile
    from pathlib import Path

    from ..host.folders import cache_subdir
    from ..model.llamacpp.model import LlamaCppModel

    arch = str(header.value("general.architecture", ""))
    if arch in _verdicts:
        return _verdicts[arch]
    with tempfile.TemporaryDirectory(dir=cache_subdir("downloads")) as tmp:
        sparse = Path(tmp) / "header.gguf"
        with sparse.open("wb") as f:
            f.write(data[: header.data_offset])
            f.truncate(header.file_size)
        try:
            LlamaCppModel.open(sparse, header=header, vocab_only=True).close()
            problem = None
        except ModelFileError as exc:
            problem = exc.reason
    _verdicts[arch] = problem
    return problem
