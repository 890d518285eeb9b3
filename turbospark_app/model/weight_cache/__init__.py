"""The weight cache's bookkeeping, shared by both engines' cache entries (model layer; imports
host and the model's own cache_integrity only).

    keys      the content key of a GGUF (a copy, move or rename finds the same entry)
    usage     per-entry `usage.json`: model name, source files last seen, last used
    leases    which entries a running model maps (never evicted), across processes
    budget    the size budget (setting in the config folder; default and why)
    store     listing, clearing and least-recently-used eviction under the budget

An entry is a folder `<cache>/weights/<stem>-<kind>-<content key>/` (kind "f32" or "compact");
a compact entry holds ONNX Runtime's prepacked sessions in `ort-<key>/` subfolders, one per
kernel mode used, each evicted on its own.
"""
