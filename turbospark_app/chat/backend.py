"""The real chat backend: a GGUF model, its tokenizer and template, and the session pool.

Only the engine thread calls it (one thread owns the model). `system_info()` is the one
exception: it reads a snapshot and the probes, never the model, so a GUI timer may call it
from any thread without waiting behind a forward step.
"""

from __future__ import annotations

import contextvars
import dataclasses
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engine import (
    EmptyPrompt,
    GenerationConfig,
    DecodeStep,
    LookupSpeculation,
    PaceWait,
    RawDecodeResult,
    StopReason,
    stream_raw_completion,
    stream_raw_completion_chunked,
)
from ..engine.raw_completion import check_admission, check_rate
from ..engine.selection import validate_shaping
from ..engine.session_pool import SessionPool, SessionProducer
from ..model.cache_integrity import (
    CacheCheck,
    take_warm_entries,
    verify_in_background,
    verifying_load,
)
from .cache_gate import CacheRejected, CancelledAtGate, verified_stream
from ..model.text.chat_template import ChatTemplate
from ..model.text.consistency import checked_template
from ..model.reference.forward import LlamaModel
from ..model.producer import LlamaProducer, innermost, produce_batch
from ..model.text.tokenizer import GGUFTokenizer
from ..readings import MemoryMonitor, ThermalMonitor, monitors_from_environment
from ..readings.system_info import system_info
from .api import ChatMessage, PreparedTurn, TurnSettings, TurnStream
from .logprobs import LogprobTap
from .prompt import PromptBuilder

DEFAULT_SESSION_SLOTS = 4
SLOT_WAIT_SECONDS = 0.05  # how often a turn waiting for a busy slot looks again
MAX_REBUILDS = 2  # per turn: a cache failing again after as many rebuilds means a bad disk


