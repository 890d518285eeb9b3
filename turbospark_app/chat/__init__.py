"""Chat turns: prompts from messages (keeping generated token ids), the chat backend (whose
replies wait for the weight-cache check: cache_gate).
May import: engine, model, readings.
"""
