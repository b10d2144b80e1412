"""The chat's commands: one module per capability, and the catalog that names them for /help and the menus."""
