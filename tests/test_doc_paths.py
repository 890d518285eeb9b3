"""Every source file the README and docs/ name exists: a reader who follows a path lands on the
code it describes (the model/ reshuffle had left six README paths pointing at old modules)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PATH = re.compile(r"`((?:[A-Za-z_]+/)+[A-Za-z_]+\.py)`")


def _sources() -> list[str]:
    return [str(p.relative_to(ROOT)) for top in ("turbospark_app", "tests", "benchmarks", "tools",
                                                 "packaging")
            for p in (ROOT / top).rglob("*.py")]


def test_every_named_source_path_exists() -> None:
    sources = _sources()
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    missing = [(doc.name, named) for doc in docs
               for named in sorted(set(_PATH.findall(doc.read_text(encoding="utf-8"))))
               if not any(s == named or s.endswith("/" + named) for s in sources)]
    assert missing == []
