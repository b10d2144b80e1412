"""The bot's configuration, the bottom of bot/: the settings model (read from the environment by the process),
how secrets are found in it, and the parsers of command arguments every front end shares."""
