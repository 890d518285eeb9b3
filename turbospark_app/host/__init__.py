"""What this machine and this install give the app: per-user folders, the frozen bundle's
layout, the window platform's libraries, its keychain. May import: nothing of the app (the
bottom layer).

    folders     per-user data / cache / config folders (platformdirs, TURBOSPARK_*_DIR)
    bundle      where a frozen app (PyInstaller, macOS .app) keeps its model and resources
    xcb_check   the X11 libraries Qt's xcb plugin needs on Linux, checked before Qt starts
    keystore    API keys in the system keychain (`keyring`), else in a user-only file
    quick_exit  end the process without its parent waiting for the memory to be freed (Linux)
    lazy_import a module imported on its first use (aiohttp: only remote engines and the API)
    switching   a short GIL switch interval while threads wait on native calls (a model's open)
"""