class LlamaChatBackend:
    """Implements `ChatBackend` over `LlamaModel` + `SessionPool`."""

    def __init__(
        self,
        model: LlamaModel,
        tokenizer: GGUFTokenizer,
        template: ChatTemplate | None,
        *,
        model_path: Path,
        session_slots: int = DEFAULT_SESSION_SLOTS,
        max_kv_bytes: int | None = None,
        max_context: int | None = None,
        thermal: ThermalMonitor | None = None,
        memory: MemoryMonitor | None = None,
        load_seconds: float = 0.0,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.template = template
        self.model_path = model_path
        self.max_context = min(max_context or model.config.context_length, model.config.context_length)
        if thermal is None or memory is None:
            env_thermal, env_memory = monitors_from_environment()
            thermal, memory = thermal or env_thermal, memory or env_memory
        self.thermal = thermal
        self.memory = memory
        self.pool = self._new_pool(model, session_slots, max_kv_bytes)
        self._load_seconds = load_seconds
        self.cache_check: CacheCheck | None = None  # the background weight-cache check, if warm
        # Rebuilding the model after a failed cache check (set by load_backend): the loader,
        # and how the next check reports. `_generation` counts rebuilds (concurrent turns).
        self.reload_model: Callable[[], LlamaModel] | None = None
        self.on_cache_problem: Callable[[str], None] | None = None
        self._generation = 0
        self._snapshot_lock = threading.Lock()
        self._sessions: list[dict[str, Any]] = self.pool.describe()
        self._last_turn: dict[str, Any] | None = None
        self._model_info = self._describe_model()
        self.prompts = PromptBuilder(template, tokenizer, self.max_context)
        # Speculation's off-switch while other streams decode (the engine thread wires it):
        # True = crowded, decode plainly so the steps batch.
        self.crowded: Callable[[], bool] = lambda: False
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
        if not messages or not messages[-1].content.strip():
            raise EmptyPrompt()
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

    def pick_session(self, prompt_ids: Sequence[int], prefix: str, fallback: str) -> str:
        """The session whose idle slot shares the longest token prefix with `prompt_ids`,
        among sessions named `prefix`... (the API's); `fallback` (a new session) when none
        shares at least a tenth of the prompt."""
        session, shared = self.pool.longest_prefix_session(prompt_ids, prefix)
        if session is None or shared * 10 < len(prompt_ids):
            return fallback
        return session

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]) -> TurnStream:
        """The turn's step loop on its session slot (waits, as PaceWait, for a busy slot)."""
        config = self._with_probes(turn.settings.generation)
        return self._run_turn(turn, config, cancel)

    def decode_batch(self, steps: Sequence[DecodeStep]) -> None:
        """Run the decode steps of several turns as one forward pass (the engine thread's
        batched round); each step's logits land in its own buffer, as `produce` would."""
        produce_batch([(innermost(s.producer), s.token, s.position, s.logits)  # type: ignore[misc]
                       for s in steps])

    def _new_pool(self, model: LlamaModel, slots: int, max_kv_bytes: int | None
                  ) -> SessionPool[LlamaProducer]:
        arena = getattr(model, "new_kv_arena", None)
        if arena is not None:  # the slots' caches are rows of one arena: they batch
            kv = arena(self.max_context)
            return SessionPool(lambda: LlamaProducer(model, kv.new_cache()),
                               slots=slots, max_kv_bytes=max_kv_bytes)
        return SessionPool(lambda: LlamaProducer(model, model.new_cache(self.max_context)),
                           slots=slots, max_kv_bytes=max_kv_bytes)

    def _run_turn(
        self, turn: PreparedTurn, config: GenerationConfig, cancel: Callable[[], bool]
    ) -> TurnStream:
        """The turn, its first token held until the weight-cache check is in (cache_gate); a
        failed check rebuilds the weights from the GGUF and runs the turn again."""
        rebuilds = 0
        while True:
            generation = self._generation
            check = self.cache_check
            if check is None or check.state != "mismatch":  # (else found before the turn: rebuild)
                try:
                    return (yield from self._run_turn_once(turn, config, cancel))
                except CancelledAtGate:
                    return _cancelled_before_start(turn)
                except CacheRejected:
                    pass
            if generation != self._generation:  # a concurrent turn rebuilt meanwhile: run again
                continue
            if rebuilds == MAX_REBUILDS:  # failing again right after rebuilds: a suspect disk
                raise CacheRejected(
                    f"the weight cache failed its integrity check {rebuilds + 1} times in a row, "
                    "even after being rebuilt from the GGUF: check the disk holding it "
                    f"({self.cache_check.message if self.cache_check else ''})")
            rebuilds += 1
            self._rebuild_model()

    def _rebuild_model(self) -> None:
        """Load the model again: the folders that failed were set aside, so this rebuilds them
        from the GGUF. Every slot starts empty (their KV came from the failing weights)."""
        check = self.cache_check
        if self.reload_model is None:
            raise CacheRejected((check.message if check else "")
                                or "the weight cache failed its integrity check")
        self.pool.release_all()
        start = time.perf_counter()
        self.model = self.reload_model()
        self.pool = self._new_pool(self.model, len(self.pool.slots), self.pool.max_kv_bytes)
        self._generation += 1
        self.cache_check = start_cache_check(self.model_path, self.on_cache_problem)
        self._load_seconds = time.perf_counter() - start
        self._model_info = self._describe_model()
        self._refresh_sessions()

    def _run_turn_once(
        self, turn: PreparedTurn, config: GenerationConfig, cancel: Callable[[], bool]
    ) -> TurnStream:
        check = self.cache_check
        while (producer := self.pool.checkout(turn.session_id)) is None:
            if cancel():
                return _cancelled_before_start(turn)
            yield PaceWait(time.monotonic() + SLOT_WAIT_SECONDS)
        tap = None
        if turn.settings.top_logprobs is not None:
            producer = tap = LogprobTap(producer, turn.settings.top_logprobs)
        try:
            args = (producer, self.tokenizer, turn.prompt_ids, config, self.max_context,
                    self.model.vocab_size, cancel)
            spec = self._speculation(turn.settings)
            if turn.settings.chunked_prefill:
                stream = stream_raw_completion_chunked(*args, chunk_size=turn.settings.chunk_size,
                                                       speculation=spec)
            else:
                stream = stream_raw_completion(*args, speculation=spec)
            stream = verified_stream(stream, check, cancel, config.rate.clock)
            result = yield from (stream if tap is None else tap.scored(stream))
            self._record_turn(turn, producer, result)
            return result
        finally:
            producer.end_turn()
            self._refresh_sessions()

    def _speculation(self, settings: TurnSettings) -> LookupSpeculation | None:
        """The turn's prompt-lookup speculation, off while `crowded()` (None when not asked)."""
        if (settings.speculation or self.speculation) != "lookup":
            return None
        return LookupSpeculation(crowded=lambda: self.crowded())

    def drop_session(self, session_id: str) -> None:
        self.pool.drop(session_id)
        self._refresh_sessions()

    def model_info(self) -> dict[str, Any]:
        info = dict(self._model_info)
        check = self.cache_check
        # "pending" | "ok" | "mismatch" after a warm load; else how the weights were prepared
        origin = getattr(getattr(self.model, "weights", None), "origin", "unknown")
        info["weights_check"] = check.state if check is not None else origin
        return info

    def system_info(self) -> dict[str, Any]:
        with self._snapshot_lock:
            sessions = [dict(s) for s in self._sessions]
            last_turn = None if self._last_turn is None else dict(self._last_turn)
        return system_info(
            model=self._model_info,
            sessions=sessions,
            last_turn=last_turn,
            thermal=self.thermal,
            memory=self.memory,
        )

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
            "new_tokens": result.new_tokens,
            "prefill_seconds": result.prefill_seconds,
            "decode_seconds": result.decode_seconds,
            "prefill_tokens_per_sec": result.prefill_tokens_per_sec,
            "decode_tokens_per_sec": result.decode_tokens_per_sec,
            "reason": result.reason.value,
            "kv_position": result.kv_position,
            "session_slot_evicted": result.session_slot_evicted,
            "peak_memory_pressure": result.peak_memory_pressure.name.lower(),
        }
        with self._snapshot_lock:
            self._last_turn = stats

    def _refresh_sessions(self) -> None:
        rows = self.pool.describe()
        with self._snapshot_lock:
            self._sessions = rows

    def _describe_model(self) -> dict[str, Any]:
        c = self.model.config
        info = c.to_dict()
        info.update(
            path=str(self.model_path),
            file_name=self.model_path.name,
            file_size_bytes=os.path.getsize(self.model_path),
            chat_template=None if self.template is None else self.template.source,
            chat_template_is_fallback=self.template is not None and self.template.is_fallback,
            has_chat_template=self.template is not None,  # False: a base model, raw completion
            max_context=self.max_context,
            load_seconds=round(self._load_seconds, 3),
            weights_bytes=self.model.weights.nbytes,
            weights_kind=self.model.weights_kind,  # "compact" | "f32"
            kernels=getattr(self.model, "kernels", None),  # compact: "exact-prompt" | "exact" | "int8"
        )
        return info


