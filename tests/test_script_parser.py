"""Tests for script_text.parser: every accepted format, every rejection, the shipped example scripts,
and hypothesis properties (round trips, only ScriptError on junk, invariants of a parsed Script)."""

from __future__ import annotations

import json
import pickle
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from script_text.parser import (
    MAX_PAUSE_SECONDS,
    MAX_SCRIPT_CHARS,
    MAX_SPEAKERS,
    Pause,
    Script,
    ScriptError,
    Speaker,
    Turn,
    check_speakable,
    find_speaker,
    nothing_to_say,
    parse_script,
    same_speaker_message,
    script_warnings,
    unknown_speaker_message,
)
from script_text.speech_text import has_words_to_say, normalize_for_speech

EXAMPLES = Path(__file__).resolve().parents[2] / "shared" / "examples" / "scripts"

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def texts(script: Script) -> list[str]:
    return [turn.text for turn in script.turns]


def rejection(text: str) -> ScriptError:
    with pytest.raises(ScriptError) as caught:
        parse_script(text)
    return caught.value


# --- Speaker N format ----------------------------------------------------------------


def test_speaker_n_format_gives_speakers_in_order_of_first_appearance() -> None:
    script = parse_script("Speaker 2: Hi.\nSpeaker 1: Hello.\nSpeaker 2: Bye.")
    assert script.speakers == (Speaker("2", "Speaker 2"), Speaker("1", "Speaker 1"))
    assert script.items == (
        Turn(0, "Hi.", 1),
        Turn(1, "Hello.", 2),
        Turn(0, "Bye.", 3),
    )


@pytest.mark.parametrize(
    ("tag", "key"),
    [
        ("Speaker 1:", "1"),
        ("speaker 1:", "1"),
        ("SPEAKER 01:", "1"),
        ("Speaker1:", "1"),
        ("Speaker 0:", "0"),
        ("Speaker 00:", "0"),
        ("Speaker 99:", "99"),
        ("Speaker 7 :", "7"),
    ],
)
def test_speaker_n_labels_are_normalised(tag: str, key: str) -> None:
    script = parse_script(f"{tag} Hello")
    assert script.speakers == (Speaker(key, f"Speaker {key}"),)
    assert texts(script) == ["Hello"]


def test_leading_zeros_and_case_do_not_make_new_speakers() -> None:
    script = parse_script("Speaker 1: a\nspeaker 01: b\nSPEAKER 001: c")
    assert len(script.speakers) == 1
    assert [turn.speaker for turn in script.turns] == [0, 0, 0]


def test_speaker_n_text_may_follow_the_colon_directly() -> None:
    assert texts(parse_script("Speaker 1:Hello")) == ["Hello"]


def test_speaker_number_above_99_is_rejected() -> None:
    err = rejection("Speaker 1: ok\nSpeaker 100: too many digits")
    assert err.line == 2
    assert "Speaker 0 to Speaker 99" in str(err)


@pytest.mark.parametrize(
    ("text", "line", "prefix"),
    [
        ("Speaker 1: ok\nSpeaker -1: a negative number", 2, ""),
        ("Speaker 1: ok\n\nspeaker -007:no space after the colon", 3, ""),
        ("[Speaker 1] ok\n[Speaker -1] in brackets", 2, ""),
        ('{"turns": [{"speaker": 1, "text": "ok"},\n{"speaker": "Speaker -1", "text": "no"}]}', 2, "turn #2: "),
    ],
    ids=["colon", "leading zeros", "bracket", "json"],
)
def test_a_negative_speaker_number_is_rejected_at_its_line_as_out_of_range(text: str, line: int, prefix: str) -> None:
    err = rejection(text)
    assert err.line == line
    assert err.message.startswith(f"{prefix}speaker number -") and err.message.endswith(
        "is out of range; use Speaker 0 to Speaker 99"
    )


def test_a_hyphen_joined_to_speaker_stays_part_of_a_name() -> None:
    script = parse_script("Speaker-1: a name with a hyphen")
    assert script.speakers == (Speaker("Speaker-1", "Speaker-1"),)


# --- Name format ---------------------------------------------------------------------


def test_name_format_keys_are_names_as_first_written() -> None:
    script = parse_script("Alice: Hi Bob.\nBob: Hi Alice.\nALICE: Again.\nbob: Sure.")
    assert script.speakers == (Speaker("Alice", "Alice"), Speaker("Bob", "Bob"))
    assert [turn.speaker for turn in script.turns] == [0, 1, 0, 1]


def test_name_matching_normalises_whitespace() -> None:
    script = parse_script("Mary  Ann: one\nmary\tann : two\nMary\u00a0Ann: three")
    assert script.speakers == (Speaker("Mary Ann", "Mary Ann"),)
    assert texts(script) == ["one", "two", "three"]


def test_names_may_use_digits_dots_apostrophes_hyphens_underscores() -> None:
    script = parse_script("Dr. O'Neil-Smith_2: Hello\nJosé: Hola")
    assert [speaker.key for speaker in script.speakers] == ["Dr. O'Neil-Smith_2", "José"]


def test_speaker_n_and_names_mix_in_colon_style() -> None:
    script = parse_script("Speaker 1: Hi.\nAlice: Hello.")
    assert script.speakers == (Speaker("1", "Speaker 1"), Speaker("Alice", "Alice"))


