"""`turbospark model info FILE`: the metadata of any readable GGUF, whether llama.cpp runs it
(its own load, in a child process, says so: no table of names), and a clear error (never a
traceback) for a file whose header cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from foreign_gguf import write_foreign_gguf
from tiny_gguf import write_tiny_gguf
from turbospark_app.cli.main import main
from turbospark_app.model.gguf.describe import describe_gguf, show_value
from turbospark_app.model.gguf.header import ModelFileError


def _info(capsys, *argv: str) -> tuple[int, dict[str, str], list[str], str]:
    """(exit code, the "key: value" lines, every stdout line, stderr)."""
    code = main(["model", "info", *argv])
    out, err = capsys.readouterr()
    lines = out.splitlines()
    return code, dict(line.split(": ", 1) for line in lines if ": " in line), lines, err


@pytest.fixture(autouse=True)
def _dirs(isolated_dirs: dict[str, Path]) -> None:
    """No verdicts remembered from other tests."""


def test_a_mamba_file_shows_its_metadata_and_llama_cpps_verdict(tmp_path: Path, capsys) -> None:
    """llama.cpp runs Mamba, but this file has only the keys, not Mamba's layers: it says
    which part is missing, after the metadata."""
    path = write_foreign_gguf(tmp_path / "mamba.gguf", "mamba")
    code, rows, lines, err = _info(capsys, str(path))
    assert rows["architecture"] == "mamba" and rows["name"] == "tiny-mamba"
    assert rows["embedding_length"] == "64" and rows["block_count"] == "2"
    assert rows["context_length"] == "1048576"
    assert rows["mamba.ssm.state_size"] == "16" and rows["mamba.ssm.conv_kernel"] == "4"  # its own keys
    assert rows["mamba.attention.layer_norm_rms_epsilon"] == "1e-05"
    assert rows["quantization"] == "Q8_0" and rows["tensor_types"] == "F32 x3, Q8_0 x1"
    assert rows["parameters"] == f"{300 * 64 + 3 * 64:,}" and rows["tensors"] == "4"
    assert rows["vocab_size"] == "300" and rows["tokenizer"] == "gpt2 (pre: smollm)"
    assert rows["chat_template"].startswith("present (")
    assert rows["file_size"].startswith(f"{path.stat().st_size} bytes")
    assert code == 1 and lines[-1].startswith("llama.cpp cannot run this file: ")
    assert "not found" in lines[-1] and err.startswith(f"error: cannot load model file {path}: ")


def test_gemma3_shows_its_head_sizes_and_own_keys(tmp_path: Path, capsys) -> None:
    path = write_foreign_gguf(tmp_path / "g.gguf", "gemma3")
    _, rows, _, _ = _info(capsys, str(path))
    assert (rows["head_count"], rows["head_count_kv"], rows["key_length"]) == ("4", "1", "16")
    assert rows["feed_forward_length"] == "128" and rows["gemma3.attention.sliding_window"] == "512"


def test_a_model_llama_cpp_runs(tmp_path: Path, capsys) -> None:
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, tokenizer={"template": None})
    code, rows, lines, err = _info(capsys, str(path))
    assert code == 0 and err == ""
    assert lines[-1].startswith("Runs with llama.cpp (llama ") and lines[-1].endswith(")."), lines[-1]
    assert rows["architecture"] == "llama" and rows["head_count_kv"] == "2" and rows["block_count"] == "2"
    assert rows["chat_template"] == "absent (a base model: raw completion)" and rows["llama.rope.dimension_count"] == "64"


def test_a_file_llama_cpp_refuses_shows_metadata_and_the_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "missing.gguf"
    write_tiny_gguf(path, skip_tensor="blk.1.ffn_up.weight")
    code, rows, lines, err = _info(capsys, str(path))
    assert code == 1 and rows["architecture"] == "llama"
    assert lines[-1] == "llama.cpp cannot run this file: tensor 'blk.1.ffn_up.weight' not found"
    assert err == f"error: cannot load model file {path}: tensor 'blk.1.ffn_up.weight' not found\n"


@pytest.mark.parametrize("keep", [6, 100, 2000, 0.5])
def test_a_truncated_file_is_a_clear_error(tmp_path: Path, capsys, keep: float) -> None:
    good = write_foreign_gguf(tmp_path / "good.gguf", "mamba").read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(good[: int(len(good) * keep) if keep < 1 else int(keep)])
    code, _, lines, err = _info(capsys, str(path))
    assert code == 1 and lines == []
    assert err.startswith(f"error: cannot load model file {path}: truncated") and "Traceback" not in err


def test_not_a_gguf_and_no_file(tmp_path: Path, capsys) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model at all")
    code, _, lines, err = _info(capsys, str(text))
    assert code == 1 and lines == [] and "not a GGUF file (bad magic" in err
    code, _, _, err = _info(capsys, str(tmp_path / "gone.gguf"))
    assert code == 1 and err == f"error: no model file at {tmp_path / 'gone.gguf'}: it does not exist\n"
    code, _, _, err = _info(capsys, str(tmp_path))
    assert code == 1 and err == f"error: no model file at {tmp_path}: it is a directory, not a GGUF file\n"


def test_fetch_and_path_take_no_file(capsys) -> None:
    assert main(["model", "path", "x.gguf"]) == 2
    assert "takes no FILE" in capsys.readouterr().err


def test_metadata_of_the_wrong_type_is_named_not_a_traceback(tmp_path: Path, capsys) -> None:
    import gguf
    import numpy as np

    path = tmp_path / "typed.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_string("llama.block_count", "two")
    w.add_string("general.file_type", "q8")
    w.add_array("llama.feed_forward_length", [128, 256, 512, 512, 512, 512, 512, 512])
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    code, rows, lines, err = _info(capsys, str(path))
    assert code == 1 and rows["block_count"] == "two" and rows["quantization"] == "F32"
    assert rows["feed_forward_length"] == "[128, 256, 512, 512, 512, 512, …] (8 values)"
    assert lines[-1].startswith("llama.cpp cannot run this file: ") and "Traceback" not in err
    assert err.startswith(f"error: cannot load model file {path}: ")


def test_describe_raises_only_for_an_unreadable_header(tmp_path: Path) -> None:
    path = write_foreign_gguf(tmp_path / "m.gguf", "mamba")
    d = describe_gguf(path)
    assert not d.runnable and d.config is not None and d.config.architecture == "mamba"
    assert d.problem and "not found" in d.problem
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(ModelFileError, match="truncated"):
        describe_gguf(path)


def test_show_value_keeps_lines_short() -> None:
    assert show_value([4] * 32) == "4 (all 32)" and show_value([1, 2]) == "[1, 2]"
    assert show_value("x" * 500).endswith("… (500 chars)") and len(show_value("x" * 500)) < 150
    assert show_value(1e6) == "1e+06" and show_value(True) == "True"


def _write(path: Path, arch_value: object) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.kv_data[0].pop("general.architecture")  # replaced by the value under test
    if isinstance(arch_value, str):
        w.add_string("general.architecture", arch_value)
    else:
        w.add_array("general.architecture", arch_value)
    w.add_tensor("token_embd.weight", np.ones((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_an_architecture_that_is_not_a_name(tmp_path: Path, capsys) -> None:
    code, rows, lines, err = _info(capsys, str(_write(tmp_path / "a.gguf", ["x" * 100] * 1000)))
    assert code == 1 and rows["architecture"] == "–"
    reason = "bad metadata 'general.architecture': a array[string], expected text"
    assert lines[-1] == f"llama.cpp cannot run this file: {reason}" and err.endswith(reason + "\n")
    code, rows, lines, _ = _info(capsys, str(_write(tmp_path / "b.gguf", "m" * 5000)))
    assert code == 1 and len(lines[-1]) < 400
    assert lines[-1].startswith("llama.cpp cannot run this file: unknown model architecture: 'mmm")
    assert rows["architecture"].endswith("… (5,000 chars)")
