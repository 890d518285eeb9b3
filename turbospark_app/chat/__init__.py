"""Chat turns: prompts from messages (keeping generated token ids), the chat backend.
May import: engine, model, readings.
"""
