"""script_text.speech_text: every supported form read as words, pathological inputs in linear time, and
hypothesis properties (never raises, no digit survives, normalising twice changes nothing)."""

from __future__ import annotations

import re
import time
from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from script_text.parser import MAX_SCRIPT_CHARS
from script_text.speech_text import cardinal, normalize_for_speech, ordinal, year

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ASCII_DIGIT = re.compile(r"[0-9]")
# A linear pass over this much text takes a fraction of a second; a quadratic one would take hours.
HOSTILE_CHARS = 50_000


@pytest.mark.parametrize(
    ("number", "words"),
    [
        (0, "zero"),
        (7, "seven"),
        (13, "thirteen"),
        (40, "forty"),
        (42, "forty-two"),
        (100, "one hundred"),
        (101, "one hundred one"),
        (999, "nine hundred ninety-nine"),
        (1_000, "one thousand"),
        (1_000_001, "one million one"),
        (2_500_000_300, "two billion five hundred million three hundred"),
        (999_999_999_999_999, "nine hundred ninety-nine trillion nine hundred ninety-nine billion "
         "nine hundred ninety-nine million nine hundred ninety-nine thousand nine hundred ninety-nine"),
    ],
)  # fmt: skip
def test_cardinals(number: int, words: str) -> None:
    assert cardinal(number) == words


@pytest.mark.parametrize(
    ("number", "words"),
    [(1, "first"), (2, "second"), (3, "third"), (5, "fifth"), (8, "eighth"), (9, "ninth"), (12, "twelfth"),
     (20, "twentieth"), (21, "twenty-first"), (100, "one hundredth"), (1_000_003, "one million third")],
)  # fmt: skip
def test_ordinals(number: int, words: str) -> None:
    assert ordinal(number) == words


@pytest.mark.parametrize(
    ("number", "words"),
    [(1999, "nineteen ninety-nine"), (2025, "twenty twenty-five"), (1905, "nineteen oh five"),
     (1900, "nineteen hundred"), (2000, "two thousand"), (2008, "two thousand eight"), (2010, "twenty ten"),
     (1066, "ten sixty-six"), (999, "nine hundred ninety-nine")],
)  # fmt: skip
def test_years(number: int, words: str) -> None:
    assert year(number) == words


@pytest.mark.parametrize(
    ("text", "spoken"),
    [
        # numbers
        ("2,500 people", "two thousand five hundred people"),
        ("pi is 3.14", "pi is three point one four"),
        ("it was -5 outside", "it was minus five outside"),
        ("(−12)", "(minus twelve)"),
        ("0.5", "zero point five"),
        ("agent 007", "agent zero zero seven"),
        ("the 1st, 2nd, 3rd and 21st", "the first, second, third and twenty-first"),
        ("the 100th time", "the one hundredth time"),
        ("50% or 2.5 %", "fifty percent or two point five percent"),
        ("in the 1990s and the 80s", "in the nineteen nineties and the eighties"),
        ("5km, 10 GB, 100ms, 1 kg", "five kilometers, ten gigabytes, one hundred milliseconds, one kilogram"),
        ("30°C and 90°", "thirty degrees Celsius and ninety degrees"),
        ("2x faster", "two times faster"),
        ("a 1.5B model with 7M users", "a one point five billion model with seven million users"),
        ("GPT-4o and GPT4", "GPT-four o and GPT four"),
        ("version 1.2.3", "version one point two.three"),
        # years
        ("In 1999 and 2025.", "In nineteen ninety-nine and twenty twenty-five."),
        ("May 2025", "May twenty twenty-five"),
        ("2,025 votes", "two thousand twenty-five votes"),
        # dates
        ("on 2025-08-07", "on August seventh, twenty twenty-five"),
        ("on 7 Aug 2025", "on the seventh of August twenty twenty-five"),
        ("on the 7th August", "on the seventh of August"),
        ("Aug 7, 2025", "August seventh, twenty twenty-five"),
        ("Sept. 1st", "September first"),
        ("2025-13-45", "twenty twenty-five-thirteen-forty-five"),
        # times
        ("at 10:30", "at ten thirty"),
        ("at 9:05 pm", "at nine oh five p.m."),
        ("at 10am.", "at ten a.m."),
        ("at 5 P.M. Then", "at five p.m. Then"),
        ("at 14:00", "at fourteen hundred"),
        ("at 12:00", "at twelve o'clock"),
        ("at 1:02:03", "at one hour, two minutes and three seconds"),
        ("after 0:00:10", "after ten seconds"),
        # money
        ("$5", "five dollars"),
        ("$1", "one dollar"),
        ("$1.50", "one dollar and fifty cents"),
        ("$0.99", "ninety-nine cents"),
        ("$1.5M", "one point five million dollars"),
        ("$10k", "ten thousand dollars"),
        ("$2 billion", "two billion dollars"),
        ("$1,000,000", "one million dollars"),
        ("€20", "twenty euros"),
        ("£3.50", "three pounds and fifty pence"),
        ("£0.01", "one penny"),
        ("¥500", "five hundred yen"),
        ("US$5", "US five dollars"),
        ("20€", "twenty euros"),
        # fractions
        ("1/2 and 3/4 and 2/3", "one half and three quarters and two thirds"),
        ("24/7, 50/50, 9/11", "twenty-four seven, fifty fifty, nine eleven"),
        ("8/7/2025", "eight/seven/twenty twenty-five"),
        # abbreviations
        ("Dr. Smith vs. Mr. Jones", "Doctor Smith versus Mister Jones"),
        ("Mrs. Lee and Prof. Kim", "Missus Lee and Professor Kim"),
        ("fruit, e.g. apples", "fruit, for example apples"),
        ("E.g. this", "For example this"),
        ("fruit, i.e. apples", "fruit, that is apples"),
        ("apples, pears, etc., and more", "apples, pears, et cetera, and more"),
        ("apples, pears etc. The end", "apples, pears et cetera. The end"),
        ("apples etc.", "apples et cetera."),
        ("Acme Inc. is big", "Acme Incorporated is big"),
        ("cats vs dogs", "cats versus dogs"),
        ("No. 5 and #1", "number five and number one"),
        ("No. I said no.", "No. I said no."),
        # URLs and e-mail
        ("see https://www.example.com/path-to/page?x=1.", "see example dot com slash path dash to slash page."),
        ("go to example.org, now", "go to example dot org, now"),
        ("mail ann.lee@example.co.uk", "mail ann dot lee at example dot co dot uk"),
        ("write to bob_99@mail.io", "write to bob underscore ninety-nine at mail dot io"),
        # symbols
        ("R&D and AT&T", "R and D and AT and T"),
        ("C++, 1 + 1 = 2", "C plus plus, one plus one equals two"),
        ("@handle #hashtag", "at handle hashtag hashtag"),
        ("C# and F#", "C sharp and F sharp"),
        ("# of people", "number of people"),
        ("100 %", "one hundred percent"),
        # whitespace
        ("  many\t spaces  \n next line ", "many spaces\nnext line"),
        ("", ""),
        ("no numbers here.", "no numbers here."),
    ],
)
def test_spoken_forms(text: str, spoken: str) -> None:
    assert normalize_for_speech(text) == spoken


