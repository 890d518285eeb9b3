"""The compact engine: the GGUF's own 4/8-bit blocks run by ONE ONNX Runtime graph per forward pass.

    weights        the blocks cached beside the float32 kind (scales, minimums, q|k|v fused)
    graph          the ONNX graph builder (MatMulNBits, GroupQueryAttention, the kernel modes)
    forward        CompactLlamaModel: the session, the in-place KV binding, Stop inside a chunk
    graph_cache    the serialized graph kept in the cache entry (a warm open skips building it)
    session_cache  ONNX Runtime's prepacked weights saved and memory-mapped on later loads
"""