@pytest.mark.parametrize(
    "line",
    [
        "As the report itself puts it: growth is slow.",  # 5 words before the colon
        "A" * 41 + ": too long to be a name",
        "1999: a number is not a name",
        "https://example.com is a link",
        "Re:subject without a space after the colon",
        "Well, here it is: commas are not allowed in names",
    ],
)
def test_line_that_is_not_a_name_tag_continues_the_turn(line: str) -> None:
    script = parse_script(f"Alice: Listen.\n{line}")
    assert len(script.speakers) == 1
    assert texts(script) == [f"Listen. {line}"]


def test_forty_character_four_word_name_is_a_tag() -> None:
    name = "Abcdefghi Abcdefghi Abcdefghi Abcdefghij"
    assert len(name) == 40
    assert parse_script(f"{name}: hi").speakers == (Speaker(name, name),)


# --- Bracket format ------------------------------------------------------------------


def test_bracket_format() -> None:
    script = parse_script("[Alice] Hello there.\n[Bob]How are you?\n[alice] Fine.")
    assert script.speakers == (Speaker("Alice", "Alice"), Speaker("Bob", "Bob"))
    assert script.items == (
        Turn(0, "Hello there.", 1),
        Turn(1, "How are you?", 2),
        Turn(0, "Fine.", 3),
    )


def test_bracket_speaker_n_is_a_numbered_speaker() -> None:
    assert parse_script("[Speaker 3] Hi").speakers == (Speaker("3", "Speaker 3"),)


def test_in_bracket_style_a_colon_line_is_text() -> None:
    script = parse_script("[Alice] Remember:\nNote: this is still Alice.\nSpeaker 2: so is this.")
    assert len(script.speakers) == 1
    assert texts(script) == ["Remember: Note: this is still Alice. Speaker 2: so is this."]


def test_in_colon_style_a_bracket_line_is_text() -> None:
    script = parse_script("Alice: Ha!\n[laughs] That was good.")
    assert len(script.speakers) == 1
    assert texts(script) == ["Ha! [laughs] That was good."]


# --- continuation, blank lines, normalisation --------------------------------------------


def test_continuation_lines_join_with_one_space_and_blank_lines_do_not_end_turns() -> None:
    script = parse_script("Speaker 1: First line\n   second line   \n\n\n  third line\nSpeaker 2: Reply\n\n")
    assert script.items == (Turn(0, "First line second line third line", 1), Turn(1, "Reply", 6))


def test_tag_alone_on_its_line_takes_text_from_the_next_lines() -> None:
    script = parse_script("Speaker 1:\n\nHello\nthere\nSpeaker 2: Hi")
    assert script.items == (Turn(0, "Hello there", 3), Turn(1, "Hi", 5))


def test_curly_quotes_and_primes_become_ascii() -> None:
    raw = "Speaker 1: \u201cIt\u2019s \u2018fine\u2019,\u201d she said; 5\u2032 11\u2033."
    script = parse_script(raw)
    assert texts(script) == ["\"It's 'fine',\" she said; 5' 11\"."]


def test_odd_spaces_zero_width_and_control_characters_are_normalised() -> None:
    raw = "Speaker\u00a01:\tOne\u2003two\u200b\u200dthree\x00\x07\x85 \u3000four\ufeff  \t five"
    assert texts(parse_script(raw)) == ["One twothree four five"]


BIDI_CONTROLS = "".join(chr(code) for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def test_bidirectional_embeddings_overrides_and_isolates_are_dropped_from_text_and_names() -> None:
    script = parse_script(f"Al{BIDI_CONTROLS}ice: \u202eevil\u202c and\u2067 isolated\u2069 text\nalice: again")
    assert script.speakers == (Speaker("Alice", "Alice"),)
    assert texts(script) == ["evil and isolated text", "again"]
    assert nothing_to_say(BIDI_CONTROLS) == "has nothing to say aloud: only spaces or control characters"


C0_AND_C1_CONTROLS = "".join(
    chr(code) for code in [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0)]
)


def test_every_control_character_but_tab_and_line_endings_is_dropped_from_text_and_names() -> None:
    lines = parse_script(f"Al{C0_AND_C1_CONTROLS}ice: Hel{C0_AND_C1_CONTROLS}lo\nalice: a\x00gain")
    assert lines.speakers == (Speaker("Alice", "Alice"),)
    assert texts(lines) == ["Hello", "again"]
    # JSON's escapes reach the same text: "\u0000" decodes to NUL, which PostgreSQL would refuse to store.
    document = json.dumps({"turns": [{"speaker": f"Bo{C0_AND_C1_CONTROLS}b", "text": f"Hi{C0_AND_C1_CONTROLS}!"}]})
    assert "\\u0000" in document
    parsed = parse_script(document)
    assert parsed.speakers == (Speaker("Bob", "Bob"),) and texts(parsed) == ["Hi!"]


@pytest.mark.parametrize(
    ("text", "line"),
    [("Alice: hi\nBob: \x00\x1b\x9b", 2), ('{"turns": [{"speaker": "Alice", "text": "\\u0000\\u0007"}]}', 1)],
    ids=["colon", "json"],
)
def test_a_turn_of_only_control_characters_has_no_text(text: str, line: int) -> None:
    err = rejection(text)
    assert err.line == line and "has no text" in err.message


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_any_line_ending_and_a_bom(newline: str) -> None:
    script = parse_script("\ufeffSpeaker 1: Hi" + newline + "there" + newline + "Speaker 2: Yo")
    assert script.items == (Turn(0, "Hi there", 1), Turn(1, "Yo", 3))


