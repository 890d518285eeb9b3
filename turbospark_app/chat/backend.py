"""The real chat backend: a GGUF run by llama.cpp, its tokenizer and template, the session pool.

Only the engine thread calls it (one thread owns the model). `system_info()` is the one
exception: it reads a snapshot and the probes, never the model, so a GUI timer may call it
from any thread without waiting behind a forward step.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engine import (
    EmptyPrompt,
    GenerationConfig,
    DecodeStep,
    LookupSpeculation,
    PaceWait,
    PrefillStep,
    RawDecodeResult,
    StopReason,
    stream_raw_completion,
    stream_raw_completion_chunked,
)
from ..engine.chunk_budget import ChunkBudget, target_gap_for
from ..engine.raw_completion import check_admission, check_rate
from ..engine.selection import validate_shaping
from ..engine.session_pool import SessionPool, SessionProducer
from ..engine.speculation import VerifyCost
from ..engine.state_cache import DEFAULT_BUDGET_MB as DEFAULT_STATE_CACHE_MB
from ..engine.state_cache import StateCache
from ..model.choice.kv_cache import KVCacheTypes
from ..model.gguf.config import ModelConfig, read_config
from .background import close_opened, in_background
from .kv_sizing import context_cells, kv_budget_bytes, kv_bytes_per_token, state_cache_bytes  # noqa: F401 (callers import the budgets here)
from ..model.gguf.header import ModelFileError, read_header
from ..model.llamacpp import library
from ..host.switching import fast_switching
from ..model.llamacpp.context import DEFAULT_BATCH, LlamaCppContext
from ..model.llamacpp.model import ALL_LAYERS, LlamaCppModel
from ..model.llamacpp.probe import forget, verdict
from ..model.llamacpp.producer import LlamaCppProducer
from .batched_pass import innermost, run_pass
from ..model.llamacpp.vision import Projector, VisionUnavailable
from .vision import open_projector, vision_label
from ..model.llamacpp.vocab import load_tokenizer, tokenizer_spec
from ..model.text.chat_template import ChatTemplate
from ..model.text.consistency import checked_template
from ..engine.load_progress import LOADING, report
from ..readings import MemoryMonitor, ThermalMonitor, monitors_from_environment
from ..readings.system_info import system_info
from .api import ChatMessage, PreparedTurn, TurnSettings, TurnStream
from .logprobs import LogprobTap
from .prompt import PromptBuilder

DEFAULT_SESSION_SLOTS = 4
PROGRESS_BYTES = 256 << 20  # a smaller file loads in well under the half second a bar waits for
SLOT_WAIT_SECONDS = 0.05  # how often a turn waiting for a busy slot looks again


class LlamaChatBackend:
    """Implements `ChatBackend` over a llama.cpp model, its context and the session pool (one
    llama.cpp sequence per slot, all in one unified KV memory)."""

    def __init__(
        self,
        model: LlamaCppModel,
        context: LlamaCppContext,
        tokenizer: Any,
        template: ChatTemplate | None,
        *,
        model_path: Path,
        config: ModelConfig,
        session_slots: int = DEFAULT_SESSION_SLOTS,
        thermal: ThermalMonitor | None = None,
        memory: MemoryMonitor | None = None,
        load_seconds: float = 0.0,
        state_cache_bytes: int = DEFAULT_STATE_CACHE_MB << 20,
        projector: Projector | None = None,
        vision_reason: str = "",
    ) -> None:
        self.model = model
        # Image input: the model's projector, or why there is none ("vision: no (...)").
        self.projector = projector
        self.vision_reason = vision_reason
        self.context = context
        self.tokenizer = tokenizer
        self.template = template
        self.model_path = model_path
        self.config = config
        self.max_context = context.n_ctx
        self.vocab_size = model.vocab_size
        if thermal is None or memory is None:
            env_thermal, env_memory = monitors_from_environment()
            thermal, memory = thermal or env_thermal, memory or env_memory
        self.thermal = thermal
        self.memory = memory
        self.cache_types: KVCacheTypes = getattr(context, "cache_types", KVCacheTypes())
        self.kv_bytes_per_token = kv_bytes_per_token(config, self.cache_types)
        self.pool = self._new_pool(session_slots, state_cache_bytes)
        self._load_seconds = load_seconds
        self._snapshot_lock = threading.Lock()
        self._sessions: list[dict[str, Any]] = self.pool.describe()
        self._last_turn: dict[str, Any] | None = None
        self._model_info = self._describe_model()
        self.prompts = PromptBuilder(template, tokenizer, self.max_context, vision=projector)
        # Speculation's off-switch while other streams decode (the engine thread wires it):
        # True = crowded, decode plainly so the steps batch.
        self.crowded: Callable[[], bool] = lambda: False
        # True = a stream that was decoding before this turn began runs beside it: its prompt
        # goes in chunks sized to the budget (set by the engine thread, as `crowded`).
        self.streams_running: Callable[[], bool] = lambda: False
        self.chunk_budget = ChunkBudget(lambda: self.streams_running())
        # What a draft's verify pass costs here, learnt by every turn; the prior is llama.cpp's on
        # a CPU (one more row ~0.5 of a step: bench_model.py), which a GPU soon corrects down.
        self.verify_cost = VerifyCost(row_cost=0.5)
        self.speculation = "off"  # turns whose settings say None speculate so ("lookup" | "off")

    # -- ChatBackend ------------------------------------------------------------------------

    @property
    def has_chat_template(self) -> bool:
        """False for a base model (no template in the file): its turns are raw completions."""
        return self.template is not None

    def prepare_turn(
        self, session_id: str, messages: Sequence[ChatMessage], settings: TurnSettings,
        *, continue_final: bool = False, raw: bool = False,
    ) -> PreparedTurn:
        """Render and tokenize. Everything the step loop would reject is checked here, before
        the model: empty message, zero budget, context overflow, invalid cap or sampling.
        `continue_final`: the last message is a reply to continue (left open, see prompt).
        `raw`: raw completion, the texts concatenated without roles (see prompt); always so
        for a model without a chat template, the only way it runs."""
        if not messages or not (messages[-1].content.strip() or messages[-1].images):
            raise EmptyPrompt()
        if any(m.images for m in messages):
            self.check_images()
            if raw or self.template is None:
                raise VisionUnavailable("images need a chat template: raw completion takes text only")
        if raw or self.template is None:
            ids = self.prompts.raw_conversation_ids(messages, continue_final=continue_final)
        else:
            ids = self.prompts.chat_ids(messages, settings.system_prompt, continue_final=continue_final,
                                        template_vars=dict(settings.template_vars) or None)
        return self.prepare_prompt(session_id, ids, settings)

    def prepare_prompt(
        self, session_id: str, prompt_ids: Sequence[int], settings: TurnSettings
    ) -> PreparedTurn:
        """A turn over prompt ids already built (`self.prompts`): the same checks as
        `prepare_turn`, before the model."""
        check_admission(prompt_ids, settings.generation, self.max_context)
        check_rate(settings.generation.rate)
        validate_shaping(settings.generation.shaping)
        return PreparedTurn(session_id, tuple(prompt_ids), settings)

    @property
    def has_vision(self) -> bool:
        """The model takes images (a projector is open)."""
        return self.projector is not None

    def check_images(self) -> None:
        """VisionUnavailable naming the model (and why) when it takes no images."""
        if self.projector is None:
            raise VisionUnavailable(f"the model {self.model_path.name} takes no images: "
                                    f"{self.vision_reason or 'it has no vision projector'}")

    def pick_session(self, prompt_ids: Sequence[int], prefix: str, fallback: str) -> str:
        """The session whose idle slot shares the longest token prefix with `prompt_ids`,
        among sessions named `prefix`... (the API's); `fallback` (a new session) when none
        shares at least a tenth of the prompt."""
        session, shared = self.pool.longest_prefix_session(prompt_ids, prefix)
        if session is None or shared * 10 < len(prompt_ids):
            return fallback
        return session

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]) -> TurnStream:
        """The turn's step loop on its session slot (waits, as PaceWait, for a busy slot or for
        room in the KV memory)."""
        config = self._with_probes(turn.settings.generation)
        return self._run_turn(turn, config, cancel)

    def decode_batch(self, steps: Sequence[DecodeStep | PrefillStep]) -> list[Any]:
        """The engine thread's batched round: its decode steps and prompt chunks as ONE
        llama_decode (`batched_pass.run_pass`); returns the steps that did not run."""
        return run_pass(self.context.n_batch, self.chunk_budget, steps)

    def _new_pool(self, slots: int, state_bytes: int) -> SessionPool[LlamaCppProducer]:
        seqs = iter(range(slots))
        bpt = self.kv_bytes_per_token
        saved = StateCache(state_bytes) if state_bytes > 0 else None
        return SessionPool(lambda: LlamaCppProducer(self.context, next(seqs), kv_bytes_per_token=bpt,
                                                    projector=self.projector),
                           slots=slots, max_kv_bytes=self.context.n_ctx * bpt if bpt else None,
                           saved=saved)

    def _run_turn(
        self, turn: PreparedTurn, config: GenerationConfig, cancel: Callable[[], bool]
    ) -> TurnStream:
        need = (len(turn.prompt_ids) + config.max_new_tokens) * self.kv_bytes_per_token
        while (producer := self.pool.checkout(turn.session_id, need, turn.prompt_ids)) is None:
            if cancel():
                return _cancelled_before_start(turn)
            yield PaceWait(time.monotonic() + SLOT_WAIT_SECONDS)
        tap = None
        if turn.settings.top_logprobs is not None:
            producer = tap = LogprobTap(producer, turn.settings.top_logprobs)
        inner = innermost(producer)
        figures = getattr(inner, "image_figures", None)
        if figures is not None:
            figures.clear()
        try:
            args = (producer, self.tokenizer, turn.prompt_ids, config, self.max_context,
                    self.vocab_size, cancel)
            spec = self._speculation(turn.settings)
            if turn.settings.max_stream_gap_ms is not None:
                self.chunk_budget.target_gap_seconds = target_gap_for(turn.settings.max_stream_gap_ms)
            if turn.settings.chunked_prefill:
                stream = stream_raw_completion_chunked(*args, chunk_size=turn.settings.chunk_size,
                                                       speculation=spec, chunk_limit=self.chunk_budget)
            else:
                stream = stream_raw_completion(*args, speculation=spec)
            result = yield from (stream if tap is None else tap.scored(stream))
            result.restored_tokens = min(producer.restored, result.reused_prefix_tokens)
            if figures:
                done = [f for f in figures if not f.stopped]
                result.image_tokens = sum(f.n_tokens for f in done)
                result.image_encode_seconds = sum(f.seconds for f in figures)
                result.image_encode_stopped = any(f.stopped for f in figures)
            self._record_turn(turn, producer, result)
            return result
        finally:
            producer.end_turn()
            self._refresh_sessions()

    def _speculation(self, settings: TurnSettings) -> LookupSpeculation | None:
        """The turn's prompt-lookup speculation, off while `crowded()` (None when not asked, and
        always for a model whose memory cannot drop a rejected draft: recurrent state)."""
        if (settings.speculation or self.speculation) != "lookup":
            return None
        if self.model.facts.recurrent or self.model.facts.hybrid:
            return None
        return LookupSpeculation(crowded=lambda: self.crowded(), cost=self.verify_cost)

    def drop_session(self, session_id: str) -> None:
        self.pool.drop(session_id)
        self._refresh_sessions()

    def model_info(self) -> dict[str, Any]:
        return dict(self._model_info)

    def engine_info(self) -> dict[str, Any]:
        """The part of `system_info` only the engine thread can read (the model's figures, the
        sessions, the last turn), without the process's and the monitors' readings: the engine
        thread's snapshot takes this, and a reader adds those live on its own thread
        (`service.jobs.add_live_readings` with `monitors`), so no decode step pays for psutil."""
        with self._snapshot_lock:
            sessions = [dict(s) for s in self._sessions]
            last_turn = None if self._last_turn is None else dict(self._last_turn)
        saved = self.pool.saved
        model = {**self._model_info, "host_overhead": self.context.host.describe()}
        if saved is not None:
            model["state_cache"] = saved.describe()
        return {"model": model, "sessions": sessions, "last_turn": last_turn}

    @property
    def monitors(self) -> tuple[ThermalMonitor, MemoryMonitor]:
        """The (thermal, memory) monitors pacing reads: thread-safe, read live by readers."""
        return self.thermal, self.memory

    def system_info(self) -> dict[str, Any]:
        return system_info(**self.engine_info(), thermal=self.thermal, memory=self.memory)

    def close(self) -> None:
        """Free the context and the weights (a model switch; the backend is not used after)."""
        self.pool.release_all()
        self.context.close()
        if self.projector is not None:  # it points at the model: freed first
            self.projector.close()
        self.model.close()

    # -- internals --------------------------------------------------------------------------

    def _with_probes(self, config: GenerationConfig) -> GenerationConfig:
        # Pacing steps down on thermal level and memory pressure even without a user cap.
        rate = dataclasses.replace(
            config.rate, thermal_probe=self.thermal.probe, memory_probe=self.memory.probe
        )
        return dataclasses.replace(config, rate=rate)

    def _record_turn(
        self, turn: PreparedTurn, producer: SessionProducer, result: RawDecodeResult
    ) -> None:
        stats = {
            "session_id": turn.session_id,
            "slot": producer.slot_index,
            "slot_outcome": producer.outcome,
            "prompt_tokens": result.prompt_tokens,
            "reused_prefix_tokens": result.reused_prefix_tokens,
            "restored_tokens": result.restored_tokens,
            "new_tokens": result.new_tokens,
            "prefill_seconds": result.prefill_seconds,
            "decode_seconds": result.decode_seconds,
            "prefill_tokens_per_sec": result.prefill_tokens_per_sec,
            "decode_tokens_per_sec": result.decode_tokens_per_sec,
            "reason": result.reason.value,
            "kv_position": result.kv_position,
            "session_slot_evicted": result.session_slot_evicted,
            "peak_memory_pressure": result.peak_memory_pressure.name.lower(),
            "image_tokens": result.image_tokens,
            "image_encode_seconds": result.image_encode_seconds,
            "image_encode_stopped": result.image_encode_stopped,
        }
        with self._snapshot_lock:
            self._last_turn = stats

    def _refresh_sessions(self) -> None:
        rows = self.pool.describe()
        with self._snapshot_lock:
            self._sessions = rows

    def _describe_model(self) -> dict[str, Any]:
        c, facts, ctx = self.config, self.model.facts, self.context
        info = c.to_dict()
        info.update(
            path=str(self.model_path),
            file_name=self.model_path.name,
            file_size_bytes=os.path.getsize(self.model_path),
            n_params=facts.n_params or c.n_params,
            vocab_size=self.vocab_size,
            chat_template=None if self.template is None else self.template.source,
            chat_template_is_fallback=self.template is not None and self.template.is_fallback,
            has_chat_template=self.template is not None,  # False: a base model, raw completion
            max_context=self.max_context,
            load_seconds=round(self._load_seconds, 3),
            weights_bytes=facts.size_bytes,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_cache=dict(self.cache_types.to_dict(), label=self.cache_types.label,
                          bytes=self.kv_bytes_per_token * self.max_context),
            runs_on=runs_on_label(facts.gpu_layers, ctx.threads),
            engine_description=facts.description,
            llama_cpp_python=library.version(),
            gpu_layers=facts.gpu_layers,
            threads=ctx.threads,
            tokenizer=getattr(self.tokenizer, "kind", "llama.cpp"),
            vision=self.projector is not None,
            mmproj=None if self.projector is None else str(self.projector.path),
            vision_label=vision_label(self.projector, self.vision_reason),
        )
        return info


def runs_on_label(gpu_layers: int, threads: int) -> str:
    """"llama.cpp · CPU AVX2 · 2 threads", or "llama.cpp · Metal" with the model on a GPU."""
    gpu = library.gpu_device() if gpu_layers else None
    if gpu is not None:
        return f"llama.cpp · {gpu.name}"
    simd = library.cpu_label()
    cpu = f"CPU {simd}" if simd else "CPU"
    return f"llama.cpp · {cpu} · {threads} thread{'s' if threads != 1 else ''}"


def _cancelled_before_start(turn: PreparedTurn) -> RawDecodeResult:
    """Cancelled while waiting for a slot: the model was never touched."""
    return RawDecodeResult(
        prompt_tokens=len(turn.prompt_ids),
        new_tokens=0,
        prefill_seconds=0.0,
        decode_seconds=0.0,
        reason=StopReason.CANCELLED,
        kv_position=0,
        kv_backed_token_ids=[],
    )


def load_backend(
    model_path: Path | str,
    *,
    session_slots: int = DEFAULT_SESSION_SLOTS,
    max_kv_bytes: int | None = None,
    max_context: int | None = None,
    thermal: ThermalMonitor | None = None,
    memory: MemoryMonitor | None = None,
    chat_template: str | None = None,
    speculation: str = "off",
    threads: int | None = None,
    gpu_layers: int = ALL_LAYERS,
    state_cache_bytes: int = DEFAULT_STATE_CACHE_MB << 20,
    preload: Any = None,
    cache_types: KVCacheTypes = KVCacheTypes(),
    mmproj: str | Path | None = "auto",
) -> LlamaChatBackend:
    """Open a GGUF with llama.cpp and build the backend. Raises EngineError (ModelFileError
    for the file, TokenizerError / TemplateError for its tokenizer and template).

    The file's header is checked by our bounded reader first; a file seen for the first time is
    then loaded once by a child process (`llamacpp.probe`), so a file that would crash llama.cpp
    is refused without taking the app down; then llama.cpp maps it here. The tokenizer is
    llama.cpp's own (`llamacpp.vocab`).
    `thermal` / `memory`: monitors to pace on (the desktop app passes its own, so a level forced
    from the QA panel survives a model switch); by default they come from the environment.
    `chat_template="chatml"` uses the built-in ChatML; a file without a template loads with
    none (`has_chat_template` False): raw completion. `max_context`: KV cells (all slots share
    them; default the model's context up to DEFAULT_CONTEXT); `max_kv_bytes` bounds them too.
    `threads`: llama.cpp's threads (default the performance cores); `gpu_layers`: layers on
    the GPU where there is one (all by default). `speculation`: "lookup" | "off", for turns
    whose settings leave it None (model.choice.speculation). `state_cache_bytes`: RAM for the
    states of conversations whose slot was taken (engine.state_cache; 0 = none kept).
    `preload`: a `chat.preload.Preload` of this file, whose model is taken when it loaded.
    `cache_types`: the KV cache's K and V types (CacheTypeError, before anything loads, for one
    the model's head size does not fit).
    `mmproj`: the vision projector: "auto" (a matching mmproj*.gguf beside the model), a file,
    or None (no images); one that does not fit leaves the model text-only, with the reason."""
    from ..model.choice.threads import performance_cores

    path = Path(model_path)
    start = time.perf_counter()
    header = read_header(path)
    config = read_config(header)
    if config.head_dim:  # (else the context checks llama.cpp's figures)
        cache_types.check(config.head_dim, config.value_dim or config.head_dim)
    if preload is not None and Path(preload.path) != path:
        preload = None

    def check_verdict() -> None:
        found = verdict(path)  # (remembered: the child runs once per file)
        if not found.runs:
            raise ModelFileError(path, found.reason)

    if preload is None:
        check_verdict()
    report(LOADING, 0.0)
    # The progress callback takes the GIL on every call, which the main thread holds: only a
    # file whose load is long enough to show (past PROGRESS_BYTES) reports its fractions.
    progress = (lambda f: report(LOADING, f)) if header.file_size > PROGRESS_BYTES else None
    n_threads = threads or performance_cores()

    def open_model() -> tuple[LlamaCppModel, LlamaCppContext]:
        model = preload.take(path, gpu_layers) if preload is not None else None
        if model is not None:
            model.header = header  # (a preload does not read it: the probe child was its check)
        else:
            if preload is not None:  # it did not load: say why, as without a preload
                check_verdict()
            model = LlamaCppModel.open(path, header=header, gpu_layers=gpu_layers, progress=progress,
                                       quiet=True)
        try:
            cells = context_cells(config, model.facts.n_ctx_train, max_context, max_kv_bytes,
                                  cache_types)
            return model, LlamaCppContext(model, n_ctx=cells, n_seq_max=max(1, session_slots),
                                          n_batch=DEFAULT_BATCH, threads=n_threads,
                                          cache_types=cache_types)
        except BaseException:
            model.close()
            raise

    # llama.cpp's load and the context's allocation run without the GIL, so the tokenizer's
    # token texts are read beside them.
    opened = in_background(open_model, "model-load")
    # Each ctypes call of the open (and a big file's progress callback) waits for the GIL this
    # thread holds: a short switch interval lets them through (host.switching).
    with fast_switching():
        try:
            spec = tokenizer_spec(header)
        except BaseException:
            close_opened(opened)
            raise
    try:
        model, context = opened()
    except ModelFileError:
        if verdict(path).runs:  # the child said it runs: ask again next time
            forget(path)
        raise
    try:
        tokenizer = load_tokenizer(header, model, spec)
        template = checked_template(path, model.vocab_size, tokenizer, chat_template)
    except BaseException:
        context.close()
        model.close()
        raise
    projector, vision_reason = open_projector(model, path, mmproj, n_threads, DEFAULT_BATCH)
    report(LOADING, 1.0)
    backend = LlamaChatBackend(
        model, context, tokenizer, template,
        model_path=path, config=config, session_slots=session_slots,
        thermal=thermal, memory=memory, load_seconds=time.perf_counter() - start,
        state_cache_bytes=state_cache_bytes, projector=projector, vision_reason=vision_reason,
    )
    backend.speculation = speculation
    return backend
