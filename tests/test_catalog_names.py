"""What a user types or a repo names: `owner/name[:QUANT]`, Hub URLs, quantizations in file
names, split shards, projectors (hypothesis property tests and the names seen on the Hub)."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from turbospark_app.catalog.hub import HubFile, group_files
from turbospark_app.catalog.names import RepoRef, is_mmproj, parse_repo_ref, quant_of, shard

PART = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,30}", fullmatch=True)
QUANTS = ["Q4_K_M", "Q4_0", "Q8_0", "IQ2_XXS", "IQ4_XS", "Q5_K_S", "Q6_K", "BF16", "F16", "Q3_K_L", "MXFP4"]


@given(PART, PART, st.sampled_from(QUANTS), st.booleans())
def test_a_repo_and_quant_round_trip_in_every_spelling(owner: str, name: str, quant: str, lower: bool) -> None:
    repo = f"{owner}/{name}"
    typed = quant.lower() if lower else quant
    assert parse_repo_ref(repo) == RepoRef(repo)
    assert parse_repo_ref(f"{repo}:{typed}") == RepoRef(repo, quant)
    assert parse_repo_ref(f"https://huggingface.co/{repo}") == RepoRef(repo)
    assert parse_repo_ref(f"hf.co/{repo}:{typed}") == RepoRef(repo, quant)
    url = parse_repo_ref(f"https://huggingface.co/{repo}/resolve/main/sub/{name}-{quant}.gguf")
    assert url == RepoRef(repo, f"sub/{name}-{quant}.gguf", "main")


@given(PART, st.sampled_from(QUANTS), st.sampled_from(["-", ".", "_"]), st.booleans())
def test_the_quant_is_read_from_any_file_name(stem: str, quant: str, sep: str, split: bool) -> None:
    assume(not stem.upper().endswith("UD") and not stem.endswith(("_", "-", ".")))
    name = f"{stem}{sep}{quant}" + ("-00001-of-00003.gguf" if split else ".gguf")
    assert quant_of(name) == quant
    assert shard(name) == ((1, 3) if split else None)


@given(st.lists(st.text(min_size=1, max_size=12).filter(lambda w: w.strip() == w and " " not in w),
                min_size=2, max_size=5))
def test_search_words_are_never_taken_for_a_repo(words: list[str]) -> None:
    assert parse_repo_ref(" ".join(words)) is None


def test_names_seen_on_the_hub() -> None:
    assert quant_of("gemma-3-270m-it-UD-IQ2_XXS.gguf") == "UD-IQ2_XXS"
    assert quant_of("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1"
    assert quant_of("model.gguf") == "other"
    assert is_mmproj("mmproj-F16.gguf") and is_mmproj("Qwen2.5-VL-7B.mmproj-Q8_0.gguf")
    assert not is_mmproj("Qwen2.5-VL-7B-Q4_K_M.gguf")
    groups, projectors = group_files([
        HubFile("Q4_K_M/m-Q4_K_M-00002-of-00002.gguf", 5, None),
        HubFile("Q4_K_M/m-Q4_K_M-00001-of-00002.gguf", 5, None),
        HubFile("m-Q8_0.gguf", 20, None), HubFile("m-Q2_K.gguf", 4, None),
        HubFile("mmproj-F16.gguf", 3, None), HubFile("README.md", 1, None)])
    assert [(g.quant, g.size, [f.name for f in g.files]) for g in groups] == [
        ("Q2_K", 4, ["m-Q2_K.gguf"]),
        ("Q4_K_M", 10, ["m-Q4_K_M-00001-of-00002.gguf", "m-Q4_K_M-00002-of-00002.gguf"]),
        ("Q8_0", 20, ["m-Q8_0.gguf"])]
    assert [p.name for p in projectors] == ["mmproj-F16.gguf"]
