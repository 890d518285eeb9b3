"""Image input through llama.cpp's libmtmd (`llama_cpp.mtmd_cpp`): a model's projector (mmproj).

Vision is a capability a loaded model has or not: libmtmd is imported lazily (a build without
it is a reason, not a crash), a projector is found beside the model (`find_projector`) or
named by the user, and `Projector.open` says why it refuses one (mtmd_init_from_file checks the
projection width against the model's embedding width); the model then still runs for text.

An image becomes prompt "ids" the engine can carry: the projector tokenizes a lone media
marker with the image (`mtmd_tokenize`; the marker is random per process, so a user's text can
never fake one) and every image chunk is a run of negative PSEUDO-IDS derived from the image's
id (its sha256) and the cell index. The producer's token mirror holds them like any id, so prefix
reuse, trim, slot parking and the reply figures work unchanged: the same image at the same place
matches, a different one does not. Text chunks mtmd adds around an image (Gemma 3's
<start_of_image> ...) are ordinary token ids. `segment(first_id)` gives the chunk back for the
producer to encode and decode (`encode`).

Limits, checked here and not by llama.cpp's asserts: a non-causal image (Gemma 3) must fit one
ubatch. M-RoPE (Qwen-VL text models): an image's positions are not its cells (`nx` of each
chunk; the arithmetic is image_positions.py, the producer keeps the shift).
"""

from __future__ import annotations

import ctypes
import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...engine.errors import EngineError
from ..gguf.header import ModelFileError, read_header
from . import library
from .encode_stop import CPU_EVERY, GPU_EVERY, EncodeGate
from .log import capturing, refusal
from .model import LlamaCppModel

PSEUDO_MASK = 0x3FFFFFFF
_KEEP_SEGMENTS = 64  # image chunks kept for the producer (the conversations' recent images)
_KEEP_EMBEDDINGS = 8  # encoded images kept: a chunk decoded in pieces is encoded once


class VisionUnavailable(EngineError):
    """Images cannot be used with this model; the message says why."""


_mtmd_lock = threading.Lock()


def mtmd() -> Any:
    """`llama_cpp.mtmd_cpp` (libmtmd's binding), loaded on first use; VisionUnavailable when
    this build of llama-cpp-python has no libmtmd (built with LLAVA_BUILD=OFF)."""
    library.binding()  # registers the llama_cpp namespace mtmd_cpp imports from
    with _mtmd_lock:
        try:
            from llama_cpp import mtmd_cpp  # type: ignore[import-untyped]
        except (OSError, RuntimeError, FileNotFoundError) as exc:
            raise VisionUnavailable(
                "this llama-cpp-python was built without libmtmd (image input): rebuild it with "
                f"CMAKE_ARGS=-DLLAVA_BUILD=ON ({exc})") from None
    return mtmd_cpp


def has_mtmd() -> bool:
    try:
        mtmd()
    except VisionUnavailable:
        return False
    return True


# -- finding a projector -------------------------------------------------------------------------

@dataclass(frozen=True)
class ProjectorChoice:
    """The projector for a model: `path` None with `reason` when there is none to use."""

    path: Path | None
    reason: str = ""


def projector_width(path: Path) -> int | None:
    """A projector file's output width (`clip.vision.projection_dim`), None when it is not a
    vision projector (ModelFileError when it is not a readable GGUF)."""
    header = read_header(path)
    if header.value("general.architecture") != "clip" or not header.value("clip.has_vision_encoder"):
        return None
    width = header.value("clip.vision.projection_dim")
    return int(width) if isinstance(width, int) else None


@dataclass(frozen=True)
class ProjectorFile:
    """A projector file as its header tells: its projection `width` (None: not a vision
    projector or not readable) and `problem`, "" when it fits a model of the width asked."""

    path: Path
    width: int | None
    kind: str
    problem: str

    @property
    def fits(self) -> bool:
        return not self.problem


