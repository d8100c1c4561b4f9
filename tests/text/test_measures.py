"""Text measures for deterministic checks: sentences, words and phrase mentions."""

from __future__ import annotations

import pytest

from stream.text.measures import mentions, sentences, words


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three?", ["One", "Two", "Three"]),
        ("Wait... what?! ok", ["Wait", "what", "ok"]),
        ("  Play at 3.5 bpm. Then rest  ", ["Play at 3.5 bpm", "Then rest"]),
        ("see e.g.the chart", ["see e.g.the chart"]),  # no space after the dot: one sentence
        ("Slow down - e.g. play it with a click.", ["Slow down - e.g. play it with a click"]),
        ("Steady, i.e. no rushing. Good", ["Steady, i.e. no rushing", "Good"]),
        ("Scales, arpeggios, etc. Then rest", ["Scales, arpeggios, etc", "Then rest"]),
        ("Better vs. last take", ["Better vs. last take"]),
        # the word before a period read across one line break, as before: "e.g" ends nothing
        ("Play it e.g\n. slowly", ["Play it e.g\n. slowly"]),
        ("Play it\n. Slowly", ["Play it", "Slowly"]),
        ("", []),
        ("  ...  ", []),
    ],
)
def test_sentences(text: str, expected: list[str]) -> None:
    assert sentences(text) == expected


def test_words_keep_contractions_numbers_and_hyphenated_words_whole() -> None:
    assert words("Don't rush — play 80% at 3.5-bpm, then A/B it!") == [
        "Don't",
        "rush",
        "play",
        "80%",
        "at",
        "3.5-bpm",
        "then",
        "A/B",
        "it",
    ]


def test_words_skip_dashes_and_lone_punctuation() -> None:
    assert words("- – — ... ! ?") == []
    assert len(words("Keep the tempo steady.")) == 4


def test_mentions_is_whole_word_and_case_insensitive() -> None:
    assert mentions("Try the METRONOME today", ["metronome"])
    assert not mentions("metronomes everywhere", ["metronome"])
    assert mentions("slow down a bit", ["speed up", "slow down"])
    assert not mentions("slowdown", ["slow down"])


def test_mentions_escapes_regex_characters_in_phrases() -> None:
    assert mentions("is it 3.5 now", ["3.5"])
    assert not mentions("is it 315 now", ["3.5"])
    assert not mentions("anything", ["a.*"])


def test_mentions_take_phrases_that_start_or_end_with_a_symbol() -> None:
    assert mentions("try the C# minor scale", ["c#"])
    assert mentions("aim for 80% accuracy", ["80%"])
    assert not mentions("aim for 800% accuracy", ["80%"]) and not mentions("pitched", ["pitch"])
