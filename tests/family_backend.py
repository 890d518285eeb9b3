"""`FamilyLoopBackend`: ui_fakes.EngineLoopBackend with a model family's real tokenizer (llama.cpp's,
over a tiny tokenizer GGUF) and its real chat template: each reply is spelled in that family's
tokens (its tool-call and reasoning markers as their single ids) by a scripted producer under the
engine's real step loop, and ends with the family's end of turn. Enough of a ChatBackend for the
window and for the API server (a real `PromptBuilder`, so requests render through the template).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from family_gguf import family_tokenizer, template_source
from ui_fakes import EngineLoopBackend

from turbospark_app.chat.api import ChatMessage, PreparedTurn, TurnSettings
from turbospark_app.chat.prompt import PromptBuilder
from turbospark_app.engine.raw_completion import check_admission


class FamilyLoopBackend(EngineLoopBackend):
    """Replies of `family` through the engine loop; `prompts` renders with the family template."""

    def __init__(self, tmp_path: Path, family: str, replies: Sequence[str], **kw: Any) -> None:
        super().__init__(replies, **{"max_context": 16384, **kw})
        self.family = family
        self.tokenizer, self.template = family_tokenizer(tmp_path, family)
        self.vocab_size = self.tokenizer.vocab_size
        self.prompts = PromptBuilder(self.template, self.tokenizer, self.max_context)
        self.prompt_ids: list[tuple[int, ...]] = []  # every turn's prompt, for the tests

    def _producer(self, session_id: str) -> Any:
        from fakes import ScriptedProducer

        if session_id not in self.producers:
            self.producers[session_id] = ScriptedProducer(self.vocab_size, reuse=None, poison_prefill=False)
        return self.producers[session_id]

    def prepare_turn(self, session_id: str, messages: Sequence[ChatMessage], settings: TurnSettings,
                     *, continue_final: bool = False, raw: bool = False) -> PreparedTurn:
        ids = self.prompts.chat_ids(messages, settings.system_prompt, continue_final=continue_final,
                                    template_vars=dict(settings.template_vars) or None)
        return self.prepare_prompt(session_id, ids, settings)

    def prepare_prompt(self, session_id: str, ids: Sequence[int], settings: TurnSettings) -> PreparedTurn:
        check_admission(ids, settings.generation, self.max_context)
        self.prompt_ids.append(tuple(ids))
        return PreparedTurn(session_id, tuple(ids), settings)

    def pick_session(self, ids: Sequence[int], prefix: str, fallback: str) -> str:
        return fallback

    def stream_turn(self, turn: PreparedTurn, cancel: Callable[[], bool]):
        from turbospark_app.engine import stream_raw_completion_chunked

        self._record("stream_turn")
        reply = self.replies[min(self.turns, len(self.replies) - 1)]
        self.turns += 1
        producer = self._producer(turn.session_id)
        n = len(turn.prompt_ids)
        spelled = self.tokenizer.encode(reply) + [min(self.tokenizer.end_of_turn_ids or self.tokenizer.eog_ids)]
        producer.script = {n - 1 + i: tok for i, tok in enumerate(spelled)}
        return stream_raw_completion_chunked(
            producer, self.tokenizer, turn.prompt_ids, turn.settings.generation, self.max_context,
            self.vocab_size, cancel, chunk_size=self.chunk_size)

    def model_info(self) -> dict[str, Any]:
        self._record("model_info")
        return {"name": f"scripted-{self.family}", "file_name": f"{self.family}.gguf",
                "max_context": self.max_context, "context_length": self.max_context,
                "vocab_size": self.vocab_size, "has_chat_template": True,
                "chat_template": template_source(self.family)}
