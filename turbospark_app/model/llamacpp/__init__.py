"""The llama.cpp binding: the one package of the app that touches ctypes.

    library     llama-cpp-python's low-level binding, loaded alone; backends, devices, CPU features
    log         llama.cpp's log into the app's log; a load's refusal in one line
    model       a GGUF opened by llama.cpp (mmap), with what llama.cpp says of it
    context     the KV memory of every slot (one sequence each), llama_decode, Stop, state
    batch       a llama_batch over numpy arrays
    producer    the engine's producer over one sequence, and the batched decode step
    embedding   an embedding model's own context: texts -> pooled, L2-normalised vectors,
                every batch capped and packed before llama.cpp sees it
    vocab       llama.cpp's tokenizer: the app's, for every file llama.cpp loads
    vision      libmtmd (image input, imported on first use): a model's projector, images as
                pseudo-ids the token mirror holds, their encode
    encode_stop Stop inside an image's encode: the projector's graph callback (cb_eval)
    image_positions  positions vs cells once images are in a sequence (M-RoPE: Qwen-VL)
"""
