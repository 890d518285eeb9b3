"""A page of extracted text, and the error a file that cannot be read ends in (a leaf)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class ExtractError(Exception):
    """A file whose text cannot be read; `str()` is the message for its chip or list row."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{Path(path).name}: {reason}")
        self.path = Path(path)
        self.reason = reason


@dataclass(frozen=True)
class Page:
    """One page of text (`number` from 1; None for a file without pages)."""

    number: int | None
    text: str
