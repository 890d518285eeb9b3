"""Chat turns: prompts from messages (keeping generated token ids), the chat backend over
llama.cpp (one sequence per session slot), log-probabilities for the API.
May import: engine, model, readings, host.
"""
