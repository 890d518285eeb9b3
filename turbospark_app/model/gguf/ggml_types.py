"""gguf's constants (the tensor types, their block sizes, llama.cpp's file types) without the
rest of the `gguf` package: its `__init__` imports its reader, writer and metadata code (and
yaml), ~90 ms of every start for three tables. The module is loaded from gguf's own file under
a private name (`gguf` itself stays unimported, so code that wants all of it still gets it);
where there is no such file (a frozen app's archive) gguf is imported as usual.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path
from types import ModuleType


@lru_cache(maxsize=1)
def constants() -> ModuleType:
    """The `gguf.constants` module (GGMLQuantizationType, GGML_QUANT_SIZES, LlamaFileType)."""
    if "gguf.constants" in sys.modules:
        return sys.modules["gguf.constants"]
    spec = importlib.util.find_spec("gguf")
    origin = Path(spec.origin).parent / "constants.py" if spec is not None and spec.origin else None
    if origin is None or not origin.is_file():
        from gguf import constants as imported

        return imported
    private = importlib.util.spec_from_file_location("turbospark_app.model.gguf._gguf_constants", origin)
    assert private is not None and private.loader is not None
    module = importlib.util.module_from_spec(private)
    sys.modules[private.name] = module
    private.loader.exec_module(module)
    return module
