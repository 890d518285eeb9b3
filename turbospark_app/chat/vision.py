"""A chat model's vision: its projector opened beside it, or why not (never an error: a model
whose projector does not fit still runs for text), and the line Model Info shows."""

from __future__ import annotations

from pathlib import Path

from ..model.llamacpp.model import LlamaCppModel
from ..model.llamacpp.vision import Projector, VisionUnavailable, find_projector


def vision_label(projector: Projector | None, reason: str) -> str:
    """"yes (mmproj-x.gguf, mlp)" or "no (why)": Model Info's and `model info`'s line."""
    if projector is not None:
        return f"yes ({projector.describe()})"
    return f"no ({reason or 'no projector'})"


def open_projector(model: LlamaCppModel, model_path: Path, mmproj: str | Path | None,
                   threads: int, n_batch: int) -> tuple[Projector | None, str]:
    """The model's projector and "" , or None and why not. `mmproj`: a file, "auto" (the
    matching mmproj*.gguf beside the model) or None / "off" (no images). A projector that
    does not fit is a reason, never an error: the model still runs for text."""
    if mmproj is None or str(mmproj) == "off":
        return None, "image input is off"
    try:
        if str(mmproj) == "auto":
            choice = find_projector(model_path, model.facts.n_embd)
            if choice.path is None:
                return None, choice.reason
            mmproj = choice.path
        return Projector.open(model, mmproj, threads=threads, n_batch=n_batch), ""
    except VisionUnavailable as e:
        return None, str(e)
