"""Load and decode options, and who chose them (flag > environment > setting > default).

    common       LoadChoice and the precedence
    threads      how many threads run the model (the machine's performance cores by default)
    speculation  off / lookup (a per-turn decode choice with the same precedence)
"""