def test_other_brackets_stay_in_the_text() -> None:
    assert texts(parse_script("Speaker 1: Oh [laughs] really? [pause for effect] [pauses]")) == [
        "Oh [laughs] really? [pause for effect] [pauses]"
    ]


# --- pauses --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "seconds"),
    [
        ("[pause: 800ms]", 0.8),
        ("[pause: 1.5s]", 1.5),
        ("[pause:2s]", 2.0),
        ("[PAUSE 500 ms]", 0.5),
        ("[Pause : 0.25 S]", 0.25),
        ("[ pause .5s ]", 0.5),
        ("[pause: 30s]", MAX_PAUSE_SECONDS),
        ("[pause: 30000ms]", MAX_PAUSE_SECONDS),
        ("[pause: 1ms]", 0.001),
    ],
)
def test_pause_tag_forms(tag: str, seconds: float) -> None:
    script = parse_script(f"Speaker 1: Hi\n{tag}\nSpeaker 2: Yo")
    assert script.items == (Turn(0, "Hi", 1), Pause(pytest.approx(seconds), 2), Turn(1, "Yo", 3))


def test_inline_pause_splits_the_turn_for_the_same_speaker() -> None:
    script = parse_script("Speaker 1: Well [pause: 1s] maybe.\nSpeaker 2: OK")
    assert script.items == (
        Turn(0, "Well", 1),
        Pause(1.0, 1),
        Turn(0, "maybe.", 1),
        Turn(1, "OK", 2),
    )


def test_parts_after_a_pause_keep_the_line_where_they_appear() -> None:
    script = parse_script("Speaker 1: One\ntwo [pause 500ms]\n\nthree\n[pause: 2s] four")
    assert script.items == (
        Turn(0, "One two", 1),
        Pause(0.5, 2),
        Turn(0, "three", 4),
        Pause(2.0, 5),
        Turn(0, "four", 5),
    )


def test_pause_at_turn_edges_leaves_no_empty_turns() -> None:
    script = parse_script("Speaker 1: [pause: 1s] Hi [pause: 2s]\nSpeaker 2: [pause:1s][pause:1s]Yo")
    assert script.items == (
        Pause(1.0, 1),
        Turn(0, "Hi", 1),
        Pause(2.0, 1),
        Pause(1.0, 2),
        Pause(1.0, 2),
        Turn(1, "Yo", 2),
    )


def test_pause_before_the_first_turn_and_after_the_last() -> None:
    script = parse_script("\n[pause: 1s]\nSpeaker 1: Hi\n[pause: 3s]")
    assert script.items == (Pause(1.0, 2), Turn(0, "Hi", 3), Pause(3.0, 4))
    assert script.turns == (Turn(0, "Hi", 3),)


def test_pause_tag_is_not_a_bracket_speaker() -> None:
    script = parse_script("[Alice] Hi\n[pause 500 ms]\n[Bob] Yo")
    assert len(script.speakers) == 2
    assert script.items[1] == Pause(0.5, 2)


@pytest.mark.parametrize("tag", ["[pause: 0s]", "[pause: 0ms]", "[pause: 31s]", "[pause: 30001ms]"])
def test_pause_out_of_range_is_rejected(tag: str) -> None:
    err = rejection(f"Speaker 1: Hi\nSpeaker 2: so {tag} there")
    assert err.line == 2
    assert "out of range" in str(err)
    assert "longer than 0 s and at most 30 s" in str(err)


@pytest.mark.parametrize("tag", ["[pause]", "[pause: 2 seconds]", "[pause: 2]", "[pause -1s]", "[pause: 1.s]"])
def test_unreadable_pause_is_rejected(tag: str) -> None:
    err = rejection(f"Speaker 1: Hi\n\n{tag}\nSpeaker 2: Yo")
    assert err.line == 3
    assert "[pause: 800ms] or [pause: 1.5s]" in str(err)


# --- JSON ------------------------------------------------------------------------------

JSON_SCRIPT = """{
  "title": "ignored",
  "turns": [
    {"speaker": 1, "text": "Hello \\u201cthere\\u201d"},
    {"pause": "800ms"},
    {"speaker": "Alice", "text": "Hi\\nagain"},
    {"pause": 1.5},
    {"speaker": "Speaker 1", "text": "Before [pause: 2s] after"},
    {"speaker": "alice", "text": "Bye"}
  ]
}"""


def test_json_format_with_pauses_and_item_lines() -> None:
    script = parse_script(JSON_SCRIPT)
    assert script.speakers == (Speaker("1", "Speaker 1"), Speaker("Alice", "Alice"))
    assert script.items == (
        Turn(0, 'Hello "there"', 4),
        Pause(0.8, 5),
        Turn(1, "Hi again", 6),
        Pause(1.5, 7),
        Turn(0, "Before", 8),
        Pause(2.0, 8),
        Turn(0, "after", 8),
        Turn(1, "Bye", 9),
    )


def test_json_on_one_line_with_leading_blank_lines_and_digit_string_speaker() -> None:
    script = parse_script('\n\n  {"turns": [{"speaker": "02", "text": "x"}, {"speaker": 0, "text": "y"}]}')
    assert script.speakers == (Speaker("2", "Speaker 2"), Speaker("0", "Speaker 0"))
    assert [turn.line for turn in script.turns] == [3, 3]


