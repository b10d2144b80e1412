"""The python-telegram-bot Application: allowlist, commands, the chat handler and the global error handler."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from telegram import Message, Update, User
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CallbackContext,
    CallbackQueryHandler,
    ChosenInlineResultHandler,
    CommandHandler,
    ContextTypes,
    ExtBot,
    InlineQueryHandler,
    JobQueue,
    MessageHandler,
    TypeHandler,
    filters,
)

from bot.adapter.answer_info import register_answer_info, shown_in
from bot.adapter.app_button import AppCommand, set_menu_button
from bot.adapter.approvals import register_approval_handlers
from bot.adapter.commands.checkin import register_checkin_handlers
from bot.adapter.commands.code import CodeCommands
from bot.adapter.commands.data import register_data_commands
from bot.adapter.commands.memory import MemoryCommands
from bot.adapter.commands.model import ModelCommands
from bot.adapter.commands.schedules import register_schedule_handlers
from bot.adapter.commands.usage import register_usage_handlers
from bot.adapter.context import App, BotData, Ctx, Server, bound
from bot.adapter.groups import Access, addressed, is_group, turn_text
from bot.adapter.guest import USER_REFUSAL, GuestHandlers, stop_number, support_line
from bot.adapter.inline import InlineHandlers
from bot.adapter.jobs import register_backup_jobs, register_jobs
from bot.adapter.media import MediaHandlers, register_media_handlers
from bot.adapter.menu import publish
from bot.adapter.telegram_http import AiohttpRequest, PollingRequest
from bot.adapter.topics import conversation_of, place_of
from bot.config.settings import Settings
from bot.runtime.endings import NOTHING_RUNS
from bot.runtime.front import ChatFront
from bot.runtime.guest import GuestTurns
from bot.runtime.leases import ChatLocks
from bot.runtime.queue import Incoming
from bot.runtime.runner import TurnRunner
from bot.runtime.services import Services
from bot.runtime.version import version_line
from bot.texts.catalog import Audience, audience_of, help_text, new_session_text
from bot.texts.models import ModelChoice
from db.engine import make_sessionmaker
from db.guest_links import PRIVATE, GuestLinks
from db.runtime import Entry
from db.speakers import Speaker
from db.turn_info import TurnInfos
from db.upgrades import last_upgrade

log = logging.getLogger(__name__)

# A plain text message: its update is recorded as seen in the transaction that queues it (bot/runtime/).
QUEUED_TEXT = filters.UpdateType.MESSAGE & filters.TEXT & ~filters.COMMAND
ALBUMS_REMEMBERED = 200  # albums addressed to the bot in groups, whose other items count as addressed too
GROUP_REFUSAL = (
    "This group is not on my list of chats, so I do not answer here.\n"
    "Its chat id is {chat_id}. If you run this bot, add it to ALLOWED_CHAT_IDS."
)
START_INLINE = "inline"  # /start inline: the inline results' button with nothing typed yet (a plain /start)
LINK_GONE = (
    "That link is too old or was used already (a \u201ccontinue in private\u201d link lasts {minutes} "
    "minutes). Send me the question here."
)


class Handlers:
    """The update handlers; they translate Telegram updates into agent turns and back."""

    def __init__(self, services: Services, front: ChatFront) -> None:
        """`front`: where the turn runner shows the chats' turns (bot/adapter/front.py)."""
        self.services = services
        self.settings = settings = services.settings
        self.access = Access.of(
            settings.allowed_user_ids,
            settings.allowed_chat_ids,
            settings.groups_allowed_speakers,
            settings.owner_id,
        )
        self.allowed = set(self.access.users)
        self.topics = services.conversations.topics  # a forum topic is a conversation of its own
        self.models = ModelChoice(settings.models, services.conversations, services.usage_service.prices)
        replica = services.replica
        self.locks = ChatLocks(replica.chats)
        self.runner = TurnRunner(
            services.agent,
            services.conversations,
            services.code,
            replica.chats,
            front,
            debounce_s=settings.message_debounce_ms / 1000,
            merge_bursts=settings.message_merge_bursts,
            fold_bursts=settings.message_fold_bursts,
            # A forum's topics use the model chosen for the forum.
            model_for=lambda key: self.models.for_chat(self.topics.place(key).chat_id),
            locks=self.locks,
            max_chats=settings.max_concurrent_turns,
            on_free=replica.kick,
            info_button=lambda kind: shown_in(settings.answer_info_button, kind),
        )
        self._albums_for_bot: dict[str, None] = {}  # insertion-ordered: the oldest is forgotten first
        # Guest and inline mode (bot/adapter/guest.py, inline.py): turns without the user's private data.
        self.guests = GuestTurns(
            services.agent,
            services.conversations,
            GuestLinks(make_sessionmaker(services.engine)),
            ttl_s=settings.guest_link_ttl_s,
            model_for=self.models.for_chat,  # the model of the user's private chat
        )
        enabled = settings.guest_mode == "on"
        interval = settings.stream_edit_interval_s
        self.guest = GuestHandlers(self.guests, self.access, enabled=enabled, edit_interval_s=interval)
        self.inline = InlineHandlers(self.guests, self.access, enabled=enabled, edit_interval_s=interval)
        self._version: str | None = None  # the owner's /help's first line, read once

    async def guest_or_inline(self, update: object, context: Ctx) -> None:
        """Guest queries, inline queries and chosen inline results, before the gate (they have no chat the
        gate knows): each refuses or answers on its own (bot/adapter/guest.py, inline.py)."""
        if not isinstance(update, Update):
            return
        if update.guest_message is not None:
            await self.guest.guest_message(context.bot, update.guest_message)
        elif update.inline_query is not None:
            await self.inline.inline_query(context.bot, update.inline_query)
        elif update.chosen_inline_result is not None:
            await self.inline.chosen(context.bot, update.chosen_inline_result)
        else:
            return
        raise ApplicationHandlerStop

    async def guest_stop_pressed(self, update: Update, context: Ctx) -> None:
        """The Stop button under a guest or inline answer being written."""
        query, user = update.callback_query, update.effective_user
        assert query and user
        notice = self.guests.stop(user.id, self.access.is_owner(user.id), stop_number(query.data))
        with contextlib.suppress(TelegramError):
            await query.answer(notice or "Stopped.")

    async def inline_pressed(self, update: Update, context: Ctx) -> None:
        """ "Answer here" under a question posted by an inline query."""
        assert update.callback_query
        await self.inline.pressed(context.bot, update.callback_query)

    def _for_bot(self, msg: Message | None, bot: User) -> bool:
        """A group message addressed to the bot; an album's items count when its captioned one is (only
        one item of an album carries the caption with the @mention)."""
        if msg is None:
            return False
        album = msg.media_group_id
        if addressed(msg, bot):
            if album is not None:
                self._albums_for_bot[album] = None
                while len(self._albums_for_bot) > ALBUMS_REMEMBERED:
                    del self._albums_for_bot[next(iter(self._albums_for_bot))]
            return True
        return album is not None and album in self._albums_for_bot

    async def once(self, update: object, context: Ctx) -> None:
        """Each Telegram update is handled once, however often it is delivered (Telegram retries a webhook
        delivery it got no answer for; behind a load balancer two processes may get the same one). Update
        ids are this bot's (getMe's id): another bot's (a token switch) are not duplicates. A plain text
        message is checked where it is stored (one transaction), or where it is refused (`gate`)."""
        if not isinstance(update, Update) or QUEUED_TEXT.check_update(update):
            return
        self._first_delivery(update, context)

    def _first_delivery(self, update: Update, context: Ctx) -> None:
        """Go on only with an update not handled before."""
        if not self.services.replica.store.first_delivery(context.bot.id, update.update_id):
            log.info("update %s was already handled; dropped", update.update_id)
            raise ApplicationHandlerStop

    async def gate(self, update: object, context: Ctx) -> None:
        """Who is served where: anyone else gets a polite refusal with their id, and nothing else runs.

        In a group only messages addressed to the bot (mention, also in a caption; reply; command) and
        button presses get through, voice notes, photos and files alike; an unlisted group is told its id
        once it addresses the bot, other talk is ignored."""
        if not isinstance(update, Update):
            return
        user, chat = update.effective_user, update.effective_chat
        if user is None:
            raise ApplicationHandlerStop
        # A button on an inline message has no chat: only the user's own rights count.
        chat_id, kind = (chat.id, str(chat.type)) if chat is not None else (user.id, "private")
        query = update.callback_query
        msg = update.message or update.edited_message
        if is_group(kind) and query is None and not self._for_bot(msg, context.bot.bot):
            raise ApplicationHandlerStop  # group talk that is not for the bot
        if self.access.serves(chat_id, kind, user.id):
            if chat is None and query is None:
                raise ApplicationHandlerStop
            return
        if QUEUED_TEXT.check_update(update):  # its dedup was left to the queue: refused once all the same
            self._first_delivery(update, context)
        log.info("refused user %s in chat %s (%s)", user.id, chat_id, kind)
        unlisted_group = is_group(kind) and chat_id not in self.access.chats
        refusal = (
            GROUP_REFUSAL.format(chat_id=chat_id)
            if unlisted_group and not self.settings.groups_allowed_speakers
            else USER_REFUSAL.format(user_id=user.id)
        )
        if query is not None:
            with contextlib.suppress(TelegramError):
                await query.answer("You are not on this bot's list of allowed users.", show_alert=True)
        elif msg is not None:
            await msg.reply_text(refusal)
        raise ApplicationHandlerStop

    def _incoming(self, update: Update, context: Ctx, text: str) -> Incoming:
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat
        speaker = Speaker(
            user.id, conversation_of(self.topics, update), str(chat.type), user.first_name, user.username
        )
        return Incoming(Entry(speaker, text, tg_message_id=msg.message_id, update_id=update.update_id))

    async def _help(self, update: Update) -> str:
        """The commands of this chat's audience (a group, the owner, another user); the owner's begin with
        the running version and when the database was last upgraded."""
        chat, user = update.effective_chat, update.effective_user
        assert chat and user
        audience = audience_of(str(chat.type), self.access.is_owner(user.id))
        text = help_text(audience)
        if audience is not Audience.OWNER:
            return text
        if self._version is None:
            last = await asyncio.to_thread(last_upgrade, self.services.engine)
            self._version = version_line(
                last.upgraded_at if last else None, last.from_version if last else None
            )
        return f"{self._version}\n\n{text}"

    async def start(self, update: Update, context: Ctx) -> None:
        """/start, or /start <token> from a "continue in private" link: its question asked here."""
        assert update.effective_message and update.effective_user and update.effective_chat
        token = (context.args or [""])[0]
        if token and token != START_INLINE and update.effective_chat.type == "private":
            await self._continue(update, context, token)
            return
        name = update.effective_user.first_name or "there"
        await update.effective_message.reply_text(f"Hello, {name}!\n\n{await self._help(update)}")

    async def _continue(self, update: Update, context: Ctx, token: str) -> None:
        """Ask the question of a guest or inline answer's "continue in private" link as a private turn."""
        msg, user = update.effective_message, update.effective_user
        assert msg and user
        found = await self.guests.take(token, PRIVATE, user.id)
        if found is None:
            await msg.reply_text(LINK_GONE.format(minutes=round(self.settings.guest_link_ttl_s / 60)))
            return
        await self.runner.submit(self._incoming(update, context, found.question))

    async def help(self, update: Update, context: Ctx) -> None:
        """/help."""
        assert update.effective_message
        await update.effective_message.reply_text(await self._help(update))

    async def newsession(self, update: Update, context: Ctx) -> None:
        """/newsession [name]."""
        assert update.effective_message and update.effective_user and update.effective_chat
        name = " ".join(context.args or []).strip()[:200] or None
        key = conversation_of(self.topics, update)  # in a forum topic: that topic's session only
        async with self.locks.hold(key):
            result = await self.services.sessions.new_session(
                update.effective_user.id, key, name, str(update.effective_chat.type)
            )
        await update.effective_message.reply_text(new_session_text(result))

    async def text(self, update: Update, context: Ctx) -> None:
        """A text message: queued for its chat's next turn, streamed into the chat."""
        msg, chat = update.effective_message, update.effective_chat
        assert msg and chat and msg.text is not None
        # The chat's type decides what the turn may see: a group never gets the private session or memories.
        text = turn_text(msg, context.bot.bot, str(chat.type))
        item = self._incoming(update, context, text)
        item.dedup_bot = context.bot.id  # recorded as seen where it is queued (`once` left it)
        await self.runner.submit(item)

    async def edited(self, update: Update, context: Ctx) -> None:
        """An edited text message: the latest answered one is answered again, an older one is stored."""
        msg, chat = update.edited_message, update.effective_chat
        assert msg and chat and msg.text is not None
        text = turn_text(msg, context.bot.bot, str(chat.type))
        notice = await self.runner.edited(self._incoming(update, context, text))
        if notice:
            await msg.reply_text(notice)

    async def stop(self, update: Update, context: Ctx) -> None:
        """/stop: stop the chat's running turn."""
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat
        key = conversation_of(self.topics, update)
        owner = self.access.is_owner(user.id)
        notice = await self.runner.stop(key, user.id, owner)
        if notice == NOTHING_RUNS and str(chat.type) == "private" and self.guests.running(user.id):
            notice = self.guests.stop(user.id, owner)  # nothing here: their answer being written as a guest
        if notice:
            await msg.reply_text(notice)

    async def stop_pressed(self, update: Update, context: Ctx) -> None:
        """The Stop button under a streaming answer."""
        query, user, chat = update.callback_query, update.effective_user, update.effective_chat
        assert query and user
        if chat is None or not query.data:
            with contextlib.suppress(TelegramError):
                await query.answer("That answer is already finished.")
            return
        raw = query.data.removeprefix("stop:")
        number = int(raw) if raw.isdigit() else -1
        key = conversation_of(self.topics, update)  # the topic of the answer the button is under
        notice = await self.runner.stop(key, user.id, self.access.is_owner(user.id), number)
        with contextlib.suppress(TelegramError):
            await query.answer(notice or "Stopped.")

    async def retry(self, update: Update, context: Ctx) -> None:
        """/retry: answer the last message again (the old answer is kept, but out of the history)."""
        msg, user = update.effective_message, update.effective_user
        assert msg and user
        notice = await self.runner.retry(self._incoming(update, context, ""), self.access.is_owner(user.id))
        if notice:
            await msg.reply_text(notice)

    async def on_error(self, update: object, context: Ctx) -> None:
        """The one global error handler: log the traceback, apologise briefly, keep serving."""
        log.error("error while handling an update", exc_info=context.error)
        # A guest query's chat is someone else's (the bot may not even be in it): no apology goes there.
        if isinstance(update, Update) and update.effective_chat is not None and update.guest_message is None:
            place = place_of(update)
            try:
                await context.bot.send_message(
                    place.chat_id,
                    "Sorry, something went wrong on my side. It is logged; please try again.",
                    message_thread_id=place.thread_id,
                )
            except TelegramError:
                log.warning("could not send the apology to chat %s", update.effective_chat.id)


