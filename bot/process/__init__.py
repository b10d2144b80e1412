"""The process: entry points' arguments, settings, logs, the composition root (wiring) and the operator's
commands."""