def test_json_last_turns_key_wins_like_json_loads() -> None:
    script = parse_script('{"turns": [],\n"turns": [\n{"speaker": 1, "text": "x"}]}')
    assert script.turns == (Turn(0, "x", 3),)


def test_invalid_json_names_line_and_column() -> None:
    err = rejection('{"turns": [\n  {"speaker": 1, "text": "x"}\n  {"speaker": 2}\n]}')
    assert err.line == 3
    assert "column 3" in str(err)
    assert '{"turns": [{"speaker": 1' in str(err)


@pytest.mark.parametrize(
    "document",
    [
        "{}",
        '{"turns": []}',
        '{"turns": {"speaker": 1}}',
        '{"turn": [{"speaker": 1, "text": "x"}]}',
    ],
)
def test_json_without_a_turns_list_is_rejected(document: str) -> None:
    err = rejection(document)
    assert err.line is None
    assert '"turns"' in str(err) and "expected" in str(err)


def test_json_that_is_not_an_object_is_rejected() -> None:
    err = rejection('[{"speaker": 1, "text": "x"}]')
    assert err.line == 1
    assert "JSON object" in str(err)


@pytest.mark.parametrize(
    ("item", "allowed"),
    [
        ('"just text"', "each item must be an object"),
        ('{"text": "no speaker"}', '"speaker" must be a number from 0 to 99 or a name'),
        ('{"speaker": true, "text": "x"}', '"speaker" must be a number from 0 to 99 or a name'),
        ('{"speaker": -1, "text": "x"}', '"speaker" must be a number from 0 to 99 or a name'),
        ('{"speaker": 1.5, "text": "x"}', '"speaker" must be a number from 0 to 99 or a name'),
        ('{"speaker": "", "text": "x"}', '"speaker" must be a number from 0 to 99 or a name'),
        ('{"speaker": "1st guest", "text": "x"}', "starts with a letter"),
        ('{"speaker": 100, "text": "x"}', "Speaker 0 to Speaker 99"),
        ('{"speaker": 1}', '"text" must be a string'),
        ('{"speaker": 1, "text": 5}', '"text" must be a string'),
        ('{"speaker": 1, "text": "  "}', '"text" must say something'),
        ('{"speaker": 1, "text": "[pause: 1s]"}', '"text" must say something'),
        ('{"pause": "fast"}', '"pause" must be a number of seconds or a string like "800ms"'),
        ('{"pause": true}', '"pause" must be a number of seconds or a string like "800ms"'),
        ('{"pause": 0}', "at most 30 s"),
        ('{"pause": "31s"}', "at most 30 s"),
        ('{"pause": "1s", "text": "x"}', "in its own item"),
    ],
)
def test_bad_json_item_is_rejected_at_its_line(item: str, allowed: str) -> None:
    err = rejection('{"turns": [\n  {"speaker": 1, "text": "ok"},\n  ' + item + "\n]}")
    assert err.line == 3
    assert str(err).startswith("line 3: turn #2")
    assert allowed in str(err)


def test_json_fifth_speaker_is_rejected() -> None:
    turns = [{"speaker": name, "text": "hi"} for name in ["A", "B", "C", "D", "E"]]
    err = rejection(json.dumps({"turns": turns}, indent=1))
    assert err.line == 19
    assert "at most 4 speakers" in str(err) and "A, B, C, D" in str(err)


@pytest.mark.parametrize(
    ("document", "allowed"),
    [
        ('{"turns": ' + "[" * 5000, "nested too deeply"),
        ('{"turns": [{"speaker": ' + "9" * 5000 + "}]}", "number too long"),
    ],
)
def test_json_that_python_cannot_decode_is_rejected(document: str, allowed: str) -> None:
    err = rejection(document)
    assert allowed in str(err) and "expected" in str(err)


# --- nothing to say aloud ------------------------------------------------------------------

ONLY = "is only emoji, symbols or punctuation (no letter or number)"
WHAT_TO_DO = "write the words to speak, or remove the turn (use a pause for silence)"


@pytest.mark.parametrize(
    ("text", "line", "speaker", "found"),
    [
        ("Alice: Hi.\nBob: Hello.\nAlice: \U0001f389\U0001f389", 3, "Alice", "'\U0001f389\U0001f389'"),
        ("Speaker 1: Well\nSpeaker 2: ...", 2, "Speaker 2", "'...'"),
        ("[Alice] Hi\n[Bob]\n\n  ?!  \n  \u2014 ", 4, "Bob", "'?! \u2014'"),
        ("Alice: So [pause: 1s] \u2026!", 1, "Alice", "'\u2026!'"),
        ("Alice: Hi\nBob: \x00\U0001f44d\u200b\x07", 2, "Bob", "'\U0001f44d'"),
        (
            '{"turns": [\n {"speaker": 1, "text": "Hi"},\n {"speaker": 0, "text": "\u2764\ufe0f"}\n]}',
            3,
            "Speaker 0",
            "'\u2764\ufe0f'",
        ),
    ],
    ids=["emoji", "punctuation", "bracket style, continuation lines", "after a pause", "emoji among controls", "json"],
)
def test_a_turn_with_nothing_to_say_aloud_is_refused_at_its_line(
    text: str, line: int, speaker: str, found: str
) -> None:
    script = parse_script(text)  # parsing alone accepts it: label checks parse stand-ins like "Name: -"
    with pytest.raises(ScriptError) as caught:
        check_speakable(script)
    err = caught.value
    assert err.line == line
    assert err.message == f"{speaker}'s turn has nothing to say aloud: {found} {ONLY}; {WHAT_TO_DO}"


