"""The turn runtime: a chat's queue and who drives it, as one family of modules.

- queue.py: a message as it waits (`Incoming`) and the chat's queue: stored on arrival with its update's
  dedup and its chat's claim in one transaction, read in Telegram's order, taken in batches.
- leases.py: the chats this process holds (`ChatLeases`, kept a while after their last turn) and the per-chat
  lock every holder here takes (`ChatLocks`).
- replica.py: this process as one replica among others on the database (`Replica`): heartbeat, job leases,
  and the loop that passes stops, lets idle leases go and finds chats nobody drives.
- runner.py: `TurnRunner`, which drives a chat: take the next batch, run it, store the outcome.
- stops.py: /stop and the Stop button, here or in the process that runs the turn.
- jobs.py: the periodic and start-up jobs, registered from one table.

Their tables are db/runtime/. The small interface: `TurnRunner.submit` (a message arrived), `.drive` (a chat
nobody drives), `.stop`, `.retry`, `.edited`; `Replica.join`/`.start`/`.leave`; `ChatLocks.hold`.
"""

from bot.runtime.leases import ChatLeases, ChatLocks, Hold
from bot.runtime.queue import Incoming
from bot.runtime.replica import Replica
from bot.runtime.runner import TurnRunner

__all__ = ["ChatLeases", "ChatLocks", "Hold", "Incoming", "Replica", "TurnRunner"]