def inspect_projector(path: Path, n_embd: int) -> ProjectorFile:
    """What `path`'s header says about it as the projector of a model of width `n_embd` (the
    header's word; mtmd_init_from_file has the last one)."""
    path = Path(path)
    try:
        width = projector_width(path)
    except ModelFileError as e:
        return ProjectorFile(path, None, "?", e.reason)
    if width is None:
        return ProjectorFile(path, None, "?", "not a vision projector")
    kind = str(read_header(path).value("clip.projector_type", "?"))
    if width != n_embd:
        return ProjectorFile(path, width, kind, f"projects to {width}, the model's width is {n_embd}")
    return ProjectorFile(path, width, kind, "")


def projectors_beside(model_path: Path, n_embd: int) -> list[ProjectorFile]:
    """Every `mmproj*.gguf` in the model's folder, by name, each inspected for that model."""
    folder = Path(model_path).parent
    found = sorted(p for p in folder.glob("*.gguf")
                   if p.name.lower().startswith("mmproj") and p.resolve() != Path(model_path).resolve())
    return [inspect_projector(p, n_embd) for p in found]


def find_projector(model_path: Path, n_embd: int) -> ProjectorChoice:
    """The `mmproj*.gguf` beside `model_path` whose projection width is the model's embedding
    width (`n_embd`), or why there is none."""
    found = projectors_beside(model_path, n_embd)
    if not found:
        return ProjectorChoice(None, f"no mmproj*.gguf beside the model in {Path(model_path).parent}")
    fitting = next((f for f in found if f.fits), None)
    if fitting is not None:
        return ProjectorChoice(fitting.path)
    seen = "; ".join(f"{f.path.name}: {f.problem}" for f in found)
    return ProjectorChoice(None, f"no projector beside the model matches it ({seen})")


# -- the projector -------------------------------------------------------------------------------

@dataclass(frozen=True)
class ImageSegment:
    """One image chunk of a prompt: `n_tokens` KV cells advancing the position by `n_pos`."""

    key: str  # the image's id and the chunk's index in it
    pseudo_ids: tuple[int, ...]
    n_pos: int
    non_causal: bool
    chunk: int  # an owned mtmd_input_chunk (freed by the projector)
    nx: int = 0  # M-RoPE: the merged patch grid's width (rows of nx cells); 0 otherwise
    t_last: int = -1  # the last row's position (section t) past the first; -1: n_tokens - 1

    @property
    def last_offset(self) -> int:
        """What `seq_pos_max` is past the chunk's first position once it is decoded."""
        return self.n_tokens - 1 if self.t_last < 0 else self.t_last

    @property
    def n_tokens(self) -> int:
        return len(self.pseudo_ids)


@dataclass(frozen=True)
class EncodeFigures:
    """One image chunk's encode: its cells, the seconds it took, whether Stop ended it (its
    rows thrown away), whether it came from the kept embeddings; `looks` at the predicate."""

    n_tokens: int
    seconds: float
    stopped: bool
    cached: bool = False
    looks: int = 0


def pseudo_ids(key: str, n: int) -> tuple[int, ...]:
    """The `n` negative ids that stand for an image chunk in the token mirror (never a vocab id)."""
    out = []
    for i in range(n):
        digest = hashlib.sha256(f"{key}:{i}".encode()).digest()
        out.append(-1 - (int.from_bytes(digest[:4], "little") & PSEUDO_MASK))
    return tuple(out)