@pytest.mark.parametrize(
    "text",
    [
        "%",
        "$5",
        "&",
        "#1",
        "@",
        "+",
        "\u20ac",
        "42",
        "\u00bd",
        "\u4f60\u597d",
        "\u0645\u0631\u062d\u0628\u0627",
        "\U0001f389 ok",
        "x",
        "[laughs]",
    ],
)
def test_letters_numbers_and_symbols_the_normaliser_spells_out_are_speakable(text: str) -> None:
    assert nothing_to_say(text) is None
    script = parse_script(f"Alice: {text}")
    check_speakable(script)
    assert texts(script) == [text]


def test_nothing_to_say_names_what_it_found() -> None:
    assert nothing_to_say("\x00 \t\x7f\u200b") == "has nothing to say aloud: only spaces or control characters"
    party = "\U0001f389"
    assert nothing_to_say(party * 50) == f"has nothing to say aloud: '{party * 37}...' {ONLY}"  # an excerpt


# Letters, digits, every symbol the normaliser reads and the punctuation its passes look for (URLs, dates,
# times, money, fractions, abbreviations), with emoji and other symbols it leaves alone.
normaliser_text = st.text(
    alphabet=st.sampled_from("aDeg.9105:/-,@#%$&+=°€£¥½²!?… \n\U0001f389\u2764\ufe0f*~")
    | st.characters(exclude_categories=("Cs",)),
    max_size=40,
)


@PROPERTY_SETTINGS
@given(normaliser_text)
def test_has_words_to_say_tells_without_normalising_whether_the_normalised_text_has_a_letter_or_number(
    text: str,
) -> None:
    assert has_words_to_say(text) == any(char.isalnum() for char in normalize_for_speech(text))


@pytest.mark.parametrize(
    "text",
    ["https://www.example.com/?q=1#x", "ann@example.com", "e.g.", "Dr.", "10:30", "$1.5M", "1/2", "2025-08-07", "#"],
)
def test_the_normaliser_keeps_a_letter_or_number_in_the_forms_it_rewrites(text: str) -> None:
    assert has_words_to_say(text) and any(char.isalnum() for char in normalize_for_speech(text))


# --- voice keys ------------------------------------------------------------------------------

ZERO_AND_ONE = parse_script("Speaker 0: Hi.\nSpeaker 1: Hello.").speakers
ALICE_AND_BOB = parse_script("Alice: Hi.\nBob: Hello.").speakers


@pytest.mark.parametrize(
    ("speakers", "key", "index"),
    [
        (ZERO_AND_ONE, "0", 0),
        (ZERO_AND_ONE, "1", 1),
        (ZERO_AND_ONE, "01", 1),
        (ZERO_AND_ONE, "speaker  01", 1),
        (ZERO_AND_ONE, "Speaker1", 1),
        (ZERO_AND_ONE, "2", None),  # a number is the N of "Speaker N", never a position, in a numbered script
        (ZERO_AND_ONE, "\u00b2", None),  # a superscript two is a digit to str.isdigit, not to int()
        (ALICE_AND_BOB, "bob", 1),
        (ALICE_AND_BOB, "1", 0),  # without numbered speakers a number is a place in order of appearance
        (ALICE_AND_BOB, "2", 1),
        (ALICE_AND_BOB, "0", None),
        (ALICE_AND_BOB, "3", None),
    ],
)
def test_a_voice_key_picks_a_speaker_by_name_or_number(
    speakers: tuple[Speaker, ...], key: str, index: int | None
) -> None:
    assert find_speaker(speakers, key) == index


def test_a_number_beyond_the_scripts_numbering_explains_how_speakers_are_numbered() -> None:
    assert unknown_speaker_message(ZERO_AND_ONE, "2") == (
        'the script has no Speaker 2; its speakers are Speaker 0 and Speaker 1 (voice keys "0" and "1", or their '
        'names); voice key N means "Speaker N" as written in the script, not the Nth speaker'
    )
    assert unknown_speaker_message(ZERO_AND_ONE, "Carol") == (
        "the script has no speaker 'Carol'; its speakers are Speaker 0 and Speaker 1 "
        '(voice keys "0" and "1", or their names)'
    )
    assert unknown_speaker_message(ALICE_AND_BOB, "3") == (
        "the script has no speaker '3'; its speakers are Alice and Bob "
        '(voice keys "Alice" and "Bob", or "1" and "2" in order of first appearance)'
    )


