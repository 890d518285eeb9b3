"""The GGUF fuzzer's child process (run by test_fuzz_gguf.py under a memory cap and a timeout).

    python fuzz_gguf_child.py WORKDIR MAX_EXAMPLES MEMORY_CAP

Hypothesis mutates a tiny GGUF written here (header counts, lengths, types, offsets, random
header bytes, truncations) and loads each mutant as the app does (`load_backend`, and `model
info`). Every outcome must be a loaded model or one of the model errors with a plain reason,
within SECONDS_PER_CASE. Exit 0 when every example passed; the falsifying example otherwise.
"""

from __future__ import annotations

import contextlib
import io
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SECONDS_PER_CASE = 5.0
RAW_LIBRARY_TEXTS = ("index ", "out of bounds", "unpack", "reshape", "Traceback", "object has no")


def main() -> int:
    work, examples, cap = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from gguf_mutate import header_sites, mutated
    from tiny_gguf import write_tiny_gguf
    from turbospark_app.chat.backend import load_backend
    from turbospark_app.cli.main import main as cli
    from turbospark_app.model.text.chat_template import TemplateError
    from turbospark_app.model.gguf.header import ModelFileError
    from turbospark_app.model.text.tokenizer import TokenizerError

    good = work / "good.gguf"
    write_tiny_gguf(good, n_layers=1, dim=64, n_heads=2, n_kv=1, ffn=128, tokenizer={},
                    layer_types=[{k: "Q8_0" for k in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                      "ffn_gate", "ffn_up", "ffn_down")}])
    data = good.read_bytes()
    sites = header_sites(str(good))
    header_end = max(s.offset for s in sites) + 8
    counter = [0]

    def value_for(original: int) -> st.SearchStrategy[int]:
        return st.one_of(
            st.sampled_from([0, 1, 2, 7, 255, 1 << 16, (1 << 32) - 1, 1 << 32, 1 << 40, 1 << 62,
                             (1 << 63) - 1, (1 << 64) - 1]),
            st.integers(0, (1 << 64) - 1),
            st.integers(-64, 64).map(lambda d: max(0, original + d)),
        )

    original = {s: int.from_bytes(data[s.offset : s.offset + 8 if s.fmt == "<Q" else
                                       s.offset + 4], "little") for s in sites}

    @st.composite
    def mutant(draw: st.DrawFn) -> bytes:
        kind = draw(st.sampled_from(["field", "field", "field", "bytes", "truncate"]))
        if kind == "field":
            site = draw(st.sampled_from(sites))
            return mutated(data, site, draw(value_for(original[site])))
        if kind == "bytes":
            out = bytearray(data)
            for _ in range(draw(st.integers(1, 8))):
                out[draw(st.integers(0, header_end))] = draw(st.integers(0, 255))
            return bytes(out)
        return data[: draw(st.integers(0, len(data) - 1))]

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(mutant())
    def check(blob: bytes) -> None:
        counter[0] += 1
        path = work / f"m{counter[0]}.gguf"
        path.write_bytes(blob)
        start = time.monotonic()
        try:
            load_backend(path, session_slots=1)
        except (ModelFileError, TokenizerError, TemplateError) as exc:
            text = str(exc)
            assert not any(t in text for t in RAW_LIBRARY_TEXTS), text
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli(["model", "info", "--model", str(path)])
        assert code in (0, 1) and not any(t in err.getvalue() for t in RAW_LIBRARY_TEXTS), err.getvalue()
        assert time.monotonic() - start < SECONDS_PER_CASE
        path.unlink()

    check()
    print(f"{counter[0]} mutants: each loaded or refused with a plain reason")
    return 0


if __name__ == "__main__":
    sys.exit(main())
