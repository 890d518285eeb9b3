"""Which weights and kernels a load uses, and who chose them (flag > environment > setting > default).

    common   LoadChoice and the precedence shared by both
    weights  compact / f32
    kernels  exact-prompt / exact / int8
    speculation  off / lookup (a per-turn decode choice with the same precedence)
"""
