"""`python -m turbospark_app`: the desktop app (same as the `turbospark` command)."""

from .cli.main import main

raise SystemExit(main())
