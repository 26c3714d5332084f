"""Spell out, in English words, what a TTS model would otherwise have to guess how to say.

VibeVoice reads text through its language model's tokenizer: "$1.5M", "2025-08-07", "10:30", "Dr." or
"example.com" come out unreliably, or mumbled. `normalize_for_speech` rewrites them as words before
generation, in a fixed order of passes (each pass sees the previous one's output):

1. URLs and e-mail addresses: "https://www.example.com/a-b" -> "example dot com slash a dash b"
   (scheme, "www.", query and fragment are dropped), "ann@example.com" -> "ann at example dot com".
2. Abbreviations: Dr. Mr. Mrs. Ms. Prof. Jr. Sr. Mt. Dept. Inc. Ltd. Corp. approx. etc. e.g. i.e. vs,
   "No." and "#" before a number ("number"). A period that also ends the sentence is kept.
3. Dates: 2025-08-07, 7 Aug 2025, 7th August, Aug 7, 2025 ("August seventh, twenty twenty-five").
4. Times: 10:30, 9:05 pm, 10am, 14:00 ("fourteen hundred"); h:mm:ss is read as a duration.
5. Money: $5, $1.50, $1.5M, $10k, EUR/GBP/JPY signs before the amount; cents and pence when there are
   exactly two decimals.
6. Fractions: 1/2, 3/4 ("three quarters") for proper fractions up to tenths; 24/7, 50/50, 9/11 are read
   as two numbers ("twenty-four seven").
7. Numbers: cardinals with thousands separators, decimals, negatives, ordinals (1st, 22nd), decades
   (1990s, 80s), percentages, a few units (km, kg, GB, ms, mph, degrees, x, M and B for million and
   billion), and four-digit numbers from 1100 to 2099 read as years ("nineteen ninety-nine"). Numbers
   longer than 15 digits, and numbers with a leading zero, are read digit by digit.
8. Symbols left over: & + = @ % # degree and currency signs ("C#" is "C sharp", "#tag" is "hashtag tag").
9. Whitespace: runs of spaces and tabs become one space; line breaks are kept.

Only ASCII digits are numbers here; every ASCII digit in the input comes out as words. English only.
Every regular expression is either anchored on a literal, bounded in length, or starts only at the
beginning of a run (a lookbehind), so the whole function is linear in the length of its input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CARDINAL_DIGITS = 15  # up to 999 trillion; longer digit strings are IDs or noise, read digit by digit

_SYMBOL_CHARS = "&+=@%°€£$¥#"  # spelled out by the last pass
_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_SCALES = ("", " thousand", " million", " billion", " trillion")
_IRREGULAR_ORDINALS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
    "twelve": "twelfth",
}  # fmt: skip
_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip


def normalize_for_speech(text: str) -> str:
    """The text with numbers, dates, times, money, abbreviations, URLs and symbols spelled out in words.

    Meant for the text of one turn (`Turn.text`), not a whole script: speaker tags and pause tags would be
    read too. Never raises; deterministic; linear time; no ASCII digit survives; idempotent on text made of
    words, punctuation and the forms above (normalising the result again changes nothing).
    """
    for pattern, read in _PASSES:
        text = pattern.sub(read, text)
    return _tidy_whitespace(text)


def has_words_to_say(text: str) -> bool:
    """Whether `normalize_for_speech(text)` holds a letter or a number (`str.isalnum`): something to say aloud.

    Answered in one pass without normalising, so checking every turn of a script stays cheap: the passes only
    replace what they read with words, so a letter or number never vanishes, and text without one can gain
    words only from the symbol pass, which reads each of its symbols ("%", "$", "#", ...) as a word.
    """
    return any(char.isalnum() or char in _SYMBOL_CHARS for char in text)


# --- number words ---------------------------------------------------------------------


def cardinal(number: int) -> str:
    """American English words for 0 <= number < 10**15: 123 -> "one hundred twenty-three"."""
    if number < 20:
        return _ONES[number]
    groups = []
    for scale in _SCALES:
        number, group = divmod(number, 1000)
        if group:
            groups.append(_below_thousand(group) + scale)
    return " ".join(reversed(groups))


def _below_thousand(number: int) -> str:
    hundreds, rest = divmod(number, 100)
    words = [f"{_ONES[hundreds]} hundred"] if hundreds else []
    if rest:
        words.append(_below_hundred(rest))
    return " ".join(words)


def _below_hundred(number: int) -> str:
    if number < 20:
        return _ONES[number]
    tens, ones = divmod(number, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


def ordinal(number: int) -> str:
    """Ordinal words for 0 <= number < 10**15: 21 -> "twenty-first", 100 -> "one hundredth"."""
    words = cardinal(number)
    cut = max(words.rfind(" "), words.rfind("-")) + 1
    head, last = words[:cut], words[cut:]
    if last in _IRREGULAR_ORDINALS:
        return head + _IRREGULAR_ORDINALS[last]
    if last.endswith("y"):
        return head + last[:-1] + "ieth"
    return head + last + "th"


def year(number: int) -> str:
    """A year as people say it: 1999 "nineteen ninety-nine", 1905 "nineteen oh five", 2008 "two thousand
    eight", 2025 "twenty twenty-five", 1900 "nineteen hundred". Outside 1000..9999, a cardinal."""
    century, rest = divmod(number, 100)
    if not 1000 <= number <= 9999 or number % 1000 == 0 or 2001 <= number <= 2009:
        return cardinal(number)
    if rest == 0:
        return f"{cardinal(century)} hundred"
    if rest < 10:
        return f"{cardinal(century)} oh {_ONES[rest]}"
    return f"{cardinal(century)} {cardinal(rest)}"