async def on_startup(app: App) -> None:
    """Join the other processes on the database (if any), publish the command menu, and start looking for
    chats nobody drives: messages a stopped process left waiting, and turns it could not finish (their
    users are told), are answered from here on."""
    data = app.bot_data
    services = data.services
    replica = services.replica
    replica.join()
    await services.start()
    await publish(app.bot, services.settings.owner_id)  # the command menus and missing descriptions
    await start_webapp(data.webapp, services)
    await set_menu_button(app.bot, services.settings.webapp_url)
    line = support_line(app.bot.bot, services.settings.guest_mode == "on")
    if line:
        log.warning("%s", line)
    drop_unserved(app)

    async def begin(context: Ctx) -> None:
        replica.start()  # once the application runs: the chats it drives are tasks PTB waits for at stop

    assert app.job_queue is not None
    app.job_queue.run_once(begin, 0, name="replica", job_kwargs={"misfire_grace_time": None})


def drive(app: App, runner: TurnRunner, chat_id: int) -> None:
    """Drive a chat nobody drives (the replica found it), as a task of the application."""
    if app.running:  # not while stopping: what still waits is answered by the next start, or another
        app.create_task(runner.drive(chat_id), name=f"drive-{chat_id}")


async def start_webapp(webapp: Server | None, services: Services) -> None:
    """Start the app's web server when WEBAPP_LISTEN is set; one that cannot listen is logged, and the chat
    goes on without it."""
    if webapp is None:
        return
    try:
        await webapp.start()
    except OSError as exc:
        log.error("the app's web server could not listen on %s: %s", services.settings.webapp_listen, exc)


