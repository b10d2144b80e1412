"""The texts and replies the front ends share (Telegram, the terminal chat, the web app): what a command
answers, worded once, from plain arguments. No front end's code: nothing here imports telegram or a front
end (bot.adapter, bot.terminal, bot.webapp) or bot.process; it stands on bot.runtime, bot.config,
core_tools and db."""
