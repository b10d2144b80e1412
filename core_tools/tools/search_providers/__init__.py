"""Web search providers, one module each; `base` holds what they share. tools.search chains them."""
