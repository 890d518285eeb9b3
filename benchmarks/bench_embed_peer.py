"""Embedding throughput side by side: TurboSpark's embedder (in process, as the indexer calls it)
against llama.cpp's own llama-server `/v1/embeddings` on the same GGUF, same threads, the same
~256-token chunks of the documents corpus in the same batches, rounds alternating, medians.

    .venv/bin/python benchmarks/bench_embed_peer.py [--llama-server build/peer/bin/llama-server]
        [--rounds 5] [--threads 2] [--batch 32] [--ubatch N] [--seqs N] [--peer-ubatch 2048]
        [--peer-parallel 16]

llama-server's defaults here are its fastest measured setting: -ub 512 -np 1 ran at 0.45x ours
(one input per slot, one ~143-token sequence per decode); -ub 2048 -np 16 packs like ours.

Prints per side the median wall tokens/s, tokens per CPU-second (ours: this process's CPU time
while embedding; llama-server's: its process's CPU time over the requests) and the ratio, beside
`uptime`'s load. The peer is stopped (SIGSTOP) while ours runs and ours is idle while the peer
runs, so neither side's idle threads are measured in the other's rounds. Also checks that the two
sides' vectors agree (min cosine).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from check_embeddings_peer import free_port  # noqa: E402

from turbospark_app.model.embedder_fetch import ensure_embedder  # noqa: E402
from turbospark_app.model.llamacpp.embedding import LlamaCppEmbedder  # noqa: E402


def corpus_chunks(embedder: LlamaCppEmbedder, markdown: int, pdf: int) -> list[str]:
    """The chunk texts the indexer would embed for the tests' corpus (~256 tokens each)."""
    from docs_corpus import write_corpus

    from turbospark_app.documents.chunking import chunk_pages
    from turbospark_app.documents.extract import extract
    from turbospark_app.documents.indexer import list_files
    from turbospark_app.documents.pdf_worker import PdfWorker

    with tempfile.TemporaryDirectory() as tmp:
        write_corpus(Path(tmp) / "corpus", markdown, pdf)
        texts: list[str] = []
        with PdfWorker() as worker:
            for path in list_files([Path(tmp) / "corpus"]):
                doc = extract(path, pdf=worker)
                texts += [c.text for c in chunk_pages(doc.pages, lambda t: embedder.count_tokens(t) - 2,
                                                      target=min(256, embedder.max_tokens - 2))]
    return texts


def cpu_of(pid: int) -> float:
    """A process's user+system CPU seconds (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-server", type=Path, default=Path("build/peer/bin/llama-server"))
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32, help="chunks per embed call / request (the indexer's)")
    ap.add_argument("--ubatch", type=int, default=None, help="ours (default: the embedder's)")
    ap.add_argument("--seqs", type=int, default=None, help="ours: sequences per ubatch (default: the embedder's)")
    ap.add_argument("--peer-ubatch", type=int, default=2048, help="llama-server's -ub and -b (its default: 512)")
    ap.add_argument("--peer-parallel", type=int, default=16, help="llama-server's -np (slots: one input each)")
    ap.add_argument("--markdown", type=int, default=24)
    ap.add_argument("--pdf", type=int, default=12)
    args = ap.parse_args()
    import openai

    model = args.model or ensure_embedder()
    kw = {k: v for k, v in (("n_ubatch", args.ubatch), ("n_seq_max", args.seqs)) if v}
    ours = LlamaCppEmbedder(model, threads=args.threads, **kw)
    texts = corpus_chunks(ours, args.markdown, args.pdf)
    tokens = sum(len(ours.capped(ours.tokenize(t))) for t in texts)
    batches = [texts[i:i + args.batch] for i in range(0, len(texts), args.batch)]
    port = free_port()
    ub = str(args.peer_ubatch)
    argv = [str(args.llama_server), "-m", str(model), "--embeddings", "--pooling", "mean", "--port", str(port),
            "-c", str(512 * args.peer_parallel), "-b", ub, "-ub", ub, "-t", str(args.threads),
            "-tb", str(args.threads), "-np", str(args.peer_parallel)]
    peer = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=600)

    def run_peer() -> np.ndarray:
        out = []
        for b in batches:
            got = client.embeddings.create(model="m", input=b)
            out += [d.embedding for d in got.data]
        return np.array(out, np.float32)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                client.embeddings.create(model="m", input=["warm-up"])
                break
            except Exception:
                if time.monotonic() > deadline or peer.poll() is not None:
                    raise
                time.sleep(0.3)
        print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} · "
              f"{len(texts)} chunks, {tokens:,} tokens (mean {tokens / len(texts):.0f}), "
              f"{len(batches)} calls of ≤{args.batch} · {args.threads} threads · ours n_ubatch "
              f"{ours.n_ubatch}, n_seq_max {ours.n_seq_max} · llama-server -ub {ub} -np {args.peer_parallel}")
        ours.embed(texts[:4])
        res: dict[str, list[tuple[float, float]]] = {"TurboSpark": [], "llama-server": []}
        vec_ours = vec_peer = None
        for r in range(args.rounds):
            for side in (("TurboSpark", "llama-server") if r % 2 == 0 else ("llama-server", "TurboSpark")):
                if side == "TurboSpark":
                    os.kill(peer.pid, signal.SIGSTOP)
                    try:
                        t, c = time.perf_counter(), time.process_time()
                        vec_ours = np.concatenate([ours.embed(b) for b in batches])
                        wall, cpu = time.perf_counter() - t, time.process_time() - c
                    finally:
                        os.kill(peer.pid, signal.SIGCONT)
                else:
                    t, c = time.perf_counter(), cpu_of(peer.pid)
                    vec_peer = run_peer()
                    wall, cpu = time.perf_counter() - t, cpu_of(peer.pid) - c
                res[side].append((wall, cpu))
                print(f"  round {r + 1} {side:12s} {tokens / wall:7,.0f} tok/s wall · "
                      f"{tokens / cpu:7,.0f} tok/CPU-s · load {os.getloadavg()[0]:.2f}", flush=True)
        med = {s: (tokens / statistics.median(w for w, _ in v), tokens / statistics.median(c for _, c in v))
               for s, v in res.items()}
        for s, (w, c) in med.items():
            print(f"{s:12s} median {w:7,.0f} tokens/s wall · {c:7,.0f} tokens per CPU-second")
        pairs = [tw[0] / ow[0] for ow, tw in zip(res["TurboSpark"], res["llama-server"])]
        print(f"ratio TurboSpark / llama-server: wall {med['TurboSpark'][0] / med['llama-server'][0]:.2f}x "
              f"(paired median {statistics.median(pairs):.2f}x, range {min(pairs):.2f}-{max(pairs):.2f}x) · "
              f"CPU {med['TurboSpark'][1] / med['llama-server'][1]:.2f}x · load now {os.getloadavg()[0]:.2f}")
        assert vec_ours is not None and vec_peer is not None
        cos = (vec_ours * vec_peer).sum(1) / np.linalg.norm(vec_peer, axis=1)
        print(f"vectors: min cosine {cos.min():.6f} over {len(texts)} chunks")
    finally:
        peer.kill()
        peer.wait()
        ours.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
