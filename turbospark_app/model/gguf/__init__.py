"""Reading a GGUF before llama.cpp sees it: the bounded header reader, the model's figures, and
the description `model info` and the window show.

    header        the bounded header walk: metadata and tensor infos checked before use
    config        the model's shape from the `<arch>.` keys, for any architecture
    describe      any readable GGUF's metadata and whether llama.cpp runs it
    ggml_types    gguf's type tables, without the rest of the gguf package (start-up time)
"""
