"""Greedy replies with an image: TurboSpark's against llama.cpp's llama-server (`--mmproj`, the
same llama.cpp, the same files), streamed through the official `openai` client.

    python benchmarks/check_vision_peer.py --llama-server build/peer/bin/llama-server [--tokens 24]

Three pairs, each a text model and the synthetic projector of benchmarks/synthetic_mmproj.py:
the default model (SmolLM2-135M, `mlp`), a synthetic Gemma 3 (`gemma3`: the non-causal image
decode) and the default model relabelled Qwen2-VL (`qwen2vl_merger`: M-RoPE, an image advancing
fewer positions than its cells). For each pair and each of two images, both servers answer the same request (image part
then text part, temperature 0); the script prints both replies, their prompt_tokens, and whether
they agree token for token (text equal), and exits 1 when any differs. Not part of `make test`
(it needs llama-server: `make check-vision-peer` builds it).
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import peers  # noqa: E402
from vision_assets import png  # noqa: E402


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def request(seed: int) -> list[dict]:
    url = "data:image/png;base64," + base64.b64encode(png(48, 40, seed=seed)).decode()
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": "Describe this image."}]}]


def replies(spec: peers.ServerSpec, log: Path, tokens: int) -> list[tuple[str, int, int]]:
    """(text, prompt_tokens, completion_tokens) for each image."""
    out = []
    with peers.Server(spec, log) as server:
        for seed in (0, 7):
            s = peers.stream(server, messages=request(seed), max_tokens=tokens)
            usage = s.usage or {}
            out.append((s.text, int(usage.get("prompt_tokens", -1)), int(usage.get("completion_tokens", -1))))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--turbospark", default=None, help="the turbospark command (default: the venv's)")
    ap.add_argument("--model", type=Path, default=None, help="the text model (default: the default model)")
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    mmproj = _load("synthetic_mmproj")
    synth = _load("synthetic_gguf")
    if args.model is None:
        from turbospark_app.model.fetch import ensure_default_model

        args.model = ensure_default_model(download=False)
    cmd = peers.turbospark_command(args.turbospark)
    print(peers.machine_line(args.llama_server))
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gemma = synth.write_family_synthetic(work / "gemma3-synthetic.gguf", "gemma3", "Q4_0", layers=2)
        qwen = mmproj.as_mrope_model(args.model, work / "qwen2vl-synthetic.gguf")
        pairs = [(args.model, "mlp"), (gemma, "gemma3"), (qwen, "qwen2vl_merger")]
        for model, kind in pairs:
            proj = mmproj.write_mmproj(work / f"mmproj-{kind}.gguf", mmproj.text_n_embd(model), kind)
            ours = peers.turbospark_spec(cmd, model, args.threads, 2048)
            ours.argv += ["--mmproj", str(proj)]
            theirs = peers.llama_server_spec(args.llama_server, model, args.threads, 2048)
            theirs.argv += ["--mmproj", str(proj)]
            a = replies(ours, work / f"ours-{kind}.log", args.tokens)
            b = replies(theirs, work / f"theirs-{kind}.log", args.tokens)
            for seed, (mine, peer) in zip((0, 7), zip(a, b)):
                # TurboSpark's replies drop the whitespace an answer starts with (chat.formats):
                # the same tokens, when the counts agree.
                same = mine[0] == peer[0].lstrip() and mine[2] == peer[2]
                failed += not same
                print(f"{kind} {model.name} image seed {seed}: {'SAME' if same else 'DIFFERENT'} "
                      f"(prompt_tokens {mine[1]} / {peer[1]}, completion_tokens {mine[2]} / {peer[2]})")
                print(f"  {peers.OURS}: {mine[0]!r}")
                print(f"  {peers.THEIRS}: {peer[0]!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