def _digit_words(digits: str) -> str:
    """ "0042" -> "zero zero four two": for IDs, leading zeros and anything too long to say as a number."""
    return " ".join(_ONES[int(digit)] for digit in digits)


def _is_sayable(digits: str) -> bool:
    """Whether a digit string is read as one number rather than digit by digit."""
    return len(digits) <= MAX_CARDINAL_DIGITS and (len(digits) == 1 or digits[0] != "0")


def _integer_words(digits: str) -> str:
    return cardinal(int(digits)) if _is_sayable(digits) else _digit_words(digits)


def _decimal_words(digits: str, fraction: str | None) -> str:
    """ "3" + ".14" -> "three point one four"; `fraction` includes its point."""
    words = _integer_words(digits)
    return f"{words} point {_digit_words(fraction[1:])}" if fraction else words


def _plural(words: str) -> str:
    """ "ninety" -> "nineties", "six" -> "sixes", "hundred" -> "hundreds"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + ("es" if words.endswith("x") else "s")


def _padded(match: re.Match[str], words: str) -> str:
    """`words` with a space on each side where they would otherwise run into a neighbouring word or number
    ("GPT4o" -> "GPT four o", "etc..com" -> "et cetera .com", never the domain "cetera.com")."""
    source, start, end = match.string, match.start(), match.end()
    before = source[start - 1] if start > 0 else ""
    after = source[end : end + 1]
    space_after = words[-1:].isalnum() and _joins(after, source[end + 1 : end + 2])  # "et cetera.Then" needs none
    return (" " if _joins(before) else "") + words + (" " if space_after else "")


def _joins(neighbour: str, beyond: str = "") -> bool:
    """Whether spelled-out words need a space before this neighbour: a letter, a digit, a symbol that becomes
    a word too, or a period running on into a word."""
    return (
        neighbour.isalnum()
        or (neighbour != "" and neighbour in _SYMBOL_CHARS)
        or (neighbour == "." and beyond.isalpha())
    )


# --- 1. URLs and e-mail addresses ---------------------------------------------------------

# Patterns that need no digit look behind them for a letter only: digits (and symbols) become words padded
# with spaces in later passes, so a letter/non-letter test gives the same answer when the output is
# normalised again, and normalising stays idempotent.
_NOT_AFTER_A_LETTER = r"(?<![^\W\d_])"

_URL_CHARS = r"[^\s<>\"'()\[\]{}]"
_TLDS = "com|org|net|edu|gov|io|ai|dev|app|co|fm|tv|info|uk"
_URL = re.compile(
    rf"{_NOT_AFTER_A_LETTER}(?i:https?://|www\.){_URL_CHARS}{{1,2000}}"
    # A bare domain needs a common top-level domain in lower case ("it.Info" is a typo, not a site). It
    # starts only at the beginning of a run of labels, so a failed attempt costs a few bounded labels.
    rf"|{_NOT_AFTER_A_LETTER}(?<![.-])(?:[A-Za-z0-9-]{{1,63}}\.){{1,6}}(?:{_TLDS})(?![^\W\d]|-|\.[A-Za-z0-9])"
    rf"(?:/{_URL_CHARS}{{0,2000}})?"
)
_EMAIL = re.compile(
    rf"{_NOT_AFTER_A_LETTER}[A-Za-z0-9._%+-]{{1,64}}@[A-Za-z0-9-]{{1,63}}(?:\.[A-Za-z0-9-]{{1,63}}){{1,6}}"
)
_SPOKEN_URL_SYMBOLS = {
    ".": " dot ", "/": " slash ", "-": " dash ", "_": " underscore ", "~": " tilde ", ":": " colon ",
    "+": " plus ", "@": " at ",
}  # fmt: skip
_TRAILING_PUNCTUATION = ".,;:!?"


def _spell_address_part(part: str) -> str:
    return "".join(_SPOKEN_URL_SYMBOLS.get(char, char if char.isalnum() else " ") for char in part)


def _read_url(match: re.Match[str]) -> str:
    """ "https://www.example.com/a-b?q=1." -> "example dot com slash a dash b." (query and fragment dropped)."""
    url = match[0].rstrip(_TRAILING_PUNCTUATION)
    trailing = match[0][len(url) :]
    address = url.split("://", 1)[-1]
    if address[:4].lower() == "www.":
        address = address[4:]
    address = address.split("?", 1)[0].split("#", 1)[0].rstrip("/")
    return _padded(match, _spell_address_part(address) + trailing)


def _read_email(match: re.Match[str]) -> str:
    return _padded(match, _spell_address_part(match[0]))


# --- 2. abbreviations ----------------------------------------------------------------------

_TITLES = {"Dr": "Doctor", "Mr": "Mister", "Mrs": "Missus", "Ms": "Miz", "Prof": "Professor", "Mt": "Mount"}
_DOTTED = {
    "jr": "Junior", "sr": "Senior", "dept": "Department", "inc": "Incorporated", "ltd": "Limited",
    "corp": "Corporation", "approx": "approximately", "etc": "et cetera", "vs": "versus", "e.g": "for example",
    "i.e": "that is",
}  # fmt: skip
_MAY_END_A_SENTENCE = {"jr", "sr", "inc", "ltd", "corp", "etc"}  # their period may double as a full stop
_ABBREVIATION = re.compile(
    rf"{_NOT_AFTER_A_LETTER}(?P<title>Mrs|Mr|Ms|Dr|Prof|Mt)\."
    rf"|{_NOT_AFTER_A_LETTER}(?P<dotted>(?i:Jr|Sr|Dept|Inc|Ltd|Corp|approx|etc|vs)\.|(?i:e\.g|i\.e)\.?)"
    rf"|{_NOT_AFTER_A_LETTER}(?P<versus>(?i:vs))(?![^\W\d_])"
    r"|(?P<number>(?<![^\W\d_])No\. ?|#)(?=[0-9])"
)
_SENTENCE_GOES_ON = re.compile(r"[ \t]*[^A-Z\n \t]")  # after "etc.": anything but the end, a line end or a capital


def _read_abbreviation(match: re.Match[str]) -> str:
    if match["title"]:
        return _padded(match, _TITLES[match["title"]])
    if match["number"]:
        return _padded(match, "number")
    written = match["dotted"] or match["versus"]
    key = written.rstrip(".").lower()
    words = _DOTTED[key]
    if written[0].isupper():
        words = words[0].upper() + words[1:]
    ends_sentence = (
        key in _MAY_END_A_SENTENCE and written.endswith(".") and not _SENTENCE_GOES_ON.match(match.string, match.end())
    )
    return _padded(match, words + "." if ends_sentence else words)


# --- 3. dates ----------------------------------------------------------------------------------

_MONTH_NAMES = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December)\b"
    r"|(?:Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\b\.?"
)


def _day(group: str) -> str:
    return rf"(?P<{group}>[0-9]{{1,2}})(?:st|nd|rd|th)?(?![0-9])"


def _month(group: str) -> str:
    return rf"(?P<{group}>{_MONTH_NAMES})"


def _year(group: str) -> str:
    return rf"(?P<{group}>[0-9]{{4}})(?![0-9])"


_DATE = re.compile(
    r"(?<![0-9-])(?P<iso>[0-9]{4})-(?P<iso_month>[0-9]{2})-(?P<iso_day>[0-9]{2})(?![0-9])"
    rf"|(?<![0-9]){_day('dm_day')} {_month('dm_month')}(?:,? {_year('dm_year')})?"
    rf"|\b{_month('month')} {_day('day')}(?:,? {_year('year')})?"
)


def _month_number(name: str) -> int:
    return next(index for index, month in enumerate(_MONTHS, start=1) if month[:3] == name[:3])


def _read_date(match: re.Match[str]) -> str:
    month, day, year_digits, day_first = _date_parts(match)
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return match[0]  # not a date after all; the number pass reads its parts
    said_year = "" if year_digits is None else year(int(year_digits))
    if day_first:
        the = "" if match.string[max(0, match.start() - 4) : match.start()].lower() == "the " else "the "
        words = f"{the}{ordinal(day)} of {_MONTHS[month - 1]}" + (f" {said_year}" if said_year else "")
    else:
        words = f"{_MONTHS[month - 1]} {ordinal(day)}" + (f", {said_year}" if said_year else "")
    return _padded(match, words)


def _date_parts(match: re.Match[str]) -> tuple[int, int, str | None, bool]:
    """Month, day, year digits (if given) and whether the date was written day first."""
    if match["iso"]:
        return int(match["iso_month"]), int(match["iso_day"]), match["iso"], False
    if match["dm_day"]:
        return _month_number(match["dm_month"]), int(match["dm_day"]), match["dm_year"], True
    return _month_number(match["month"]), int(match["day"]), match["year"], False


# --- 4. times ----------------------------------------------------------------------------------


def _meridiem(group: str) -> str:
    return rf"(?P<{group}>(?i:[ap])\.?(?i:m)\b\.?)"


_TIME = re.compile(
    r"(?<![0-9:.])(?P<hour>[01]?[0-9]|2[0-3]):(?P<minute>[0-5][0-9])(?::(?P<second>[0-5][0-9]))?(?![0-9]|:[0-9])"
    rf"(?: ?{_meridiem('meridiem')})?"
    rf"|(?<![0-9:.])(?P<bare_hour>1[0-2]|0?[1-9]) ?{_meridiem('bare_meridiem')}"
)


def _read_time(match: re.Match[str]) -> str:
    meridiem = match["meridiem"] or match["bare_meridiem"]
    suffix = f" {meridiem[0].lower()}.m." if meridiem else ""
    if match["bare_hour"]:
        return _padded(match, cardinal(int(match["bare_hour"])) + suffix)
    hour, minute = int(match["hour"]), int(match["minute"])
    if match["second"]:
        return _padded(match, _duration(hour, minute, int(match["second"])) + suffix)
    if minute == 0:
        if meridiem:
            words = cardinal(hour)
        else:
            words = f"{cardinal(hour)} o'clock" if 1 <= hour <= 12 else f"{cardinal(hour)} hundred"
    elif minute < 10:
        words = f"{cardinal(hour)} oh {cardinal(minute)}"
    else:
        words = f"{cardinal(hour)} {cardinal(minute)}"
    return _padded(match, words + suffix)


def _duration(hours: int, minutes: int, seconds: int) -> str:
    """ "1:02:03" -> "one hour, two minutes and three seconds"; zero parts are left out."""
    parts = [
        f"{cardinal(amount)} {unit}{'' if amount == 1 else 's'}"
        for amount, unit in ((hours, "hour"), (minutes, "minute"), (seconds, "second"))
        if amount
    ]
    if not parts:
        return "zero seconds"
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# --- 5. money ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Currency:
    one: str
    many: str
    cent: str | None  # a hundredth, when the currency has one people name
    cents: str | None


_CURRENCIES = {
    "$": _Currency("dollar", "dollars", "cent", "cents"),
    "€": _Currency("euro", "euros", "cent", "cents"),
    "£": _Currency("pound", "pounds", "penny", "pence"),
    "¥": _Currency("yen", "yen", None, None),
}
_SCALE_WORDS = {"k": "thousand", "m": "million", "b": "billion", "bn": "billion", "t": "trillion", "tn": "trillion"}
_AMOUNT = r"(?P<int>[0-9]{1,3}(?:,[0-9]{3})+(?![0-9])|[0-9]+)(?P<frac>\.[0-9]+)?"
_MONEY = re.compile(
    rf"(?P<symbol>[$€£¥]){_AMOUNT}"
    r"(?P<scale> (?:thousand|million|billion|trillion)\b|(?:bn|tn|[kKmMbBtT])(?![^\W\d_]))?"
)


def _read_money(match: re.Match[str]) -> str:
    currency = _CURRENCIES[match["symbol"]]
    digits, fraction, scale = match["int"].replace(",", ""), match["frac"], match["scale"]
    if scale:
        scale_word = _SCALE_WORDS.get(scale.lower(), scale.strip())
        return _padded(match, f"{_decimal_words(digits, fraction)} {scale_word} {currency.many}")
    if fraction and len(fraction) == 3 and currency.cent:
        return _padded(match, _units_and_cents(digits, int(fraction[1:]), currency))
    unit = currency.one if digits == "1" and not fraction else currency.many
    return _padded(match, f"{_decimal_words(digits, fraction)} {unit}")


def _units_and_cents(digits: str, cents: int, currency: _Currency) -> str:
    """ "5", 25 -> "five dollars and twenty-five cents"; no units or no cents are left out."""
    cent_words = f"{cardinal(cents)} {currency.cent if cents == 1 else currency.cents}"
    if _is_sayable(digits) and int(digits) == 0:
        return cent_words
    unit_words = f"{_integer_words(digits)} {currency.one if digits == '1' else currency.many}"
    return unit_words if cents == 0 else f"{unit_words} and {cent_words}"


# --- 6. fractions --------------------------------------------------------------------------------

_FRACTION = re.compile(r"(?<![0-9/.])(?P<num>[0-9]{1,3})/(?P<den>[0-9]{1,3})(?![0-9]|/[0-9])")
_DENOMINATORS = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def _read_fraction(match: re.Match[str]) -> str:
    numerator, denominator = int(match["num"]), int(match["den"])
    if 0 < numerator < denominator <= 10:
        one, many = _DENOMINATORS.get(denominator, (ordinal(denominator), ordinal(denominator) + "s"))
        return _padded(match, f"{cardinal(numerator)} {one if numerator == 1 else many}")
    return _padded(match, f"{_integer_words(match['num'])} {_integer_words(match['den'])}")


# --- 7. numbers ----------------------------------------------------------------------------------

_UNITS = {
    "km/h": "kilometer per hour", "km": "kilometer", "kg": "kilogram", "cm": "centimeter", "mm": "millimeter",
    "mph": "mile per hour", "GB": "gigabyte", "MB": "megabyte", "TB": "terabyte", "KB": "kilobyte",
    "kB": "kilobyte", "GHz": "gigahertz", "MHz": "megahertz", "kHz": "kilohertz", "Hz": "hertz",
    "ms": "millisecond", "°C": "degree Celsius", "°F": "degree Fahrenheit", "°": "degree", "M": "million",
    "B": "billion", "bn": "billion", "x": "times",
}  # fmt: skip
_UNIT_PLURALS = {
    "mile per hour": "miles per hour", "kilometer per hour": "kilometers per hour", "hertz": "hertz",
    "degree Celsius": "degrees Celsius", "degree Fahrenheit": "degrees Fahrenheit", "million": "million",
    "billion": "billion", "times": "times",
}  # fmt: skip
_SPACED_UNITS = "km/h|km|kg|cm|mm|mph|GB|MB|TB|KB|kB|GHz|MHz|kHz|Hz|ms|°C|°F"
_NUMBER = re.compile(
    r"(?P<sign>(?<![\w.,])[-−](?=[0-9]))?"
    rf"(?<![0-9]){_AMOUNT}"
    r"(?:(?P<ordinal>(?i:st|nd|rd|th))(?![^\W\d_])"
    r"|(?P<plural>s)(?![^\W\d_])"
    r"|(?P<percent> ?%)"
    rf"|(?P<unit> ?(?:{_SPACED_UNITS})|°|M|B|bn|x)(?![^\W\d_]))?"
)


def _read_number(match: re.Match[str]) -> str:
    digits, fraction = match["int"].replace(",", ""), match["frac"]
    words = "minus " if match["sign"] else ""
    if fraction:
        words += _decimal_words(digits, fraction)
    elif match["ordinal"]:
        return _padded(match, words + _ordinal_words(digits))
    elif match["plural"]:
        return _padded(match, words + _plural(_plain_integer_words(match, digits)))
    else:
        words += _plain_integer_words(match, digits)
    if match["percent"]:
        words += " percent"
    elif match["unit"]:
        unit = _UNITS[match["unit"].strip()]
        words += " " + (unit if digits == "1" and not fraction else _UNIT_PLURALS.get(unit, unit + "s"))
    elif match["ordinal"] or match["plural"]:  # after a decimal: "1.5th" is not a word, keep the letters
        words += " " + (match["ordinal"] or match["plural"])
    return _padded(match, words)


def _ordinal_words(digits: str) -> str:
    """ "21" -> "twenty-first"; too long to say as a number: digit by digit."""
    return ordinal(int(digits)) if len(digits) <= MAX_CARDINAL_DIGITS else _digit_words(digits)


def _plain_integer_words(match: re.Match[str], digits: str) -> str:
    """A whole number without a unit: a year when it looks like one (four plain digits, 1100 to 2099)."""
    looks_like_year = (
        len(match["int"]) == 4
        and not match["sign"]
        and not (match["percent"] or match["unit"] or match["ordinal"])
        and 1100 <= int(digits) <= 2099
    )
    return year(int(digits)) if looks_like_year else _integer_words(digits)


# --- 8. symbols ----------------------------------------------------------------------------------

_SYMBOL = re.compile(f"[{re.escape(_SYMBOL_CHARS)}]")
_SYMBOL_WORDS = {
    "&": "and", "+": "plus", "=": "equals", "@": "at", "%": "percent", "°": "degrees", "€": "euros",
    "£": "pounds", "$": "dollars", "¥": "yen",
}  # fmt: skip
_MUSICAL_NOTES = "ABCDEFG"


def _read_symbol(match: re.Match[str]) -> str:
    symbol, source, start, end = match[0], match.string, match.start(), match.end()
    before = source[start - 1] if start > 0 else ""
    after = source[end] if end < len(source) else ""
    if symbol != "#":
        words = _SYMBOL_WORDS[symbol]
    elif before and before in _MUSICAL_NOTES and not (after.isalnum() or after == "_"):
        words = "sharp"  # C#, F#
    else:
        words = "hashtag" if after.isalpha() else "number"
    return _padded(match, words)


# --- 9. whitespace -------------------------------------------------------------------------------

_SPACES = re.compile(r"[^\S\n]+")
_SPACE_AROUND_NEWLINE = re.compile(r" ?\n ?")


def _tidy_whitespace(text: str) -> str:
    """Runs of horizontal whitespace become one space, and none is left at the ends of lines; line breaks stay."""
    return _SPACE_AROUND_NEWLINE.sub("\n", _SPACES.sub(" ", text)).strip()


_PASSES = (
    (_EMAIL, _read_email),
    (_URL, _read_url),
    (_ABBREVIATION, _read_abbreviation),
    (_DATE, _read_date),
    (_TIME, _read_time),
    (_MONEY, _read_money),
    (_FRACTION, _read_fraction),
    (_NUMBER, _read_number),
    (_SYMBOL, _read_symbol),
)
