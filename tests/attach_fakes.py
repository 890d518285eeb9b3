"""A FakeBackend with vision and a byte tokenizer, for the composer's attachment tests (not
imported by the app): it records the images each prompt carried and puts each image in the
prompt as 4 pseudo ids derived from its sha256, as the real mtmd producer does."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Sequence

from ui_fakes import FakeBackend


class ByteTokenizer:
    def encode(self, text: str, **_: Any) -> list[int]:
        return list(text.encode("utf-8"))


@dataclass
class VisionFake(FakeBackend):
    vision: bool = True
    seen: list[tuple[Any, ...]] = field(default_factory=list)  # the messages of each prompt

    def __post_init__(self) -> None:
        self.prompts = SimpleNamespace(tokenizer=ByteTokenizer(), template=None)

    def prepare_turn(self, session_id: str, messages: Sequence[Any], settings: Any, **kw: Any) -> Any:
        self.seen.append(tuple(messages))
        if messages and messages[-1].images and not messages[-1].content.strip():  # as the real check
            messages = [*messages[:-1], dataclasses.replace(messages[-1], content="<image>")]
        turn = super().prepare_turn(session_id, messages, settings, **kw)
        ids: list[int] = []
        for m in messages:  # each image's 4 cells before its message's text
            for image in m.images:
                ids.extend(-(int(image.sha256[i * 8:(i + 1) * 8], 16) % 100000) - 1 for i in range(4))
        if ids:
            turn = dataclasses.replace(turn, prompt_ids=tuple(ids) + tuple(turn.prompt_ids))
        return turn

    def model_info(self) -> dict[str, Any]:
        info = super().model_info()
        info.update(vision=self.vision, file_name="fake.gguf",
                    vision_label="yes (mmproj-fake.gguf, mlp)" if self.vision
                    else "no (no mmproj*.gguf beside the model)")
        return info
