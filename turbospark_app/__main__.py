"""`python -m turbospark_app`: the desktop app (same as the `turbospark` command)."""

from .cli import main

raise SystemExit(main())
