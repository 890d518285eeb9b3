"""TurboSpark's embeddings against llama.cpp's own llama-server on the same GGUF: both through
the official `openai` client's /v1/embeddings, the cosine of each pair printed (the issue's bar:
≥ 0.999), and the time per request.

    .venv/bin/python benchmarks/check_embeddings_peer.py --llama-server build/peer/bin/llama-server
(`make bench-peer` builds llama-server from the llama.cpp the engine vendors.)
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "A monkey is playing drums.",
         "The quarterly report shows revenue grew by 12 percent in Europe.",
         "Ünïcödé façade — naïve café, 東京 and emoji 🎉 in one line.",
         "def fibonacci(n): return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
         " ".join(f"word{i}" for i in range(100))]  # ~400 tokens: under 512


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def embed(url: str) -> tuple[np.ndarray, float]:
    import openai

    client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
    t = time.perf_counter()
    got = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS)
    return np.array([d.embedding for d in got.data], np.float32), time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", required=True, type=Path)
    ap.add_argument("--model", type=Path, default=None, help="default: the fetched all-MiniLM-L6-v2 GGUF")
    args = ap.parse_args()
    from turbospark_app.model.embedder_fetch import ensure_embedder
    from turbospark_app.server import ApiServer, ServerConfig

    model = args.model or ensure_embedder()
    port = free_port()
    peer = subprocess.Popen([str(args.llama_server), "-m", str(model), "--embeddings", "--port", str(port),
                             "-c", "2048", "-b", "2048", "-ub", "2048", "-t", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    try:
        from turbospark_app.documents.embedder import open_embedder

        server = ApiServer(engine=None, config=ServerConfig(port=0),  # type: ignore[arg-type]
                           embedder=lambda: open_embedder(model))
        asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
        deadline = time.monotonic() + 60
        while True:
            try:
                theirs, t_peer = embed(f"http://127.0.0.1:{port}/v1")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        ours, t_ours = embed(server.url + "/v1")
        ours, t_ours = embed(server.url + "/v1")  # warm
        theirs, t_peer = embed(f"http://127.0.0.1:{port}/v1")
        cos = (ours * theirs).sum(1) / np.linalg.norm(ours, axis=1) / np.linalg.norm(theirs, axis=1)
        for text, c in zip(TEXTS, cos):
            print(f"cosine {c:.6f}  {text[:60]}")
        print(f"min cosine {cos.min():.6f} over {len(TEXTS)} texts (bar 0.999); "
              f"request: TurboSpark {t_ours * 1000:.0f} ms, llama-server {t_peer * 1000:.0f} ms")
        return 0 if cos.min() >= 0.999 else 1
    finally:
        peer.kill()
        peer.wait()


if __name__ == "__main__":
    sys.exit(main())
