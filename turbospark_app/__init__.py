"""TurboSpark: a desktop chat app over a local language model that shows what the engine does."""

__version__ = "0.1.0"
