"""The pacing and cancellation QA panel: its data, engine figures, evidence export, overrides."""
