"""Random JSON schemas for the structured-output runs (objects, arrays, enums, nesting, required
fields, string patterns), reproducible from a seed (not imported by the app)."""

from __future__ import annotations

import random
from typing import Any

WORDS = ["name", "city", "count", "ok", "tags", "price", "id", "kind", "items", "note", "level", "code"]
PATTERNS = ["^[a-z]{2,6}$", "^[A-Z][a-z]{1,8}$", "^[0-9]{3}-[0-9]{4}$", "^(yes|no|maybe)$", "^#[0-9a-f]{6}$"]


def _leaf(rng: random.Random) -> dict[str, Any]:
    pick = rng.randrange(7)
    if pick == 0:
        return {"type": "integer", **({"minimum": 0, "maximum": 100} if rng.random() < 0.5 else {})}
    if pick == 1:
        return {"type": "boolean"}
    if pick == 2:
        return {"enum": rng.sample(["red", "green", "blue", "small", "large", 1, 2, None], rng.randint(2, 4))}
    if pick == 3:
        return {"type": "string", "pattern": rng.choice(PATTERNS)}
    if pick == 4:
        return {"type": "number"}
    if pick == 5:
        return {"type": "string", "maxLength": rng.randint(5, 30)}
    return {"type": "string", "minLength": 1, "maxLength": rng.randint(3, 12)}


def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """An object schema up to three levels deep."""
    props: dict[str, Any] = {}
    for key in rng.sample(WORDS, rng.randint(1, 4)):
        r = rng.random()
        if depth < 2 and r < 0.2:
            props[key] = random_schema(rng, depth + 1)
        elif r < 0.4:
            items = random_schema(rng, depth + 1) if depth < 1 and rng.random() < 0.3 else _leaf(rng)
            props[key] = {"type": "array", "items": items, "minItems": rng.randint(0, 1),
                          "maxItems": rng.randint(1, 4)}
        else:
            props[key] = _leaf(rng)
    required = [k for k in props if rng.random() < 0.7] or [next(iter(props))]
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}
