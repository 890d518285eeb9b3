"""Conversation layer: prompts from messages (keeping generated token ids), the chat backend."""
