"""The frozen app's entry script: the `turbospark` command (desktop app, `--self-test`, ...).

PyInstaller runs this file as `__main__`, so it cannot be `turbospark_app/__main__.py` (whose
relative import needs a parent package).
"""

from __future__ import annotations

import sys

from turbospark_app.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