@pytest.mark.parametrize(
    ("speakers", "first", "second", "message"),
    [
        (
            ZERO_AND_ONE,
            "1",
            "Speaker 1",
            '"1" and "Speaker 1" are the same speaker, Speaker 1 ("1" is its number, "Speaker 1" its name)',
        ),
        (
            ZERO_AND_ONE,
            "1",
            "01",
            '"1" and "01" are the same speaker, Speaker 1 (leading zeros do not change a number)',
        ),
        (
            ALICE_AND_BOB,
            "Alice",
            "alice",
            '"Alice" and "alice" are the same speaker, Alice (names match whatever their case or spacing)',
        ),
        (
            ALICE_AND_BOB,
            "2",
            "Bob",
            '"2" and "Bob" are the same speaker, Bob ("2" is its place in order of first appearance, "Bob" its name)',
        ),
        (ALICE_AND_BOB, "Bob", "Bob", 'Bob is given two voices under "Bob"'),
    ],
)
def test_two_keys_for_one_speaker_say_why_they_are_the_same(
    speakers: tuple[Speaker, ...], first: str, second: str, message: str
) -> None:
    assert same_speaker_message(speakers, first, second) == f"{message}; give each speaker one voice"


# --- whole-script rejections ---------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   ", "\n\n\t\n", "\ufeff", "\u200b\u00a0\n"])
def test_empty_script_is_rejected(text: str) -> None:
    err = rejection(text)
    assert err.line is None
    assert str(err) == "the script is empty; write one turn per line like 'Speaker 1: Hello'"


def test_script_with_only_pauses_is_rejected() -> None:
    err = rejection("[pause: 1s]\n[pause: 2s]")
    assert err.line is None
    assert "'Speaker 1: Hello'" in str(err)


def test_too_long_script_is_rejected_with_its_length_and_the_limit() -> None:
    err = rejection("Speaker 1: " + "a" * MAX_SCRIPT_CHARS)
    assert err.line is None
    assert "200,011" in str(err) and "200,000" in str(err)


def test_script_at_the_length_limit_is_accepted() -> None:
    text = "Speaker 1: " + "a" * (MAX_SCRIPT_CHARS - 11)
    assert len(parse_script(text).turns) == 1


def test_text_before_the_first_tag_is_rejected_naming_the_tag_forms() -> None:
    err = rejection("\n[pause: 1s]\nIntro without a speaker\nSpeaker 1: Hi")
    assert err.line == 3
    for form in ("'Speaker 1: ...'", "'Name: ...'", "'[Name] ...'", '{"turns"'):
        assert form in str(err)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("Speaker 1: Hi\nSpeaker 2:\n\nSpeaker 1: Hello?", 2),
        ("Speaker 1: Hi\nSpeaker 2:   \n\n", 2),
        ("[Alice] Hi\n[Bob]\n[Alice] Hm", 2),
        ("Alice:\nBob: Hi", 1),
        ("Speaker 1: [pause: 1s]\nSpeaker 2: Hi", 1),
    ],
)
def test_tag_without_text_is_rejected(text: str, line: int) -> None:
    err = rejection(text)
    assert err.line == line
    assert "has no text" in str(err) and "after the tag or on the lines below it" in str(err)


def test_fifth_speaker_is_rejected_naming_the_speakers_so_far() -> None:
    err = rejection("Speaker 1: a\nAlice: b\n[pause: 1s]\nSpeaker 3: c\nBob: d\nspeaker 1: e\nEve: f")
    assert err.line == 7
    message = str(err)
    assert "Eve" in message and f"at most {MAX_SPEAKERS} speakers" in message
    assert "Speaker 1, Alice, Speaker 3, Bob" in message


# --- ScriptError -------------------------------------------------------------------------


def test_script_error_formats_the_line_and_survives_pickling() -> None:
    err = ScriptError("bad thing; good thing", 7)
    assert str(err) == "line 7: bad thing; good thing"
    assert isinstance(err, ValueError)
    assert str(ScriptError("whole script")) == "whole script"
    copy = pickle.loads(pickle.dumps(err))
    assert (str(copy), copy.line) == (str(err), 7)


def test_script_is_frozen() -> None:
    script = parse_script("Speaker 1: Hi")
    with pytest.raises(AttributeError):
        script.items = ()  # type: ignore[misc]


# --- hostile input ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a " * 100_000,
        "[" * 100_000,
        "Speaker " * 30_000,
        "Speaker " * 24_999 + "1:",
        ":" * MAX_SCRIPT_CHARS,
        "A" * (MAX_SCRIPT_CHARS - 1) + ":",
        "Speaker 1: " + "a " * 99_990,
        "Speaker 1: " + "[pause" * 33_000,
        "Speaker 1: " + "[pause: 1" * 22_000,
        "Speaker 1: [pause: " + "1" * 150_000 + "s]",
        "Speaker 1: " + "[pause: 1s] x " * 14_000,
        "[" * 40 + "]" * 150_000,
        "Alice: hi\n" * 20_000,
        '{"turns": ' + "[" * 150_000,
        '{"turns": [' + '{"speaker": 1, "text": "x"},' * 7_000 + "1]}",
    ],
    ids=lambda text: repr(text[:24]),
)
def test_hostile_input_is_handled_quickly(text: str) -> None:
    assert len(text) <= 250_000
    # This process's CPU time, not the wall clock: what a backtracking pattern burns, whatever else the machine runs.
    started = time.process_time()
    try:
        parse_script(text)
    except ScriptError:
        pass
    assert time.process_time() - started < 1.0


# --- shipped example scripts --------------------------------------------------------------

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.txt")) if EXAMPLES.is_dir() else []
needs_examples = pytest.mark.skipif(
    not EXAMPLES.is_dir(), reason=f"example scripts folder {EXAMPLES} is absent in this checkout"
)