def drop_unserved(app: App) -> None:
    """Messages left waiting by users or chats no longer allowed are refused, as the gate would now."""
    services, access = app.bot_data.services, app.bot_data.access
    waiting = services.conversations.inbox.waiting()
    chat_of = services.conversations.topics.place  # a forum topic's messages: their forum decides
    gone = [q.id for q in waiting if not access.serves(chat_of(q.chat_id).chat_id, q.chat_type, q.user_id)]
    if gone:
        log.info("dropped %d waiting message(s) of users or chats no longer allowed", len(gone))
        services.conversations.inbox.discard(gone)


async def on_shutdown(app: App) -> None:
    """Close HTTP clients and the database inside the event loop that used them."""
    await app.bot_data.schedule_runner.aclose()  # first: no wake-up or task turn outlives the services
    if app.bot_data.webapp is not None:  # first: its requests use everything the services hold
        await app.bot_data.webapp.stop()
    await app.bot_data.services.aclose()


def telegram_bot(settings: Settings, polling: PollingRequest | None = None) -> ExtBot[None]:
    """The Bot API client of the settings: built before the services, which deliver through it; its
    getUpdates go through `polling` (the watchdog's, bot/adapter/watchdog.py) when given."""
    assert settings.telegram_bot_token is not None
    base_url = settings.telegram_api_base_url
    return ExtBot(
        settings.telegram_bot_token.get_secret_value(),
        base_url=base_url,
        base_file_url=base_url.replace("/bot", "/file/bot", 1),
        # aiohttp, not PTB's httpx: far less CPU per Bot API call when many chats are answered at once.
        request=AiohttpRequest(),
        get_updates_request=polling or PollingRequest(connection_pool_size=1),
    )


