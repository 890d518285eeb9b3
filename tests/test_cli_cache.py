"""`turbospark model cache list|clear [NAME]` (issue #19)."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

import pytest

from tiny_gguf import write_tiny_gguf
from turbospark_app.cli.main import main
from turbospark_app.model.reference.weights import load_weights


@pytest.fixture
def two_models(tmp_path: Path, isolated_dirs) -> dict[str, Path]:
    cache = isolated_dirs["cache"]
    paths = {}
    for name, seed in (("alpha", 0), ("beta", 1)):
        paths[name] = tmp_path / f"{name}.gguf"
        write_tiny_gguf(paths[name], seed=seed)
        load_weights(paths[name], cache)
    shutil.copy(paths["alpha"], tmp_path / "alpha-copy.gguf")
    load_weights(tmp_path / "alpha-copy.gguf", cache)  # the same entry, a second source
    gc.collect()
    return paths


def test_list_shows_each_model_its_kinds_sources_size_and_last_use(two_models, capsys) -> None:
    assert main(["model", "cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "(default budget)" in out and out.count("\n    f32 ") == 2
    assert "prepacked sessions kept per model: none (default" in out
    blocks = out.split("\n")[2:]  # after the summary and policy lines, a block per model
    starts = [i for i, line in enumerate(blocks) if line and not line.startswith(" ")]
    by_model = {blocks[i].split()[0]: "\n".join(blocks[i:j])
                for i, j in zip(starts, starts[1:] + [len(blocks)])}
    assert set(by_model) == {"alpha", "beta"}
    alpha = by_model["alpha"]
    assert "alpha.gguf" in alpha and "alpha-copy.gguf" in alpha and "last used" in alpha
    assert main(["model", "cache"]) == 0 and capsys.readouterr().out == out  # list is the default


def test_clear_name_then_all(two_models, capsys) -> None:
    assert main(["model", "cache", "clear", "beta"]) == 0
    assert "freed" in capsys.readouterr().out
    main(["model", "cache", "list"])
    out = capsys.readouterr().out
    assert "alpha  [" in out and "beta  [" not in out
    assert main(["model", "cache", "clear", "gamma"]) == 1
    assert "nothing in the weight cache matches 'gamma'" in capsys.readouterr().err
    assert main(["model", "cache", "clear"]) == 0
    main(["model", "cache", "list"])
    assert "(empty)" in capsys.readouterr().out


def test_other_model_actions_take_no_cache_words(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["model", "path", "clear"])
    assert "that is `model cache`" in capsys.readouterr().err


def test_clear_missing_frees_the_models_whose_gguf_is_gone(two_models, capsys) -> None:
    two_models["beta"].unlink()
    (two_models["alpha"]).unlink()  # alpha is still on disk as alpha-copy.gguf: it stays
    assert main(["model", "cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "beta  [" in out and "its GGUF is gone" in out.split("beta  [")[1].split("\n")[0]
    assert "its GGUF is gone" not in out.split("alpha  [")[1].split("\n")[0]
    assert "1 model (" in out and "`turbospark model cache clear --missing` frees it" in out
    assert main(["model", "cache", "clear", "--missing"]) == 0
    assert "freed" in capsys.readouterr().out
    main(["model", "cache", "list"])
    out = capsys.readouterr().out
    assert "alpha  [" in out and "beta  [" not in out and "clear --missing" not in out


@pytest.mark.parametrize("argv", [
    ["model", "cache", "list", "--missing"],
    ["model", "cache", "clear", "beta", "--missing"],
    ["model", "info", "--missing"],
])
def test_missing_goes_with_cache_clear_alone(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert "--missing goes with `model cache clear`" in capsys.readouterr().err