@needs_examples
@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda path: path.name)
def test_example_scripts_have_one_turn_per_non_blank_line(path: Path) -> None:
    source = path.read_text(encoding="utf-8")
    script = parse_script(source)
    non_blank = [number for number, line in enumerate(source.splitlines(), 1) if line.strip()]
    assert [turn.line for turn in script.turns] == non_blank
    assert all(speaker.key.isdigit() for speaker in script.speakers)


@needs_examples
def test_three_speaker_example() -> None:
    source = (EXAMPLES / "3p_gpt5.txt").read_text(encoding="utf-8")
    script = parse_script(source)
    assert [speaker.name for speaker in script.speakers] == ["Speaker 1", "Speaker 2", "Speaker 3"]
    assert len(script.turns) == sum(1 for line in source.splitlines() if line.strip())
    assert script.turns[0].text.startswith("Welcome to Tech Forward")


@needs_examples
def test_curly_quotes_in_example_become_ascii() -> None:
    script = parse_script((EXAMPLES / "2p_short.txt").read_text(encoding="utf-8"))
    assert script.turns[0].text == "I heard there's big news in TTS lately?"


# --- properties ---------------------------------------------------------------------------

# Text the parser should keep verbatim apart from whitespace: no brackets (pause tags),
# no newlines (continuations) and no characters that normalisation rewrites or drops.
turn_text = st.text(
    alphabet=st.characters(
        categories=("L", "N", "P", "Zs"),
        exclude_characters="[]\u2018\u2019\u201a\u201b\u201c\u201d\u201e\u201f\u2032\u2033",
    )
    | st.sampled_from("\t "),
    min_size=1,
    max_size=60,
).filter(lambda text: text.split())

turn_lists = st.lists(st.tuples(st.integers(0, MAX_SPEAKERS - 1), turn_text), min_size=1, max_size=12)

name_word = st.text(alphabet=st.characters(categories=("Lu", "Ll")), min_size=1, max_size=8)
speaker_name = (
    st.lists(name_word, min_size=1, max_size=2)
    .map(" ".join)
    .filter(lambda name: not re.fullmatch("pause", name, re.IGNORECASE))  # "[pause]" is a bad pause
)
four_names = st.lists(speaker_name, min_size=MAX_SPEAKERS, max_size=MAX_SPEAKERS, unique_by=str.casefold)
four_numbers = st.lists(st.integers(0, 99), min_size=MAX_SPEAKERS, max_size=MAX_SPEAKERS, unique=True)


def normalised(text: str) -> str:
    return " ".join(text.split())


def first_appearance(turns: list[tuple[int, str]]) -> list[int]:
    return list(dict.fromkeys(index for index, _ in turns))


def assert_round_trip(script: Script, turns: list[tuple[int, str]], labels: list[str]) -> None:
    order = first_appearance(turns)
    assert [speaker.key for speaker in script.speakers] == [labels[index] for index in order]
    assert [(order[turn.speaker], turn.text) for turn in script.turns] == [
        (index, normalised(text)) for index, text in turns
    ]


@PROPERTY_SETTINGS
@given(
    turns=turn_lists,
    numbers=four_numbers,
    style=st.sampled_from(["Speaker {}", "speaker {:02d}", "SPEAKER {}"]),
)
def test_round_trip_speaker_n(turns: list[tuple[int, str]], numbers: list[int], style: str) -> None:
    source = "\n".join(f"{style.format(numbers[index])}: {text}" for index, text in turns)
    script = parse_script(source)
    assert_round_trip(script, turns, [str(number) for number in numbers])
    assert [turn.line for turn in script.turns] == list(range(1, len(turns) + 1))


@PROPERTY_SETTINGS
@given(turns=turn_lists, names=four_names, brackets=st.booleans())
def test_round_trip_names(turns: list[tuple[int, str]], names: list[str], brackets: bool) -> None:
    template = "[{}] {}" if brackets else "{}: {}"
    script = parse_script("\n\n".join(template.format(names[index], text) for index, text in turns))
    assert_round_trip(script, turns, names)
    assert [turn.line for turn in script.turns] == list(range(1, 2 * len(turns), 2))


@PROPERTY_SETTINGS
@given(turns=turn_lists, names=four_names, numbers=four_numbers, numbered=st.booleans())
def test_round_trip_json(turns: list[tuple[int, str]], names: list[str], numbers: list[int], numbered: bool) -> None:
    labels: list[int] | list[str] = numbers if numbered else names
    document = {"turns": [{"speaker": labels[index], "text": text} for index, text in turns]}
    script = parse_script(json.dumps(document, indent=2))
    assert_round_trip(script, turns, [str(label) for label in labels])
    assert [turn.line for turn in script.turns] == [3 + 4 * k for k in range(len(turns))]


# Fragments that exercise every branch, glued together at random.
FRAGMENTS = [
    "Speaker 1:",
    "Speaker 2: hi",
    "speaker 03:",
    "Speaker 100:",
    "Alice:",
    "Bob: yo",
    "Eve:",
    "[Carol]",
    "[Dan] ok",
    "[pause: 1s]",
    "[pause 800 ms]",
    "[pause: 0s]",
    "[pause]",
    "[laughs]",
    "\n",
    "\r\n",
    " ",
    "\t",
    "text",
    ":",
    "[",
    "]",
    "{",
    "}",
    '"turns"',
    "\u201c",
    "\u00a0",
    "\u200b",
    "\x00",
    "\ufeff",
    "0",
    "1.5",
    "ms",
]
fragment_scripts = st.lists(st.sampled_from(FRAGMENTS), max_size=40).map("".join)

