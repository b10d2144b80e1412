"""The garbage collector of a long-running process (the bot, the MCP server), set once it has started.

- What is alive after startup (the imported modules and classes, the services) stays for the life of the
  process. `gc.freeze()` takes it out of the collector's generations, so a full collection no longer walks
  some 300,000 objects: 60-100 ms a time, every few hundred turns.
- A turn leaves a few hundred new objects the collector tracks. At the default young threshold (700),
  four turns in ten paid a young collection of 0.1-0.25 ms. At 20,000, about one turn in sixty pays one
  of a few ms. Garbage in reference cycles waits that long to be freed: a few MB at most.

bench/bench_chat.py runs its bots under these settings, as the process does.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Collect what startup left, freeze what survived, and collect young objects less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 10, 10)
