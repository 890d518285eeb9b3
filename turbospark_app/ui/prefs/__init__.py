"""Settings: stored values (QSettings), their controls, and the Settings dialog."""
