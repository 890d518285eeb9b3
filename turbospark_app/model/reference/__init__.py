"""The float32 reference engine: the GGUF dequantized once into fused float32 matrices (cached as
memory-mapped .npy) and the numpy forward pass every other engine is checked against.

    weights   dequantized, fused, cached float32 weights
    forward   LlamaModel: the numpy forward pass
"""