def build_application(
    data: BotData, h: Handlers, media: MediaHandlers, bot: ExtBot[None], job_queue: JobQueue[Ctx]
) -> App:
    """Build the PTB Application on `bot` and `job_queue` with `h`'s and `media`'s handlers and every other
    one; its bot data is `data`."""
    services = data.services
    settings = services.settings
    app: App = (
        Application.builder()
        .bot(bot)
        .job_queue(job_queue)
        .context_types(ContextTypes(context=CallbackContext, bot_data=bound(data)))
        .concurrent_updates(True)  # order within a chat comes from the inbox and the chat's lease
        .post_init(on_startup)
        .post_shutdown(on_shutdown)
        .build()
    )
    app.add_handler(TypeHandler(Update, h.once), group=-3)  # first of all: a duplicate goes no further
    # Guest and inline updates have no chat: handled before the gate. Only they match these (group -2 also
    # holds the reminders' gate, and a group runs its first matching handler only).
    for early in (
        MessageHandler(filters.UpdateType.GUEST_MESSAGE, h.guest_or_inline),
        InlineQueryHandler(h.guest_or_inline),
        ChosenInlineResultHandler(h.guest_or_inline),
    ):
        app.add_handler(early, group=-2)
    app.add_handler(TypeHandler(Update, h.gate), group=-1)
    app.add_handler(CommandHandler("start", h.start))
    app.add_handler(CommandHandler("help", h.help))
    app.add_handler(CommandHandler("newsession", h.newsession))
    app.add_handler(CommandHandler("stop", h.stop))
    app.add_handler(CommandHandler("retry", h.retry))
    app.add_handler(CallbackQueryHandler(h.stop_pressed, pattern=r"^stop:"))
    app.add_handler(CallbackQueryHandler(h.guest_stop_pressed, pattern=r"^gstop:"))
    app.add_handler(CallbackQueryHandler(h.inline_pressed, pattern=r"^inl:"))
    register_approval_handlers(app, services.approvals, services.conversations.topics)
    register_answer_info(app, TurnInfos(services.engine), services.memory, services.conversations.topics)
    model_commands = ModelCommands(h.models, h.access)
    app.add_handler(CommandHandler("model", model_commands.model))
    app.add_handler(CallbackQueryHandler(model_commands.pressed, pattern=r"^model:"))
    code_commands = CodeCommands(services.code.executions, services.usage_service)
    app.add_handler(CommandHandler("codestats", code_commands.codestats))
    app.add_handler(CommandHandler("codefailures", code_commands.codefailures))
    memory_commands = MemoryCommands(services)
    app.add_handler(CommandHandler("memory", memory_commands.memory))
    app.add_handler(CommandHandler("timezone", memory_commands.timezone))
    app.add_handler(CommandHandler("app", AppCommand(settings.webapp_url).app))
    register_usage_handlers(app, services.usage_service)
    register_schedule_handlers(app, services, data.schedule_runner)
    register_checkin_handlers(app, services)  # /checkin and its buttons
    register_jobs(app)
    register_data_commands(app, services, h.runner, h.guests)  # /export, /forget_me
    register_backup_jobs(app, data.backups)  # BACKUP_SCHEDULE
    new = filters.UpdateType.MESSAGE
    app.add_handler(
        MessageHandler(filters.UpdateType.EDITED_MESSAGE & filters.TEXT & ~filters.COMMAND, h.edited)
    )
    app.add_handler(MessageHandler(QUEUED_TEXT, h.text))
    app.add_handler(MessageHandler(new & filters.COMMAND, h.help))  # an unknown command: show what exists
    # Voice, photos, files; and everything else gets a clear "not supported" (bot/adapter/media.py).
    register_media_handlers(app, media)
    app.add_error_handler(h.on_error)
    return app
