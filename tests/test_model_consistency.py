"""Consistency at load: tokenizer vs embedding rows, special ids, merges, the chat template.

A model that fails is refused with the reason when it is loaded (`load_backend`, which `chat` and
the app use) and when the window's Open Model checks it, before anyone can type.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_gguf import write_tiny_gguf

from turbospark_app.chat.backend import load_backend
from turbospark_app.engine import EngineError
from turbospark_app.model.text.chat_template import (
    TemplateBudgetExceeded,
    TemplateError,
)

NESTED = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"


def _write(tmp_path: Path, **tokenizer) -> Path:
    path = tmp_path / "m.gguf"
    write_tiny_gguf(path, tokenizer=tokenizer)
    return path


def _refusal(path: Path, tmp_path: Path) -> EngineError:
    with pytest.raises(EngineError) as info:
        load_backend(path, session_slots=1)
    from turbospark_app.ui.dialogs.models import (
        check_model_file,  # the window's Open Model check
    )

    with pytest.raises(type(info.value)) as again:
        check_model_file(path)
    if isinstance(info.value, TemplateBudgetExceeded):  # steps or seconds, as the CPU allows
        assert str(again.value).split("(refused")[1] == str(info.value).split("(refused")[1]
    else:
        assert str(again.value) == str(info.value)
    return info.value


def test_a_consistent_tiny_model_loads(tmp_path, isolated_dirs) -> None:
    backend = load_backend(_write(tmp_path), session_slots=1)
    assert backend.tokenizer.vocab_size == backend.model.vocab_size == 300


def test_more_tokens_than_embedding_rows_is_refused(tmp_path, isolated_dirs) -> None:
    # llama.cpp's own loader refuses it first (its embedding must have a row per token)
    err = _refusal(_write(tmp_path, n_tokens=310), tmp_path)
    assert "token_embd.weight" in str(err) and "310" in str(err) and "300" in str(err)


@pytest.mark.parametrize(("key", "value", "name"), [
    ("eos", 5000, "eos_token_id"), ("bos", 300, "bos_token_id"), ("eot", 999, "eot_token_id"),
])
def test_special_token_ids_out_of_range_are_refused(tmp_path, isolated_dirs, key, value, name) -> None:
    err = _refusal(_write(tmp_path, **{key: value}), tmp_path)
    assert f"{name} = {value}" in str(err) and "300" in str(err)


def test_merges_naming_unknown_tokens_run_on_llama_cpps_own_tokenizer(tmp_path, isolated_dirs) -> None:
    """Our `tokenizers` build refuses a merge naming a token that does not exist; llama.cpp
    takes the file (it skips such merges), so the model runs with llama.cpp's tokenizer."""
    backend = load_backend(_write(tmp_path, merges=["\u0120 t", "q zz"]), session_slots=1)
    try:
        assert backend.model_info()["tokenizer"] == "llama.cpp"
        assert backend.tokenizer.decode(backend.tokenizer.encode("hello there")) == "hello there"
    finally:
        backend.close()


def test_a_template_that_cannot_render_a_tiny_conversation_is_refused(tmp_path, isolated_dirs) -> None:
    err = _refusal(_write(tmp_path, template="{{ raise_exception('no chat here') }}"), tmp_path)
    assert isinstance(err, TemplateError) and "no chat here" in str(err)


def test_a_template_over_budget_is_refused_with_the_chatml_offer(tmp_path, isolated_dirs) -> None:
    err = _refusal(_write(tmp_path, template=NESTED), tmp_path)
    assert isinstance(err, TemplateBudgetExceeded)
    assert getattr(err, "chatml_available", None) is True and "ChatML" in str(err)
    backend = load_backend(tmp_path / "m.gguf", session_slots=1,
                           chat_template="chatml")
    assert backend.template.is_fallback and "<|im_start|>user" in backend.template.render(
        [{"role": "user", "content": "hi"}])


def test_no_chatml_offer_without_chatml_tokens(tmp_path, isolated_dirs) -> None:
    path = _write(tmp_path, template=NESTED, specials=["<s>", "</s>", "<unk>"])
    err = _refusal(path, tmp_path)
    assert getattr(err, "chatml_available", None) is False and "ChatML" not in str(err)


def test_the_cli_offers_chatml_and_uses_it_when_asked(tmp_path, isolated_dirs, capsys) -> None:
    from turbospark_app.cli.main import main

    path = _write(tmp_path, template=NESTED)
    assert main(["chat", "--model", str(path), "--prompt", "hi", "--max-new", "2"]) == 2
    err = capsys.readouterr().err
    assert "budget" in err and "--chat-template chatml" in err and len(err.strip().splitlines()) == 1
    assert main(["chat", "--model", str(path), "--prompt", "hi", "--max-new", "2",
                 "--chat-template", "chatml"]) == 0
