"""Continue, Regenerate and Edit on the default model, through the store's conversation tree:
the reuse each one reports is checked against the token ids the model was actually fed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turbospark_app.chat.api import TurnSettings, reply_token_ids
from turbospark_app.chat.backend import LlamaChatBackend, load_backend
from turbospark_app.conversations.actions import ConversationTree, TurnPlan, combine_stats, prompt_messages
from turbospark_app.engine import GenerationConfig, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion
from turbospark_app.model.llamacpp.producer import LlamaCppProducer as LlamaProducer
from turbospark_app.conversations.store import STORE_FILENAME, Store

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

MODEL_ID = "smollm2"


@pytest.fixture(scope="module")
def backend(default_model_path: Path) -> LlamaChatBackend:
    return load_backend(default_model_path, session_slots=2)


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every token id fed to any LlamaCppProducer, in order (prefill and decode)."""
    log: list[int] = []
    for name in ("produce", "produce_prefill"):
        original = getattr(LlamaProducer, name)
        monkeypatch.setattr(LlamaProducer, name,
                            lambda self, tok, pos, *a, _o=original: (log.append(int(tok)), _o(self, tok, pos, *a))[1])
    chunk = LlamaProducer.produce_chunk_cancellable  # produce_chunk goes through it

    def fed_chunk(self, toks, pos, out, cancel, _o=chunk):  # type: ignore[no-untyped-def]
        done = _o(self, toks, pos, out, cancel)
        if done:  # a cancelled chunk commits nothing
            log.extend(int(t) for t in toks)
        return done

    monkeypatch.setattr(LlamaProducer, "produce_chunk_cancellable", fed_chunk)
    return log


def run(backend: LlamaChatBackend, store: Store, tree: ConversationTree, plan: TurnPlan,
        max_new: int, fed: list[int]) -> dict[str, Any]:
    """What the pane does for a plan, minus the widgets: save, prompt, run, save the reply."""
    settings = TurnSettings(generation=GenerationConfig(max_new_tokens=max_new))
    if plan.target is None:
        user, reply = store.start_turn(tree.conversation_id, plan.parent_id, plan.user_text)
    else:
        user, reply = None, plan.target
    messages = prompt_messages(plan.history, MODEL_ID) + prompt_messages([user] if user else [], MODEL_ID)
    turn = backend.prepare_turn(tree.conversation_id, messages, settings, continue_final=plan.continue_final)
    ids: list[int] = []
    text: list[str] = []

    def progress(e: object) -> None:
        if isinstance(e, TokenProgress):
            ids.append(e.id)
            text.append(e.delta)

    start = len(fed)
    result = drive_raw_completion(backend.stream_turn(turn, lambda: False), settings.generation.rate,
                                  lambda: False, progress)
    stats = {"prompt_tokens": result.prompt_tokens, "reused_prefix_tokens": result.reused_prefix_tokens,
             "new_tokens": result.new_tokens, "model_id": MODEL_ID, "started": True,
             "decode_seconds": result.decode_seconds, "stop_reason": result.reason.value}
    new_ids = reply_token_ids(result.reason, ids)
    content = "".join(text)
    if plan.target is not None:
        content = plan.target.content + content
        new_ids = None if new_ids is None else tuple(plan.target.token_ids or ()) + new_ids
        stats = combine_stats(plan.target.stats, stats)
    store.update_reply(reply.id, content, token_ids=new_ids, stats=stats, stop_reason=result.reason.value)
    tree.reload()
    return {"prompt": list(turn.prompt_ids), "result": result, "fed": fed[start:], "kv": list(result.kv_backed_token_ids)}


def test_continue_regenerate_and_edit_reuse_what_the_kv_holds(backend, fed, tmp_path: Path, capsys) -> None:
    store = Store(tmp_path / STORE_FILENAME)
    c = store.create_conversation()
    tree = ConversationTree(store, c.id)
    first = run(backend, store, tree, tree.plan_send("Write a short poem about the sea."), 12, fed)
    assert first["result"].reason.value == "max_tokens"
    reply = tree.last
    assert reply is not None and len(reply.token_ids) == 12

    # Continue: the prompt is the previous prompt + the reply, left open.
    cont = run(backend, store, tree, tree.plan_continue(), 10, fed)
    assert cont["prompt"] == first["prompt"] + list(reply.token_ids)
    reused = cont["result"].reused_prefix_tokens
    assert reused == len(first["kv"]) == len(cont["prompt"]) - 1  # all but the never-fed last token
    assert cont["fed"][0] == cont["prompt"][-1] and cont["fed"][:1] == cont["prompt"][reused:]
    grown = tree.last
    assert grown.id == reply.id and grown.content.startswith(reply.content) and len(grown.token_ids) == 22

    # Regenerate: the same prompt as the first turn; the KV still holds it (then the reply).
    regen = run(backend, store, tree, tree.plan_regenerate(), 8, fed)
    assert regen["prompt"] == first["prompt"]
    assert regen["result"].reused_prefix_tokens == len(first["prompt"]) - 1
    assert regen["fed"][0] == first["prompt"][-1]
    assert tree.variant(tree.last) == (2, 2)

    # Edit: the user message changes; the KV is reused up to the first changed token.
    user = tree.path[0]
    held = regen["kv"]
    edit = run(backend, store, tree, tree.plan_edit(user.id, "Write a short poem about the moon."), 6, fed)
    common = next(i for i, (a, b) in enumerate(zip(held, edit["prompt"])) if a != b)
    assert edit["result"].reused_prefix_tokens == common
    assert edit["fed"][: len(edit["prompt"]) - common] == edit["prompt"][common:]
    assert [m.content for m in tree.path][0].endswith("moon.") and tree.variant(tree.path[0]) == (2, 2)
    with capsys.disabled():
        print(f"\n[reuse on SmolLM2-135M] continue {reused}/{len(cont['prompt'])} · "
              f"regenerate {regen['result'].reused_prefix_tokens}/{len(regen['prompt'])} · "
              f"edit {common}/{len(edit['prompt'])} (first changed token at {common})")
    store.close()
