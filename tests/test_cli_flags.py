"""The `turbospark` argument parser: subcommands and the flags that reach the backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from turbospark_app.cli.main import build_parser, main
from turbospark_app.chat.backend import kv_budget_bytes
from turbospark_app.cli.chat_command import settings_from_args


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
    assert kv_budget_bytes(build_parser().parse_args([]).kv_budget_mb) is None
    assert kv_budget_bytes(build_parser().parse_args(["--kv-budget-mb", "1.5"]).kv_budget_mb) == 1_572_864
    chat = build_parser().parse_args(["chat", "--kv-budget-mb", "64"])
    assert kv_budget_bytes(chat.kv_budget_mb) == 64 * 1024 * 1024
    with pytest.raises(SystemExit):  # checked when parsed (see the table below)
        build_parser().parse_args(["--kv-budget-mb", "0"])


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


@pytest.mark.parametrize(("argv", "flag", "accepted"), [
    (["chat", "--chunk-size", "0"], "--chunk-size", ">= 1"),
    (["chat", "--chunk-size", "-5"], "--chunk-size", ">= 1"),
    (["chat", "--session-slots", "0"], "--session-slots", ">= 1"),
    (["--session-slots", "-1"], "--session-slots", ">= 1"),
    (["chat", "--stop", ""], "--stop", "non-empty"),
    (["chat", "--max-new", "0"], "--max-new", ">= 1"),
    (["chat", "--temperature", "-1"], "--temperature", ">= 0"),
    (["chat", "--temperature", "nan"], "--temperature", ">= 0"),
    (["chat", "--top-k", "-2"], "--top-k", ">= 0"),
    (["chat", "--top-p", "0"], "--top-p", "(0, 1]"),
    (["chat", "--top-p", "1.5"], "--top-p", "(0, 1]"),
    (["chat", "--min-p", "1"], "--min-p", "[0, 1)"),
    (["chat", "--repeat-penalty", "0"], "--repeat-penalty", "> 0"),
    (["chat", "--seed", "-3"], "--seed", ">= 0"),
    (["chat", "--max-tps", "0"], "--max-tps", "> 0"),
    (["chat", "--max-tps", "inf"], "--max-tps", "> 0"),
    (["--kv-budget-mb", "0"], "--kv-budget-mb", "> 0"),
    (["chat", "--chunk-size", "many"], "--chunk-size", ">= 1"),
    (["chat", "--read-timeout", "0"], "--read-timeout", "> 0"),
    (["serve", "--port", "70000"], "--port", "0..65535"),
    (["serve", "--max-queue", "-1"], "--max-queue", ">= 0"),
    (["serve", "--prefill-chunk", "0"], "--prefill-chunk", ">= 1"),
    (["serve", "--stall-timeout", "0"], "--stall-timeout", "> 0"),
    (["chat", "--chat-template", "jinja"], "--chat-template", "chatml"),
    (["chat", "--threads", "0"], "-t/--threads", "1..256"),
    (["serve", "-t", "many"], "-t/--threads", "1..256"),
    (["--ctx-size", "100"], "-c/--ctx-size", ">= 256"),
    (["chat", "-c", "lots"], "-c/--ctx-size", ">= 256"),
    (["serve", "--gpu-layers", "-2"], "-ngl/--gpu-layers", ">= 0"),
])
def test_every_flag_is_checked_when_parsed(
    argv: list[str], flag: str, accepted: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]  # argparse: usage, then the one error line
    assert f"argument {flag}" in line and accepted in line, err
    assert "Traceback" not in err


def test_good_flags_still_parse() -> None:
    args = build_parser().parse_args(
        ["--session-slots", "2", "chat", "--chunk-size", "1", "--top-p", "1", "--min-p", "0",
         "--temperature", "0", "--seed", "0", "--stop", "x"])
    assert (args.session_slots, args.chunk_size, args.top_p, args.stop) == (2, 1, 1.0, ["x"])


@pytest.mark.parametrize("argv", [
    ["chat", "--threads", "2", "--prompt", "hi"],
    ["-t", "2", "chat", "--prompt", "hi"],
    ["serve", "--threads", "2"],
    ["--threads", "2", "--self-test"],
    ["--threads", "2"],
])
def test_threads_flag_for_chat_serve_and_the_app(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).threads == 2
    assert build_parser().parse_args([a for a in argv if a not in ("--threads", "-t", "2")]).threads is None


def test_llama_cpp_names_for_context_and_gpu_layers() -> None:
    args = build_parser().parse_args(["chat", "-c", "4096", "-ngl", "0", "--prompt", "hi"])
    assert (args.ctx_size, args.gpu_layers) == (4096, 0)
    args = build_parser().parse_args(["serve", "--ctx-size", "2048", "--gpu-layers", "99"])
    assert (args.ctx_size, args.gpu_layers) == (2048, 99)


def test_a_thread_count_past_the_machine_is_refused_with_the_choices() -> None:
    import os

    from turbospark_app.model.choice.common import LoadChoiceError
    from turbospark_app.model.choice.threads import choose_threads

    too_many = (os.cpu_count() or 1) + 1
    with pytest.raises(LoadChoiceError, match=f"--threads='{too_many}' is not a thread count"):
        choose_threads(too_many)
    with pytest.raises(LoadChoiceError, match="TURBOSPARK_THREADS='x'"):
        choose_threads(environ={"TURBOSPARK_THREADS": "x"})
    assert choose_threads(1).count == 1 and choose_threads(setting="auto").source == "setting"


def test_building_the_parser_does_not_import_the_http_stack() -> None:
    """Every start builds the parser (the window too): aiohttp (~0.12 s) waits until a command
    needs it (serve, a remote chat, the window's API server)."""
    import subprocess
    import sys

    code = ("import sys; from turbospark_app.cli.main import build_parser; "
            "build_parser().parse_args(['chat', '--prompt', 'hi']); print('aiohttp' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


@pytest.mark.parametrize("kind", ["missing", "directory", "not utf-8"])
def test_a_script_that_cannot_be_read_is_a_clear_error(kind: str, tmp_path: Path, capsys) -> None:
    script = {"missing": tmp_path / "nope.txt", "directory": tmp_path}.get(kind, tmp_path / "latin1.txt")
    if kind == "not utf-8":
        script.write_bytes("café\n".encode("latin-1"))
    # Said before any model is looked for: this model path does not exist either.
    assert main(["chat", "--model", str(tmp_path / "none.gguf"), "--script", str(script)]) == 2
    err = capsys.readouterr().err
    said = {"missing": "No such file or directory", "directory": "Is a directory",
            "not utf-8": "is not UTF-8 text (byte 0xe9 at offset 3)"}[kind]
    assert said in err and str(script) in err and "Traceback" not in err and "none.gguf" not in err


@pytest.mark.parametrize("names", [
    ["--max-tokens", "9", "--temp", "0.3"],
    ["-n", "9", "--temperature", "0.3"],
    ["--n-predict", "9", "--temp", "0.3"],
])
def test_chat_takes_the_flag_names_of_llama_cpp_and_the_openai_api(names: list[str]) -> None:
    s = settings_from_args(build_parser().parse_args(["chat", "--prompt", "hi", *names]))
    assert s.generation.max_new_tokens == 9 and s.generation.shaping.temperature == 0.3


@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["serve", "--prot", "8080"], "turbospark serve: error: unrecognized arguments: --prot 8080",
     "(did you mean --port?)"),
    (["chat", "--prompt", "hi", "--top_k", "3"], "turbospark chat: error: unrecognized arguments: --top_k 3",
     "(did you mean --top-k?)"),
    (["model", "info", "--zzz"], "turbospark model: error: unrecognized arguments: --zzz", None),
    (["--zzz"], "turbospark: error: unrecognized arguments: --zzz", None),
])
def test_an_unknown_flag_is_refused_by_its_subcommand_with_the_nearest_flag(
        argv: list[str], usage: str, hint: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(argv)
    err = capsys.readouterr().err
    assert ended.value.code == 2 and usage in err
    assert (hint in err) if hint else "did you mean" not in err
    if argv[0] != "--zzz":  # the subcommand's own usage line, not the top level's
        assert f"usage: turbospark {argv[0]}" in err


def test_every_chat_flag_says_what_it_does() -> None:
    import argparse

    from turbospark_app.cli.chat_args import add_chat_arguments

    p = argparse.ArgumentParser()
    add_chat_arguments(p)
    silent = [a.option_strings[0] for a in p._actions if a.option_strings and not a.help]
    assert silent == []


def test_the_chat_flags_default_chunk_is_the_engines() -> None:
    from turbospark_app.cli.chat_args import DEFAULT_PREFILL_CHUNK
    from turbospark_app.engine.foundation import DEFAULT_PREFILL_CHUNK as ENGINE

    assert DEFAULT_PREFILL_CHUNK == ENGINE
