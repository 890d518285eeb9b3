"""Remote engines: conversations served by any OpenAI-compatible server (vLLM, llama-server,
Ollama, LM Studio, another TurboSpark). May import: engine, service, host (no Qt).

Same events, Stop and honest figures as the local engine; the window adapts it in
`turbospark_app.ui.remote_*`, the command line in `turbospark_app.cli.remote_chat`.
"""

from .client import RemoteStream, RetryPolicy, Target, Timeouts, api_base, list_models
from .errors import RemoteError
from .runner import RemoteRunner, chat_body

__all__ = [
    "RemoteError",
    "RemoteRunner",
    "RemoteStream",
    "RetryPolicy",
    "Target",
    "Timeouts",
    "api_base",
    "chat_body",
    "list_models",
]
