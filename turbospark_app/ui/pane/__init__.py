"""One conversation pane: its transcript, input, turns, tools, raw and think modes, context."""