class Projector:
    """An mmproj opened over a loaded model (one mtmd context). Encodes run on the engine
    thread only (libmtmd's encode is not thread-safe); `image_ids` may run on any thread."""

    def __init__(self, model: LlamaCppModel, path: Path, handle: Any, M: Any, marker: bytes,
                 n_batch: int, gate: EncodeGate) -> None:
        self.model = model
        self.gate = gate  # the cb_eval through which Stop reaches an encode (encode_stop)
        self.last_encode: EncodeFigures | None = None
        self.path = path
        self._M = M
        self._handle = handle
        self._marker = marker  # kept: mtmd copied it, but the params struct pointed at it
        self.marker = marker.decode()
        self.n_batch = n_batch
        self.n_embd = int(library.binding().llama_model_n_embd_inp(model.handle))
        # M-RoPE (a Qwen-VL text model): an image advances the position by max(nx, ny), not by
        # its cells, and its rows take 4 positions each (image_positions).
        self.mrope = bool(M.mtmd_decode_use_mrope(handle))
        header = read_header(path)
        self.projector_type = str(header.value("clip.projector_type", "?"))
        self.image_size = int(header.value("clip.vision.image_size", 0) or 0)
        self._lock = threading.Lock()
        self._segments: OrderedDict[int, ImageSegment] = OrderedDict()
        self._by_image: dict[str, list[int | ImageSegment]] = {}
        self._embd: OrderedDict[str, np.ndarray] = OrderedDict()
        self._retired: list[int] = []  # chunks no longer listed, to free on the engine thread

    @classmethod
    def open(cls, model: LlamaCppModel, path: str | Path, *, threads: int = 4,
             n_batch: int = 512) -> "Projector":
        """Open `path` for `model`; VisionUnavailable with llama.cpp's reason when it refuses
        (a projector for another model's width, a broken file, no vision encoder)."""
        path = Path(path)
        M = mtmd()
        if not path.is_file():
            raise VisionUnavailable(f"the projector {path} does not exist")
        try:
            width = projector_width(path)
        except ModelFileError as e:
            raise VisionUnavailable(f"the projector {path.name} is not a usable GGUF: {e.reason}") from None
        if width is None:
            raise VisionUnavailable(f"{path.name} is not a vision projector (mmproj) file")
        from .log import _callback

        if _callback is not None:  # clip's and mtmd's log into the app's log, not the terminal
            M.mtmd_log_set(_callback, None)
            M.mtmd_helper_log_set(_callback, None)
        params = M.mtmd_context_params_default()
        params.use_gpu = model.facts.gpu_layers > 0
        params.print_timings = False
        params.n_threads = int(threads)
        marker = f"<__media_{secrets.token_hex(16)}__>".encode()
        params.media_marker = marker
        params.warmup = False
        params.batch_max_tokens = int(n_batch)
        gate = EncodeGate(GPU_EVERY if params.use_gpu else CPU_EVERY)
        params.cb_eval = gate.callback
        params.cb_eval_user_data = None
        with capturing() as lines:
            handle = M.mtmd_init_from_file(str(path).encode(), model.handle, params)
        if not handle:
            said = refusal(lines) or "no reason given"
            raise VisionUnavailable(f"the projector {path.name} does not fit {model.facts.description} "
                                    f"(llama.cpp: {said})")
        if not M.mtmd_support_vision(handle):
            M.mtmd_free(handle)
            raise VisionUnavailable(f"the projector {path.name} has no vision encoder (audio only?)")
        return cls(model, path, handle, M, marker, int(n_batch), gate)

    @property
    def handle(self) -> Any:
        if self._handle is None:
            raise RuntimeError("the projector was closed")
        return self._handle

    def describe(self) -> str:
        return f"{self.path.name}, {self.projector_type}"

    # -- prompts ---------------------------------------------------------------------------------

    def image_ids(self, image: Any) -> list[int]:
        """The prompt ids of one image (`media.images.ImageInput`): mtmd's text around it as
        token ids, each image chunk as its pseudo-ids. Cached by the image's sha256."""
        with self._lock:
            cached = self._by_image.get(image.sha256)
            if cached is not None and all(isinstance(p, int) or p.pseudo_ids[0] in self._segments
                                          for p in cached):
                for p in cached:
                    if not isinstance(p, int):
                        self._segments.move_to_end(p.pseudo_ids[0])
                return [i for p in cached for i in ((p,) if isinstance(p, int) else p.pseudo_ids)]
        parts = self._tokenize(image)
        with self._lock:
            self._by_image[image.sha256] = parts
            for p in parts:
                if not isinstance(p, int):
                    self._segments[p.pseudo_ids[0]] = p
                    self._segments.move_to_end(p.pseudo_ids[0])
            while len(self._segments) > _KEEP_SEGMENTS:
                _, old = self._segments.popitem(last=False)
                self._by_image.pop(old.key.split(":")[0], None)
                # Freed by the engine thread (`encode`), which may be using it right now.
                self._retired.append(old.chunk)
        return [i for p in parts for i in ((p,) if isinstance(p, int) else p.pseudo_ids)]

    def _tokenize(self, image: Any) -> list[int | ImageSegment]:
        M = self._M
        data = (ctypes.c_uint8 * len(image.rgb)).from_buffer_copy(image.rgb)
        bitmap = M.mtmd_bitmap_init(image.width, image.height, data)
        if not bitmap:
            raise VisionUnavailable(f"libmtmd refused the image {image.label}")
        chunks = None
        try:
            M.mtmd_bitmap_set_id(bitmap, image.sha256.encode())
            chunks = M.mtmd_input_chunks_init()
            text = M.mtmd_input_text(self._marker, len(self._marker), False, True)
            bitmaps = (M.mtmd_bitmap_p_ctypes * 1)(bitmap)
            with capturing() as lines:
                code = M.mtmd_tokenize(self.handle, chunks, ctypes.byref(text), bitmaps, 1)
            if code != 0:
                raise VisionUnavailable(f"the projector could not prepare the image {image.label} "
                                        f"(mtmd_tokenize {code}: {refusal(lines) or 'no reason given'})")
            parts: list[int | ImageSegment] = []
            for k in range(M.mtmd_input_chunks_size(chunks)):
                chunk = M.mtmd_input_chunks_get(chunks, k)
                kind = M.mtmd_input_chunk_get_type(chunk)
                if kind == M.MTMD_INPUT_CHUNK_TYPE_TEXT:
                    n = ctypes.c_size_t(0)
                    ptr = M.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                    parts.extend(int(ptr[i]) for i in range(n.value))
                    continue
                if kind != M.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    raise VisionUnavailable("the projector made a non-image chunk of an image")
                n_tokens = int(M.mtmd_input_chunk_get_n_tokens(chunk))
                n_pos = int(M.mtmd_input_chunk_get_n_pos(chunk))
                non_causal = bool(M.mtmd_decode_use_non_causal(self.handle, chunk))
                if n_tokens < 1:
                    raise VisionUnavailable(f"the projector made an empty chunk of {image.label}")
                if non_causal and n_tokens > self.n_batch:
                    raise VisionUnavailable(
                        f"the image {image.label} is {n_tokens} tokens and this projector attends "
                        f"across the whole image: it must fit one batch of {self.n_batch}")
                nx, t_last = 0, -1
                if self.mrope:  # (its rows' positions are libmtmd's: `positions`)
                    nx = int(M.mtmd_image_tokens_get_nx(M.mtmd_input_chunk_get_tokens_image(chunk)))
                    t_last = int(self._decoder_positions(chunk, 0, n_tokens)[0].max())
                key = f"{image.sha256}:{k}"
                owned = M.mtmd_input_chunk_copy(chunk)
                parts.append(ImageSegment(key, pseudo_ids(key, n_tokens), n_pos, non_causal, owned, nx, t_last))
            return parts
        finally:
            if chunks:
                M.mtmd_input_chunks_free(chunks)
            M.mtmd_bitmap_free(bitmap)

    def _decoder_positions(self, chunk: int, pos_0: int, n_tokens: int) -> np.ndarray:
        M = self._M
        out = (M.mtmd_decoder_pos * n_tokens)()
        M.mtmd_helper_image_get_decoder_pos(M.mtmd_input_chunk_get_tokens_image(chunk), int(pos_0), out)
        rows = np.frombuffer(out, np.uint32).reshape(n_tokens, 4).astype(np.int32)  # t, x, y, z
        return np.ascontiguousarray(rows[:, [0, 2, 1, 3]].T)  # the batch's section order: t, y, x, z

    def positions(self, seg: ImageSegment, pos_0: int) -> np.ndarray:
        """An M-RoPE chunk's (4, n_tokens) positions from `pos_0`, as libmtmd lays them out
        (image_positions.mrope_positions is the same arithmetic for Qwen-VL's grid)."""
        return self._decoder_positions(seg.chunk, pos_0, seg.n_tokens)

    def segment(self, first_id: int) -> ImageSegment | None:
        """The image chunk whose pseudo-ids begin with `first_id` (None: not one of ours)."""
        with self._lock:
            return self._segments.get(first_id)

    def is_image_start(self, first_id: int) -> bool:
        return self.segment(first_id) is not None

    # -- encoding (engine thread) ----------------------------------------------------------------

    def encode(self, seg: ImageSegment, cancel: Callable[[], bool] | None = None) -> np.ndarray | None:
        """The chunk's embeddings (n_tokens, n_embd) float32, encoded once and kept a while;
        None when `cancel` stopped the encode (through the graph callback, `encode_stop`: its
        half-computed rows are thrown away). `last_encode` holds the figures."""
        with self._lock:  # chunks retired since: free them (not the one being encoded)
            retired = [c for c in self._retired if c != seg.chunk]
            self._retired = [c for c in self._retired if c == seg.chunk]
        for chunk in retired:
            self._M.mtmd_input_chunk_free(chunk)
        got = self._embd.get(seg.key)
        if got is not None:
            self._embd.move_to_end(seg.key)
            self.last_encode = EncodeFigures(seg.n_tokens, 0.0, stopped=False, cached=True)
            return got
        M = self._M
        began = time.perf_counter()
        with capturing() as lines, self.gate.watching(cancel) as gate:
            code = M.mtmd_encode_chunk(self.handle, seg.chunk)
        self.last_encode = EncodeFigures(seg.n_tokens, time.perf_counter() - began, gate.stopped,
                                         looks=gate.looks)
        if gate.stopped:
            return None
        if code != 0:
            raise VisionUnavailable(f"the projector failed to encode an image (code {code}: "
                                    f"{refusal(lines) or 'no reason given'})")
        ptr = M.mtmd_get_output_embd(self.handle)
        if not ptr:
            raise VisionUnavailable("the projector gave no embeddings for the image")
        n = seg.n_tokens * self.n_embd
        addr = ctypes.cast(ptr, ctypes.c_void_p).value
        rows = np.frombuffer((ctypes.c_float * n).from_address(addr), np.float32).reshape(
            seg.n_tokens, self.n_embd).copy()  # valid only until the next encode
        if not np.isfinite(rows).all():
            raise VisionUnavailable("the projector's embeddings of the image are not finite numbers")
        self._embd[seg.key] = rows
        while len(self._embd) > _KEEP_EMBEDDINGS:
            self._embd.popitem(last=False)
        return rows

    def close(self) -> None:
        """Free the mtmd context (before the model it points at)."""
        with self._lock:
            handle, self._handle = self._handle, None
            segments = list(self._segments.values())
            retired, self._retired = self._retired, []
            self._segments.clear()
            self._by_image.clear()
        for chunk in [seg.chunk for seg in segments] + retired:
            self._M.mtmd_input_chunk_free(chunk)
        if handle is not None:
            self._M.mtmd_free(handle)


def image_runs(ids: Sequence[int], projector: Projector | None) -> list[tuple[int, int, ImageSegment | None]]:
    """`ids` as runs (start, end, segment): segment None for text; ValueError when a negative
    id does not begin a whole image chunk of `projector`."""
    runs: list[tuple[int, int, ImageSegment | None]] = []
    i, n, text_from = 0, len(ids), 0
    while i < n:
        if ids[i] >= 0:
            i += 1
            continue
        seg = projector.segment(ids[i]) if projector is not None else None
        if seg is None or tuple(ids[i:i + seg.n_tokens]) != seg.pseudo_ids:
            raise ValueError(f"token id {ids[i]} at {i} is not the start of a whole image this model's "
                             "projector prepared" if projector is not None else
                             f"token id {ids[i]} is outside the vocabulary (this model takes no images)")
        if text_from < i:
            runs.append((text_from, i, None))
        runs.append((i, i + seg.n_tokens, seg))
        i += seg.n_tokens
        text_from = i
    if text_from < n:
        runs.append((text_from, n, None))
    return runs
