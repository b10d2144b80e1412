"""The terminal chat (`python -m bot chat`): the same assistant, its commands, and what arrives on its own."""
