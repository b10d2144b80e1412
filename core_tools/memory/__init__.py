"""Layered memory: the store (the service), the write judge, writes, background extraction, embedders, views.

store.MemoryStore is what the bot and the agent use; tool.MemoryTool is the model's `memory` tool.
"""
