"""The watchdog (issue 33): in every process, cheaply and without the model, it notices what makes a bot that
looks healthy deaf or mute (conditions.py: the decisions, on an injected clock; probes.py: the readings of
the process's parts; monitor.py: the loop that logs, records, alerts, tells and writes the health file). The
front end plugs in what only it knows (bot/adapter/vigil.py: the long poll, the webhook, the owner's chat)."""

from bot.runtime.vigil.deliveries import Deliveries
from bot.runtime.vigil.monitor import Condition, Episode, Vigil

__all__ = ["Condition", "Deliveries", "Episode", "Vigil"]
