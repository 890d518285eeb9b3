"""Tools the model can call: MCP servers (the official `mcp` SDK, imported on first use), the
user's approval, and the agent loop's pieces. May import: chat, conversations, engine, host
(no Qt: the window adapts it in `ui.tools_*`, the command line in `cli.chat_tools`).

    config      `mcp.json` in the peers' shape ({"mcpServers": {name: {command, args, env, cwd}
                | {url, headers}}}), checked with the line of each problem
    shell_path  the login shell's PATH (a .app from the Dock lacks it) and command resolution
    server      one server: a long-lived asyncio task that owns the SDK client (entered and
                left in that task), calls sent to it, cancelled on Stop, restarted after death
    hub         every configured server, its tools named for the model (`server__tool`)
    results     a call's result as the text the model reads (capped, images noted)
    approval    Allow once / Always / Deny, remembered per server and tool
    agent       the loop's steps: which tools the model gets, calls to run, the step limit
"""
