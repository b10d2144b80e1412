"""The Telegram adapter: the application and its handlers, commands, rendering and streaming of answers,
media in and files out."""
