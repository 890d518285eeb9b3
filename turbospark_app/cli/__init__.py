"""The `turbospark` command line: the entry point, `chat`, `serve`, `model`, the self-test.
May import: every layer below: ui, server, remote, tools, service, conversations, documents, chat,
catalog, readings, model, media, engine, host.

    main           the entry point: the desktop app by default, plus the subcommands
    chat_command   `turbospark chat` (headless); remote_chat: `chat --endpoint`;
                   chat_tools: `chat --mcp-config` (the agent loop, calls asked on stderr)
    serve_command  `turbospark serve` (the local OpenAI-compatible API)
    model_command  `turbospark model fetch|path|info`
    catalog_command  `turbospark model search|get|list|token` (Hugging Face), `--model REPO:QUANT`
    docs_command   `turbospark docs index|list|search|remove|fetch-embedder` (collections);
                   chat_docs: `chat --attach FILE` / `--collection NAME` and the Sources list
    arg_types      argparse type functions and the console's line reader
    progress       a long model load's steps on stderr (chat and serve); interrupt: Ctrl-C in chat
    self_test      `turbospark --self-test` for an installed or frozen app
"""