def test_a_very_long_number_is_read_digit_by_digit() -> None:
    digits = "1234567890" * 30
    words = normalize_for_speech(digits).split()
    assert len(words) == 300
    assert words[:3] == ["one", "two", "three"]
    assert words[9] == "zero"


def test_fifteen_digits_are_still_a_number_and_sixteen_are_not() -> None:
    assert normalize_for_speech("100000000000000") == "one hundred trillion"
    assert normalize_for_speech("1000000000000000") == "one " + " ".join(["zero"] * 15)


def test_brackets_and_nesting_pass_through() -> None:
    assert normalize_for_speech("[[[(5)]]] and {x}") == "[[[(five)]]] and {x}"
    nested = "[" * 1000 + "7" + "]" * 1000
    assert normalize_for_speech(nested) == "[" * 1000 + "seven" + "]" * 1000


HOSTILE_INPUTS = {
    "digits": "1" * HOSTILE_CHARS,
    "digits then suffix": "9" * HOSTILE_CHARS + "th",
    "comma groups": "1" + ",000" * (HOSTILE_CHARS // 4) + "1",
    "commas": "1," * (HOSTILE_CHARS // 2),
    "money": "$" + "1" * HOSTILE_CHARS,
    "repeated money": "$1," * (HOSTILE_CHARS // 3),
    "domain labels": "a." * (HOSTILE_CHARS // 2) + "x",
    "dashed labels": "a-" * (HOSTILE_CHARS // 2) + ".com",
    "url": "http://" + "a" * HOSTILE_CHARS,
    "schemes": "https://" * (HOSTILE_CHARS // 8),
    "www": "www." * (HOSTILE_CHARS // 4),
    "at signs": "a@" * (HOSTILE_CHARS // 2),
    "local part": "a" * HOSTILE_CHARS + "@",
    "brackets": "[" * (HOSTILE_CHARS // 2) + "]" * (HOSTILE_CHARS // 2),
    "clock": "1:" * (HOSTILE_CHARS // 2),
    "signs": "-1" * (HOSTILE_CHARS // 2),
    "abbreviations": "e.g." * (HOSTILE_CHARS // 4),
    "spaces after etc": "etc." + " " * HOSTILE_CHARS + "x",
    "slashes": "1/" * (HOSTILE_CHARS // 2),
    "months": "Aug 1" * (HOSTILE_CHARS // 5),
    "symbols": "&+=@%#" * (HOSTILE_CHARS // 6),
    "decimals": "1." * (HOSTILE_CHARS // 2),
}


@pytest.mark.parametrize("name", HOSTILE_INPUTS)
def test_hostile_input_is_normalised_in_linear_time(name: str) -> None:
    # ReDoS guard (the bound is generous; a backtracking pattern takes minutes on these, not seconds), on this
    # process's CPU time: what other processes on the machine take does not count.
    text = HOSTILE_INPUTS[name]
    started = time.process_time()
    spoken = normalize_for_speech(text)
    assert time.process_time() - started < 1.0
    assert not ASCII_DIGIT.search(spoken)


def test_a_script_sized_turn_is_fine() -> None:
    text = ("On 2025-08-07 Dr. Smith paid $1,234.56 for 3 tickets at 10:30 pm; see example.com. " * 3000)[
        :MAX_SCRIPT_CHARS
    ]
    spoken = normalize_for_speech(text)
    assert not ASCII_DIGIT.search(spoken)
    assert spoken.startswith("On August seventh, twenty twenty-five Doctor Smith paid one thousand two hundred")


# --- properties ---------------------------------------------------------------------------------

words = st.from_regex(r"[A-Za-z]{1,8}", fullmatch=True)
supported_forms = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.integers(0, 10**12).map(lambda number: f"{number:,}"),
    st.floats(-1e6, 1e6, allow_nan=False).map(lambda number: f"{number:.3f}"),
    st.integers(0, 10**4).map(lambda number: f"{number}%"),
    st.integers(1, 10**6).map(lambda number: f"{number}th"),
    st.integers(1, 199).map(lambda decade: f"{decade * 10}s"),
    st.dates(min_value=date(1000, 1, 1)).map(date.isoformat),
    st.dates().map(lambda day: day.strftime("%d %b %Y")),
    st.dates().map(lambda day: day.strftime("%B %d, %Y")),
    st.times().map(lambda moment: moment.strftime("%H:%M")),
    st.times().map(lambda moment: moment.strftime("%I:%M %p")),
    st.times().map(lambda moment: moment.strftime("%H:%M:%S")),
    st.tuples(
        st.sampled_from("$€£¥"),
        st.integers(0, 10**7),
        st.sampled_from(["", ".5", ".25", ".05"]),
        st.sampled_from(["", "M", "k", "bn", " million"]),
    ).map(lambda parts: f"{parts[0]}{parts[1]:,}{parts[2]}{parts[3]}"),
    st.tuples(st.integers(0, 999), st.integers(1, 999)).map(lambda parts: f"{parts[0]}/{parts[1]}"),
    st.tuples(st.integers(0, 999), st.sampled_from(["km", " km", "GB", " MB", "ms", "°C", "°", "x", "M", "B"])).map(
        lambda parts: f"{parts[0]}{parts[1]}"
    ),
    st.sampled_from(
        [
            "Dr. Smith",
            "Mr. Jones",
            "e.g.",
            "i.e.",
            "etc.",
            "vs.",
            "vs",
            "No. 7",
            "#1",
            "#tag",
            "C#",
            "R&D",
            "C++",
            "a + b = c",
            "@handle",
            "https://www.example.com/a-b/c_d?x=1#f",
            "www.example.org",
            "example.io/path",
            "ann.lee+tag@mail.example.co.uk",
            "Inc.",
            "approx.",
        ]
    ),  # fmt: skip
    words,
)
separators = st.sampled_from([" ", ", ", ". ", "; ", " (", ") ", "\n", " - ", ": ", "! ", "? "])
texts_of_supported_forms = st.lists(st.tuples(supported_forms, separators), max_size=12).map(
    lambda pieces: "".join(form + separator for form, separator in pieces)
)


@PROPERTY_SETTINGS
@given(texts_of_supported_forms)
def test_supported_forms_leave_no_digit_and_normalising_twice_changes_nothing(text: str) -> None:
    once = normalize_for_speech(text)
    assert not ASCII_DIGIT.search(once)
    assert normalize_for_speech(once) == once


@PROPERTY_SETTINGS
@given(st.text())
def test_any_text_is_normalised_without_error_or_digits(text: str) -> None:
    spoken = normalize_for_speech(text)
    assert not ASCII_DIGIT.search(spoken)
    assert spoken == spoken.strip()


@PROPERTY_SETTINGS
@given(st.text(alphabet="0123456789 .,:-/$€%&+=@#()[]abcxMB\n", max_size=60))
def test_symbol_and_digit_soup_is_idempotent(text: str) -> None:
    once = normalize_for_speech(text)
    assert not ASCII_DIGIT.search(once)
    assert normalize_for_speech(once) == once
