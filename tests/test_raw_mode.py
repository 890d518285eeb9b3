"""Raw completion (issue #18, part 4) below the window: a GGUF without a chat template opens
and its turns are raw completions (the texts so far concatenated, no roles), reusing the KV
prefix turn after turn; `turbospark chat --raw`; the API refuses chat on such a model."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.chat.api import ChatMessage, TurnSettings
from turbospark_app.chat.backend import LlamaChatBackend, load_backend
from turbospark_app.cli.chat_command import Conversation
from turbospark_app.cli.main import main
from turbospark_app.engine import GenerationConfig, TokenProgress
from turbospark_app.engine.raw_completion import drive_raw_completion

SHORT = TurnSettings(generation=GenerationConfig(max_new_tokens=6))


def write_base_model(path: Path, **tokenizer: Any) -> Path:
    """A tiny GGUF with a vocabulary but no `tokenizer.chat_template` (a base model)."""
    write_tiny_gguf(path, tokenizer={"template": None, **tokenizer})
    return path


@pytest.fixture
def base_model(tmp_path: Path, isolated_dirs: dict[str, Path]) -> Path:
    return write_base_model(tmp_path / "base.gguf")


@pytest.fixture
def base_backend(base_model: Path, tmp_path: Path) -> LlamaChatBackend:
    return load_backend(base_model, session_slots=2)


def run(backend: LlamaChatBackend, messages: list[ChatMessage], *, session: str = "s",
        continue_final: bool = False, raw: bool = False) -> tuple[ChatMessage, Any, tuple[int, ...]]:
    turn = backend.prepare_turn(session, messages, SHORT, continue_final=continue_final, raw=raw)
    ids: list[int] = []
    text: list[str] = []

    def on(e: object) -> None:
        if isinstance(e, TokenProgress):
            ids.append(e.id)
            text.append(e.delta)

    result = drive_raw_completion(backend.stream_turn(turn, lambda: False), SHORT.generation.rate,
                                  lambda: False, on)
    return ChatMessage("assistant", "".join(text), tuple(ids)), result, turn.prompt_ids


def test_a_model_without_a_template_opens_for_raw_completion(base_model: Path, base_backend) -> None:
    from turbospark_app.ui.dialogs.models import check_model_file

    assert not base_backend.has_chat_template and base_backend.template is None
    info = base_backend.model_info()
    assert info["has_chat_template"] is False and info["chat_template"] is None
    facts = check_model_file(base_model)  # the window's Open Model check lets it through
    assert facts["has_chat_template"] is False and facts["chat_template"] is None
    # The user text is the prompt as is: no ChatML markers, no roles.
    turn = base_backend.prepare_turn("s", [ChatMessage("user", "the cat")], SHORT)
    assert list(turn.prompt_ids) == base_backend.tokenizer.encode("the cat")


def test_chatml_is_still_there_when_asked(base_model: Path, tmp_path: Path) -> None:
    backend = load_backend(base_model, session_slots=1,
                           chat_template="chatml")
    assert backend.has_chat_template and backend.template.is_fallback
    turn = backend.prepare_turn("s", [ChatMessage("user", "hi")], SHORT)
    assert backend.tokenizer.token_to_id("<|im_start|>") in turn.prompt_ids


def test_chat_prompts_are_refused_on_a_base_model(base_backend) -> None:
    from turbospark_app.chat.prompt import NoChatTemplate

    with pytest.raises(NoChatTemplate, match="no chat template"):
        base_backend.prompts.chat_ids([ChatMessage("user", "hi")])
    assert not base_backend.prompts.has_chat_template


def test_raw_turns_concatenate_the_texts_and_reuse_the_kv_prefix(base_backend) -> None:
    first = [ChatMessage("user", "the cat")]
    reply, r1, p1 = run(base_backend, first)
    assert r1.reused_prefix_tokens == 0 and reply.token_ids
    second = [*first, reply, ChatMessage("user", " he")]
    reply2, r2, p2 = run(base_backend, second)
    enc = base_backend.tokenizer.encode
    assert list(p2) == [*enc("the cat"), *reply.token_ids, *enc(" he")]
    # Everything the first turn put in the KV (its prompt and reply) is reused.
    assert r2.reused_prefix_tokens >= len(p1) + len(reply.token_ids) - 1 > 0
    # Continue: the same texts ending with the reply, left open; what the KV holds is reused.
    _, r3, p3 = run(base_backend, [*second, reply2], continue_final=True)
    assert list(p3) == [*p2, *reply2.token_ids]
    assert r3.reused_prefix_tokens >= len(p2) + len(reply2.token_ids) - 1
    # Regenerate: the second turn's prompt again, a fresh reply from it (greedy: the same).
    again, _, p4 = run(base_backend, second)
    assert p4 == p2 and again.token_ids == reply2.token_ids


def test_an_instruct_model_runs_raw_when_asked(tmp_path: Path, isolated_dirs) -> None:
    path = tmp_path / "instruct.gguf"
    write_tiny_gguf(path, tokenizer={})  # with the tiny ChatML template
    backend = load_backend(path, session_slots=1)
    assert backend.has_chat_template
    chat = backend.prepare_turn("s", [ChatMessage("user", "the cat")], SHORT)
    raw = backend.prepare_turn("s", [ChatMessage("user", "the cat")], SHORT, raw=True)
    assert list(raw.prompt_ids) == backend.tokenizer.encode("the cat") != list(chat.prompt_ids)


def test_the_system_prompt_has_no_place_in_raw_mode(base_backend) -> None:
    settings = TurnSettings(generation=SHORT.generation, system_prompt="You are a pirate.")
    turn = base_backend.prepare_turn("s", [ChatMessage("system", "x"), ChatMessage("user", "the")], settings)
    assert list(turn.prompt_ids) == base_backend.tokenizer.encode("the")


# -- the CLI -----------------------------------------------------------------------------------


def summaries(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("[prompt ")]


def reused(line: str) -> int:
    return int(line.split("reused ")[1].split(" ")[0])


def prompt_tokens(line: str) -> int:
    return int(line.split("prompt ")[1].split(" ")[0])


def n_tokens(model: Path, text: str) -> int:
    from turbospark_app.model.text.tokenizer import GGUFTokenizer

    return len(GGUFTokenizer.from_gguf(model).encode(text))


def test_cli_raw_prompt_and_script(base_model: Path, tmp_path: Path, capsys) -> None:
    assert main(["chat", "--model", str(base_model), "--raw", "--prompt", "the cat", "--max-new", "4"]) == 0
    out, err = capsys.readouterr()
    (line,) = summaries(err)
    cat = n_tokens(base_model, "the cat")
    assert prompt_tokens(line) == cat and reused(line) == 0  # the text alone: no template
    script = tmp_path / "turns.txt"
    script.write_text("the cat\n he\n", encoding="utf-8")
    assert main(["chat", "--model", str(base_model), "--raw", "--script", str(script), "--max-new", "4"]) == 0
    lines = summaries(capsys.readouterr().err)
    assert len(lines) == 2 and reused(lines[0]) == 0
    # Turn 2's prompt = turn 1's prompt + its 4 reply ids + " he": all but " he" is reused.
    assert prompt_tokens(lines[1]) == cat + 4 + n_tokens(base_model, " he")
    assert reused(lines[1]) >= cat + 4 - 1


def test_cli_runs_a_base_model_raw_without_the_flag(base_model: Path, capsys) -> None:
    assert main(["chat", "--model", str(base_model), "--prompt", "the cat", "--max-new", "2"]) == 0
    err = capsys.readouterr().err
    assert "no chat template" in err
    assert prompt_tokens(summaries(err)[0]) == n_tokens(base_model, "the cat")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_cli_raw_interactive(base_model: Path, monkeypatch, capsys) -> None:
    lines = iter(["the cat", " he", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    monkeypatch.setattr("sys.stdin", _Terminal())  # interactive: a terminal, not a pipe
    assert main(["chat", "--model", str(base_model), "--raw", "--max-new", "3"]) == 0
    err = capsys.readouterr().err
    assert "raw completion" in err
    found = summaries(err)
    assert len(found) == 2 and reused(found[0]) == 0
    assert reused(found[1]) >= n_tokens(base_model, "the cat") + 3 - 1


def test_cli_raw_on_an_instruct_model_has_no_template(tmp_path: Path, isolated_dirs, capsys) -> None:
    path = tmp_path / "instruct.gguf"
    write_tiny_gguf(path, tokenizer={})
    assert main(["chat", "--model", str(path), "--prompt", "the cat", "--max-new", "2"]) == 0
    chat_prompt = prompt_tokens(summaries(capsys.readouterr().err)[0])
    assert main(["chat", "--model", str(path), "--raw", "--prompt", "the cat", "--max-new", "2"]) == 0
    raw_prompt = prompt_tokens(summaries(capsys.readouterr().err)[0])
    assert raw_prompt == n_tokens(path, "the cat") < chat_prompt


@pytest.mark.parametrize(("extra", "said"), [
    (["--system", "be nice"], "--system has no place"),
    (["--chat-template", "chatml"], "exclude each other"),
    (["--endpoint", "http://127.0.0.1:9"], "this computer's model only"),
])
def test_cli_raw_refuses_flags_it_cannot_honour(base_model: Path, capsys, extra, said) -> None:
    assert main(["chat", "--model", str(base_model), "--raw", "--prompt", "x", *extra]) == 2
    assert said in capsys.readouterr().err


def test_conversation_keeps_raw_replies_for_the_next_prompt(base_backend) -> None:
    import io

    conv = Conversation(base_backend, SHORT, raw=True)
    conv.turn("the cat", io.StringIO(), lambda: False)
    first_reply = conv.messages[-1]
    result, _ = conv.turn(" he", io.StringIO(), lambda: False)
    assert [m.role for m in conv.messages] == ["user", "assistant", "user", "assistant"]
    cat = len(base_backend.tokenizer.encode("the cat"))
    assert result.reused_prefix_tokens >= cat + len(first_reply.token_ids or ()) - 1


# -- the API -----------------------------------------------------------------------------------


def test_api_chat_on_a_base_model_is_a_clear_400(base_model: Path, tmp_path: Path) -> None:
    from turbospark_app.server import ApiServer, ServerConfig
    from turbospark_app.service.engine_thread import EngineThread

    engine = EngineThread(lambda: load_backend(base_model, session_slots=1),
                          lambda e: None, max_active=1)
    engine.start()
    deadline = time.monotonic() + 60
    while engine.state != "ready":
        assert engine.state != "failed" and time.monotonic() < deadline
        time.sleep(0.02)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = ApiServer(engine, ServerConfig(port=0))
    try:
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        base = f"http://127.0.0.1:{server.port}/v1"

        def post(route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
            req = urllib.request.Request(base + route, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        status, body = post("/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 400 and body["error"]["code"] == "no_chat_template"
        assert "no chat template" in body["error"]["message"] and "/v1/completions" in body["error"]["message"]
        status, body = post("/completions", {"prompt": "the cat", "max_tokens": 3})
        assert status == 200 and body["usage"]["prompt_tokens"] == n_tokens(base_model, "the cat")
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        engine.shutdown(10)


def test_model_info_says_a_base_model_runs_raw(base_model: Path, tmp_path: Path) -> None:
    from turbospark_app.cli.model_command import model_info
    from turbospark_app.model.gguf.describe import describe_gguf

    def template_line(path: Path) -> str:
        return next(line for line in model_info(describe_gguf(path)) if line.startswith("chat_template: "))

    assert template_line(base_model) == "chat_template: absent (a base model: raw completion)"
    instruct = tmp_path / "instruct.gguf"
    write_tiny_gguf(instruct, tokenizer={})
    assert template_line(instruct).startswith("chat_template: present (")


def test_exports_say_a_conversation_runs_raw(tmp_path: Path) -> None:
    from turbospark_app.conversations.export import conversation_json, conversation_markdown
    from turbospark_app.conversations.store import Store

    store = Store(tmp_path / "c.sqlite3")
    try:
        raw = store.create_conversation("raw", raw=True)
        chat = store.create_conversation("chat")
        assert conversation_json(store, raw.id)["conversation"]["raw_completion"] is True
        assert conversation_json(store, chat.id)["conversation"]["raw_completion"] is False
        for conv in (raw, chat):
            store.add_message(conv.id, "user", "the cat")
            store.add_message(conv.id, "assistant", " sat on the mat")
        raw_md, chat_md = conversation_markdown(store, raw.id), conversation_markdown(store, chat.id)
        assert "Raw completion" in raw_md and "Raw completion" not in chat_md
        # headed as the pane heads them: no roles in raw completion
        assert "## Text" in raw_md and "## Continuation" in raw_md and "## You" not in raw_md
        assert "## You" in chat_md and "## Assistant" in chat_md and "## Text" not in chat_md
    finally:
        store.close()