json_scalars = st.none() | st.booleans() | st.integers(-5, 120) | st.floats() | st.text(max_size=12)
json_speakers = st.integers(0, 5) | st.sampled_from(["Alice", "bob", "Speaker 2"])
valid_json_items = st.fixed_dictionaries({"speaker": json_speakers, "text": st.text()}) | st.fixed_dictionaries(
    {"pause": st.sampled_from(["800ms", "1.5 s", 2, 0.25])}
)
odd_json_items = json_scalars | st.fixed_dictionaries(
    {},
    optional={
        "speaker": st.integers(-1, 101) | st.sampled_from(["Alice", "7", "", "x:"]) | json_scalars,
        "text": st.sampled_from(["hello", "", "[pause: 1s]", "a [pause: 2s] b"]) | json_scalars,
        "pause": st.sampled_from(["800ms", "0s", "99s", "soon"]) | json_scalars,
    },
)
json_scripts = st.builds(
    lambda items, indent: json.dumps({"turns": items}, indent=indent),
    st.lists(valid_json_items, max_size=6) | st.lists(valid_json_items | odd_json_items, max_size=6),
    st.sampled_from([None, 1]),
)

any_script = st.text() | fragment_scripts | json_scripts | st.text().map("Speaker 1: ".__add__)


def parse_or_none(text: str) -> Script | None:
    """The parsed script, or None after checking that a rejection is a well-formed ScriptError."""
    try:
        return parse_script(text)
    except ScriptError as err:
        assert err.line is None or err.line >= 1
        assert str(err)
        return None


def assert_well_formed(script: Script) -> None:
    assert 1 <= len(script.speakers) <= MAX_SPEAKERS
    assert len({speaker.key.casefold() for speaker in script.speakers}) == len(script.speakers)
    assert {turn.speaker for turn in script.turns} == set(range(len(script.speakers)))
    for item in script.items:
        assert item.line >= 1
        if isinstance(item, Pause):
            assert 0 < item.seconds <= MAX_PAUSE_SECONDS
        else:
            assert item.text and item.text == normalised(item.text)
            assert not re.search(r"\[ ?pause ?:? ?[\d.]", item.text, re.IGNORECASE)


@PROPERTY_SETTINGS
@given(st.text())
def test_arbitrary_text_raises_nothing_but_script_error(text: str) -> None:
    script = parse_or_none(text)
    if script is not None:
        assert_well_formed(script)


@PROPERTY_SETTINGS
@given(any_script)
def test_every_successful_parse_is_well_formed(text: str) -> None:
    script = parse_or_none(text)
    if script is not None:
        assert_well_formed(script)


# --- warnings: accepted, but likely typos ----------------------------------------------------------------


def warnings_of(text: str) -> list[tuple[int, str]]:
    return [(warning.line, warning.message) for warning in script_warnings(text, parse_script(text))]


def test_an_untagged_line_joining_a_turn_is_pointed_out_once_per_turn() -> None:
    text = "Alice: Hi there.\nBob: Hello.\nand this goes on\nstill Bob here\nAlice: Bye.\nmore of Alice\n"
    assert [line for line, _ in warnings_of(text)] == [3, 6]
    line, message = warnings_of(text)[0]
    assert message.startswith("this line has no speaker tag, so it continues Bob's turn from line 2;")
    assert parse_script(text).turns[1].text == "Hello. and this goes on still Bob here"  # accepted as before


def test_a_note_read_as_a_speaker_is_pointed_out() -> None:
    text = "Alice: Hi.\nBob: Hello.\nNote: check the figures before we publish.\nAlice: Fine.\nBob: Bye.\n"
    ((line, message),) = warnings_of(text)
    assert line == 3 and message.startswith("'Note:' is read as a speaker named Note, who speaks only here;")
    assert [speaker.name for speaker in parse_script(text).speakers] == ["Alice", "Bob", "Note"]


def test_a_gap_in_speaker_numbers_is_pointed_out() -> None:
    text = "Speaker 1: Hi.\nSpeaker 2: Hello.\nSpeaker 5: Who am I?\nSpeaker 1: Bye.\n"
    assert warnings_of(text) == [
        (3, "Speaker 5 is a speaker of its own beside Speaker 1 and Speaker 2; if it is one of them, fix the number")
    ]
    assert warnings_of("Speaker 0: Hi.\nSpeaker 1: Hello.\n") == []  # numbered from 0 or from 1: both fine
    json_gap = '{"turns": [{"speaker": 1, "text": "Hi"},\n{"speaker": 3, "text": "Yo"}]}'
    assert [line for line, _ in warnings_of(json_gap)] == [2]


def test_tidy_scripts_have_no_warnings() -> None:
    assert warnings_of("Alice: Hi.\n[pause: 1s]\nBob: Hello.\n\nAlice: A name with a colon: fine.\n") == []
    assert warnings_of("[Alice] Hi.\n[Bob] Hello.\n") == []
    for path in sorted(EXAMPLES.glob("*.txt")):  # the real examples, when ../shared is there
        assert warnings_of(path.read_text(encoding="utf-8")) == [], path.name
