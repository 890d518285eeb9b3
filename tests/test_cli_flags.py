"""The `turbospark` argument parser: subcommands and the flags that reach the backend."""

from __future__ import annotations

import pytest

from turbospark_app.cli import build_parser
from turbospark_app.cli_chat import kv_budget_bytes, settings_from_args


def test_chat_flags_become_turn_settings() -> None:
    args = build_parser().parse_args(
        ["chat", "--prompt", "hi", "--max-new", "7", "--temperature", "0.5", "--top-k", "3",
         "--stop", "END", "--stop", "###", "--max-tps", "5", "--no-chunked", "--seed", "9"]
    )
    s = settings_from_args(args)
    assert s.generation.max_new_tokens == 7 and s.generation.shaping.top_k == 3
    assert s.generation.shaping.temperature == 0.5 and s.generation.shaping.seed == 9
    assert s.generation.stop_strings == ("END", "###")
    assert s.generation.rate.max_tokens_per_sec == 5 and s.generation.rate.is_active()
    assert s.chunked_prefill is False


def test_kv_budget_flag_in_bytes_for_app_and_chat() -> None:
    assert kv_budget_bytes(build_parser().parse_args([])) is None
    assert kv_budget_bytes(build_parser().parse_args(["--kv-budget-mb", "1.5"])) == 1_572_864
    chat = build_parser().parse_args(["chat", "--kv-budget-mb", "64"])
    assert kv_budget_bytes(chat) == 64 * 1024 * 1024
    with pytest.raises(SystemExit, match="must be > 0"):
        kv_budget_bytes(build_parser().parse_args(["--kv-budget-mb", "0"]))


def test_prompt_and_script_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["chat", "--prompt", "a", "--script", "b.txt"])
    assert "not allowed with" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["--model", "x.gguf", "--kv-budget-mb", "100", "--session-slots", "2", "chat", "--prompt", "hi"],
    ["chat", "--model", "x.gguf", "--kv-budget-mb", "100", "--session-slots", "2", "--prompt", "hi"],
])
def test_shared_flags_work_before_or_after_the_subcommand(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.model, args.kv_budget_mb, args.session_slots) == ("x.gguf", 100.0, 2)


def test_model_subcommand_keeps_a_model_given_before_it() -> None:
    args = build_parser().parse_args(["--model", "x.gguf", "model", "path"])
    assert args.model == "x.gguf" and args.action == "path"
    assert build_parser().parse_args(["model", "path"]).model is None
