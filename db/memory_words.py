"""Memory words: what the keyword index (`memories_fts` on SQLite) holds for a row, and near-duplicate text.

`memories_fts` holds owner-prefixed words (migration 0005, see `fts_text`), written in the same transaction
as the row (db.memories); a trigger removes them with the row.
"""

from __future__ import annotations

import re
import unicodedata

from sqlalchemy.orm import Session

from db.recall import recall_backend

# Frequent words that only add noise to an OR-ed BM25 query (questions are full of them).
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "am",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "i",
        "me",
        "my",
        "mine",
        "we",
        "us",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "have",
        "has",
        "had",
        "not",
        "no",
        "yes",
        "any",
        "some",
        "there",
        "here",
        "about",
        "into",
        "over",
        "than",
        "then",
        "so",
        "too",
        "very",
        "just",
        "also",
        "user",
        "user's",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)
# What memories_fts indexes: runs of letters and digits (unicode61 splits at "_" and punctuation too).
_FTS_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def owner_prefix(user_id: int) -> str:
    """What every indexed word of a user starts with: the id in digits, then "x" ("n" first if negative).

    Only consonants: the porter stemmer's measure of a word does not change with a consonant prefix, so a
    prefixed word stems like the bare word ("7xrelational" -> "7xrelat", "7xrate" -> "7xrate"); a vowel
    ("u7x") would stem some words further ("u7xrel", "u7xrat").
    """
    uid = int(user_id)
    return f"{'n' if uid < 0 else ''}{abs(uid)}x"


def fts_words(text_: str) -> list[str]:
    """The words memories_fts indexes: NFC-composed runs of letters and digits, lowercased."""
    return _FTS_WORD.findall(unicodedata.normalize("NFC", text_).lower())


def fts_text(user_id: int, content: str) -> str:
    """The row's text as memories_fts stores it: every word prefixed with the owner ("7xberlin").

    A word's doclist then holds only its owner's rows, so a search reads one user's postings and BM25 counts
    document frequencies within the user. The same function is repeated in migration 0005. Isolation does not
    rest on the prefix alone: recall loads candidate rows with `user_id` in the filter.
    """
    prefix = owner_prefix(user_id)
    return " ".join(prefix + w for w in fts_words(content))


# How much a word of a memory's context (the conversation it came from) weighs in the keyword ranking
# against a word of its own text (1.0): FTS5's bm25() column weight and PostgreSQL's ts_rank weight of
# class B (migration 0027). On LoCoMo (bench/bench_memory_locomo.py) 1.0 let a turn's neighbours, whose
# contexts hold its words, crowd it out (64.8/73.2 at 1.0, 67.2/75.2 at 0.4, 67.2/75.4 at 0.25).
CONTEXT_WEIGHT = 0.4


def said_text(content: str, speaker: str | None) -> str:
    """A memory's own words as its indexes hold them: "speaker: text" when someone other than the user
    said it (PostgreSQL's generated words do the same: migration 0032)."""
    return f"{speaker}: {content}" if speaker else content


def index_words(
    s: Session,
    memory_id: int,
    user_id: int,
    content: str,
    context: str | None = None,
    speaker: str | None = None,
) -> None:
    """Write (or rewrite) the row's words in the keyword index (db.recall: FTS5 or a tsvector column)."""
    recall_backend(s).index_words(s, memory_id, user_id, said_text(content, speaker), context)


def normalise(content: str) -> str:
    """Lowercase words joined by single spaces: punctuation and spacing do not make a new memory."""
    return " ".join(_WORD.findall(content.lower()))
