"""Reading a GGUF: the bounded header reader, the checked file and its `LlamaConfig`, and the
weight blocks as ONNX Runtime's MatMulNBits reads them. Imports the families (what each arch reads).

    header        the bounded header walk: metadata and tensor infos checked before use
    file          open_gguf: the validated file, its config, the expected tensor shapes
    describe      any readable GGUF's metadata (whatever its architecture) and whether it runs
    quant_blocks  GGUF 4/8-bit blocks -> MatMulNBits blocks, without requantizing
"""
