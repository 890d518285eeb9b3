"""Finding, sizing up and downloading GGUFs from Hugging Face, and the models folder.
May import: readings, model, engine, host.

    names        quantization names from file names, shards, mmproj files, `REPO[:QUANT]` and
                 pasted Hub URLs
    hub          the Hub through huggingface_hub's HfApi: GGUF repo search, a repo's files grouped
                 by quantization, the Hub's GGUF metadata (nothing is contacted on import)
    remote_header  a file's GGUF header from a ranged read of its first MBs, read by the
                 model package's bounded reader
    inspect      a repo sized up before download: its model's figures (Hub or header), whether
                 llama.cpp runs it, each quantization's fit
    estimate     the memory a file needs at a context (weights + KV + compute buffers) against
                 this machine's RAM: fits / fits, but leaves little / won't fit
    download     resumable, sha256-checked downloads with progress, speed, time left and cancel;
                 a half file never has the model's name; refused when the disk lacks the space
    library      the models folder (My Models): downloaded and added GGUFs, last used, delete,
                 `REPO:QUANT` names resolved to files
    config       the models folder setting and the optional Hub token (the keystore)
"""