def kv_budget_bytes(mb: float | None) -> int | None:
    """A KV budget in MB (the --kv-budget-mb flag) in bytes; None = unbounded."""
    if mb is None:
        return None
    if mb <= 0:
        raise SystemExit("turbospark: --kv-budget-mb must be > 0")
    return int(mb * 1024 * 1024)


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
    cache_dir: Path | None = None,
    thermal: ThermalMonitor | None = None,
    memory: MemoryMonitor | None = None,
    chat_template: str | None = None,
    on_cache_problem: Callable[[str], None] | None = None,
    weights: str | None = None,
    kernels: str | None = None,
    speculation: str = "off",
) -> LlamaChatBackend:
    """Load a GGUF (weights through the cache) and build the backend. Raises EngineError.

    `thermal` / `memory`: monitors to pace on (the desktop app passes its own, so a level forced
    from the QA panel survives a model switch); by default they come from the environment.
    The load checks (`model.consistency`) refuse a tokenizer that does not fit the weights or a
    template that cannot render; `chat_template="chatml"` uses the built-in ChatML instead.
    A file without a template loads with none (`has_chat_template` False): raw completion.
    A warm load's weight-cache folders are checked in the background (`backend.cache_check`)
    and each turn's first token waits for the verdict; on a mismatch the folders are set aside,
    `on_cache_problem(message)` is called (on the checking thread) for the caller to show, and
    the backend rebuilds the weights from the GGUF and runs the turn again (chat.cache_gate).
    `weights`: "compact" or "f32" (model.weights_choice); None = $TURBOSPARK_WEIGHTS or compact.
    `kernels`: the compact engine's kernel mode (model.kernels_choice); None = $TURBOSPARK_KERNELS
    or exact-prompt; ignored by float32 weights. `speculation`: "lookup" | "off", for turns
    whose settings leave it None (model.choice.speculation)."""
    path = Path(model_path)
    start = time.perf_counter()
    take_warm_entries(path)  # (forget entries noted by earlier loads nobody verified)

    def reload_model() -> LlamaModel:
        with verifying_load():  # the cache folders it maps are hashed while it loads
            return LlamaModel.from_gguf(path, cache_dir, weights=weights, kernels=kernels)

    # The tokenizer is built while the weights load: ONNX Runtime's session set-up (most of a
    # warm open) runs without the GIL, and the tokenizer is ~0.2 s of Python (128k vocabulary).
    model_done = in_background(reload_model, "model-load")
    try:
        tokenizer = GGUFTokenizer.from_gguf(path)
    finally:
        model = model_done()  # a failed load raises here, before a tokenizer error
    template = checked_template(path, model.config, tokenizer, chat_template)
    backend = LlamaChatBackend(
        model,
        tokenizer,
        template,
        model_path=path,
        session_slots=session_slots,
        max_kv_bytes=max_kv_bytes,
        max_context=max_context,
        thermal=thermal,
        memory=memory,
        load_seconds=time.perf_counter() - start,
    )
    backend.reload_model, backend.on_cache_problem = reload_model, on_cache_problem
    backend.speculation = speculation
    backend.cache_check = start_cache_check(path, on_cache_problem)
    return backend


def in_background(fn: Callable[[], Any], name: str) -> Callable[[], Any]:
    """Run `fn()` on a new thread in the caller's context (its load-progress reporter is a
    context variable); returns a join that gives fn's result or raises its exception."""
    future: Future[Any] = Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:  # re-raised by the join, on the caller's thread
            future.set_exception(exc)

    threading.Thread(target=contextvars.copy_context().run, args=(run,), name=name, daemon=True).start()
    return future.result


def start_cache_check(path: Path, on_problem: Callable[[str], None] | None) -> CacheCheck | None:
    """Verify, in the background, every cache folder the last load of `path` mapped without
    building it (whatever format the weight cache holds); None when it built everything."""
    entries = take_warm_entries(path)
    return verify_in_background(entries, on_problem) if entries else None
