"""clip: a reason fits its line without a cut word (a doctor line once ended 'DNS erro.')."""

from __future__ import annotations

from core_tools.text import clip, without_urls


def test_clip_keeps_whole_words_and_says_it_cut() -> None:
    text = "error sending request > error resolving DNS > DNS error: no records found for the query"
    for limit in range(20, len(text)):
        out = clip(text, limit)
        assert len(out) <= limit and out.endswith("…")
        kept = out[:-1]
        assert text.startswith(kept), out
        assert text[len(kept) :][:1] in {" ", ":", ">"}, out  # the next character ends a word


def test_clip_leaves_a_short_text_whole_on_one_line() -> None:
    assert clip("no answer\n  in   time", 40) == "no answer in time"


def test_clip_of_one_long_word_still_fits() -> None:
    assert clip("x" * 500, 10) == "x" * 9 + "…"


def test_without_urls_names_no_host() -> None:
    assert without_urls("GET https://search.yahoo.com/s?p=1 failed") == "GET <url> failed"
