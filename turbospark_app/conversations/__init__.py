"""Saved conversations: the SQLite store, its message tree and branches, the actions a pane
sends, the crash-safe reply writer, export, reply figures. May import: host, chat (no Qt).

    store        Store: SQLite (WAL) in the per-user data folder
    tree         the message tree and the branch on screen (pure Python)
    tree_edits   the store's tree edits inside a caller's transaction
    actions      TurnPlan: what a conversation action (send, regenerate, continue, ...) sends
    checkpoint   saving a streaming reply off the GUI thread
    export       Markdown / JSON export
    reply_stats  a reply's figures across runs
"""
