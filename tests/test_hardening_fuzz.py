"""Property-based fuzzing of what hostile input reaches first: the script parser, the upload validator, and the
api's pure helpers (Range cleaning, upload names, body limits). Pure Python, no service: every property says
what must hold for any input, and that it holds quickly."""

from __future__ import annotations

import io
import json
import math
import re
import tempfile
import time
import unicodedata
from pathlib import Path

import numpy as np
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.body_limits import FORM_OVERHEAD_BYTES, SMALL_BODY_BYTES, body_limit
from api.downloads import MAX_RANGES, usable_range
from api.services.voices import upload_name
from core.audio_rates import SAMPLE_RATE
from core.byte_sizes import byte_size
from core.settings import Settings
from script_text.parser import MAX_PAUSE_SECONDS, MAX_SCRIPT_CHARS, Pause, ScriptError, parse_script
from tests.hardening import wav_bytes
from tests.synthetic_audio import voice_like
from tokenizer.voice_prompt import MAX_SECONDS, MIN_SECONDS, VoicePromptError, load_voice_prompt

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW_FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200d\u202a-\u202e\u2060\u2066-\u2069\ufeff]")


def parse_or_error(text: str) -> tuple[object, float]:
    """The parse (a Script or the ScriptError) and the CPU time it took (this process's: the machine's other work
    does not count); anything else raised fails the property."""
    started = time.process_time()
    try:
        result: object = parse_script(text)
    except ScriptError as error:
        assert str(error) and (error.line is None or error.line >= 1)
        result = error
    return result, time.process_time() - started


# --- the script parser -----------------------------------------------------------------------------------

numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.text("0123456789.-+eE", max_size=30),
    st.sampled_from(["NaN", "inf", "1e309", "." * 5, "0" * 400 + "1", "9" * 400, "1_000", "\u0661", "\uff11"]),
)
pause_tags = st.builds(
    lambda opening, separator, number, space, unit, closing: f"{opening}{separator}{number}{space}{unit}{closing}",
    st.sampled_from(["[pause", "[PAUSE", "[ pause", "[Pause"]),
    st.sampled_from([":", ": ", " ", "", "::", ":\t"]),
    numbers,
    st.sampled_from(["", " ", "  "]),
    st.sampled_from(["s", "ms", "S", "MS", "sec", "h", "", "µs"]),
    st.sampled_from(["]", " ]", "", "]]"]),
)


@FUZZ
@given(tags=st.lists(pause_tags, min_size=1, max_size=4), inline=st.booleans())
def test_any_pause_tag_is_a_pause_in_range_or_a_script_error(tags: list[str], inline: bool) -> None:
    joiner = " words " if inline else "\n"
    result, _ = parse_or_error("Alice: hello" + joiner + joiner.join(tags) + joiner + "Bob: bye")
    if not isinstance(result, ScriptError):
        pauses = [item.seconds for item in result.items if isinstance(item, Pause)]  # type: ignore[attr-defined]
        assert all(0 < seconds <= MAX_PAUSE_SECONDS and math.isfinite(seconds) for seconds in pauses)


hidden_characters = st.sampled_from(
    [chr(code) for code in [*range(0x00, 0x20), *range(0x7F, 0xA0)]]
    + ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u2028", "\u2029", "\u00a0", "\u3000"]
    + [chr(code) for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]]
)
visible_words = st.sampled_from(["hello", "café", "\u4f60\u597d", "\U0001f399", "e\u0301", "Bob:", "[x]", "-"])


@FUZZ
@given(pieces=st.lists(hidden_characters | visible_words, max_size=60))
def test_control_and_invisible_characters_never_reach_a_turn(pieces: list[str]) -> None:
    result, _ = parse_or_error("Alice: " + " ".join(pieces))
    if not isinstance(result, ScriptError):
        for turn in result.turns:  # type: ignore[attr-defined]
            assert turn.text and not HIDDEN.search(turn.text), repr(turn.text)


# Fragments whose repetition is what makes a careless regular expression backtrack.
BACKTRACKING_FRAGMENTS = [
    "[", "]", ":", " ", "a", "Speaker ", "[pause", "[pause:", "[pause: 1", "1", ".", "s", "ms", "\n",
    "Alice", "Alice:", "[Alice", "\u200b", "{", '"turns"', "\t", "-",
]  # fmt: skip


@SLOW_FUZZ
@given(fragments=st.lists(st.sampled_from(BACKTRACKING_FRAGMENTS), min_size=1, max_size=4), prefix=st.booleans())
def test_the_parser_stays_linear_on_long_repetitions(fragments: list[str], prefix: bool) -> None:
    unit = "".join(fragments)
    text = ("Speaker 1: " if prefix else "") + unit * ((MAX_SCRIPT_CHARS - 11) // len(unit))
    assert len(text) <= MAX_SCRIPT_CHARS
    _, seconds = parse_or_error(text)
    assert seconds < 1.5, (unit, seconds)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)
json_items = json_values | st.fixed_dictionaries(
    {}, optional={"speaker": json_values, "text": json_values, "pause": json_values}
)


@FUZZ
@given(
    turns=json_values | st.lists(json_items, max_size=8),
    extra=st.dictionaries(st.text(max_size=8), json_values, max_size=3),
)
def test_any_json_document_is_a_script_or_a_script_error(turns: object, extra: dict) -> None:
    document = json.dumps({**extra, "turns": turns}, allow_nan=True)
    result, _ = parse_or_error(document)
    if not isinstance(result, ScriptError):
        assert 1 <= len(result.speakers) <= 4  # type: ignore[attr-defined]


@FUZZ
@given(depth=st.integers(1, 200_000), opener=st.sampled_from(["[", '{"a":', '{"turns":[']))
def test_deeply_nested_json_is_a_script_error(depth: int, opener: str) -> None:
    text = '{"turns": ' + opener * min(depth, (MAX_SCRIPT_CHARS - 20) // len(opener))
    result, seconds = parse_or_error(text)
    assert isinstance(result, ScriptError) and seconds < 1.5


# --- the upload validator ----------------------------------------------------------------------------------


def _wav(seconds: float = 4.0, rate: int = 16_000) -> bytes:
    return wav_bytes((voice_like(seconds, rate) * 20_000).astype("<i2").tobytes(), rate=rate)


def _encoded(audio_format: str, seconds: float = 4.0) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, voice_like(seconds, 16_000), 16_000, format=audio_format)
    return buffer.getvalue()


VALID_FILES = {"wav": _wav(), "flac": _encoded("FLAC"), "ogg": _encoded("OGG")}


def load_or_refuse(data: bytes, suffix: str) -> tuple[object, float]:
    """The prompt or the VoicePromptError for `data` as a file, and the CPU time it took; nothing else may escape."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"upload{suffix}"
        path.write_bytes(data)
        started = time.process_time()
        try:
            result: object = load_voice_prompt(path)
        except VoicePromptError as error:
            assert str(path) in str(error), str(error)  # every refusal names the file
            result = error
        return result, time.process_time() - started


def assert_usable(prompt: object) -> None:
    samples = prompt.samples  # type: ignore[attr-defined]
    assert samples.dtype == np.float32 and samples.ndim == 1 and np.all(np.isfinite(samples))
    assert MIN_SECONDS - 0.01 <= len(samples) / SAMPLE_RATE <= MAX_SECONDS + 0.01
    assert np.max(np.abs(samples)) <= 1.0


@SLOW_FUZZ
@given(
    channels=st.integers(0, 0xFFFF),
    rate=st.integers(0, 0xFFFFFFFF),
    bits=st.sampled_from([0, 1, 7, 8, 12, 16, 24, 32, 64, 0xFFFF]),
    data_size=st.integers(0, 0xFFFFFFFF),
    float_format=st.booleans(),
)
def test_any_wav_header_over_real_samples_is_a_prompt_or_a_refusal(
    channels: int, rate: int, bits: int, data_size: int, float_format: bool
) -> None:
    samples = (voice_like(4.0, 16_000) * 20_000).astype("<i2").tobytes()
    lying = wav_bytes(samples, channels=channels, rate=rate, bits=bits, data_size=data_size, float_format=float_format)
    result, seconds = load_or_refuse(lying, ".wav")
    assert seconds < 3
    if not isinstance(result, VoicePromptError):
        assert_usable(result)


@SLOW_FUZZ
@given(
    kind=st.sampled_from(sorted(VALID_FILES)),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=8)), max_size=6),
    cut=st.none() | st.integers(0, 10**6),
    suffix=st.sampled_from([".wav", ".flac", ".ogg", ".mp3", "", ".txt"]),
)
def test_corrupted_files_are_a_prompt_or_a_refusal(
    kind: str, edits: list[tuple[int, bytes]], cut: int | None, suffix: str
) -> None:
    data = bytearray(VALID_FILES[kind])
    for offset, replacement in edits:
        position = offset % len(data)
        data[position : position + len(replacement)] = replacement
    result, seconds = load_or_refuse(bytes(data[:cut]), suffix)
    assert seconds < 3
    if not isinstance(result, VoicePromptError):
        assert_usable(result)


@FUZZ
@given(data=st.binary(max_size=4096), suffix=st.sampled_from([".wav", ".mp3", ".flac", ".ogg", ""]))
def test_arbitrary_bytes_are_refused_as_not_audio(data: bytes, suffix: str) -> None:
    result, _ = load_or_refuse(data, suffix)
    assert isinstance(result, VoicePromptError)


# --- the api's pure helpers --------------------------------------------------------------------------------

range_specs = st.one_of(
    st.builds("{}-{}".format, st.integers(0, 10**6), st.integers(0, 10**6)),
    st.builds("{}-".format, st.integers(0, 10**6)),
    st.builds("-{}".format, st.integers(0, 10**6)),
    st.text(max_size=12),
)


@FUZZ
@given(
    unit=st.sampled_from(["bytes", "BYTES", " bytes ", "items", ""]),
    specs=st.lists(range_specs, max_size=20),
    size=st.integers(1, 10**6),
    raw=st.none() | st.text(max_size=80),
)
def test_a_cleaned_range_is_none_or_a_well_formed_byte_range_set(
    unit: str, specs: list[str], size: int, raw: str | None
) -> None:
    header = raw if raw is not None else f"{unit}={','.join(specs)}"
    usable = usable_range(header, size)
    if usable is None:
        return
    assert usable.startswith("bytes=")
    kept = usable.removeprefix("bytes=").split(",")
    assert 1 <= len(kept) <= MAX_RANGES
    parsed = [re.fullmatch(r"(\d*)-(\d*)", spec) for spec in kept]
    assert all(match and match[0] != "-" for match in parsed), usable
    satisfiable = [
        match for match in parsed if (match[1] and int(match[1]) < size) or (not match[1] and int(match[2] or 0) > 0)
    ]
    assert len(satisfiable) in (0, len(kept)), usable  # either all kept ranges can be served, or none (a 416)
    assert usable_range(usable, size) == usable  # cleaning is idempotent


@FUZZ
@given(name=st.none() | st.text(max_size=300), field=st.sampled_from(["file", "voices.Alice"]))
def test_upload_names_are_short_printable_base_names(name: str | None, field: str) -> None:
    shown = upload_name(name, field)
    assert shown and len(shown) <= 80
    assert "/" not in shown and "\\" not in shown
    assert not any(unicodedata.category(char) in ("Cc", "Cf") for char in shown)


def test_body_limits_follow_the_upload_and_script_settings() -> None:
    settings_ = Settings(max_upload_bytes=1024 * 1024, max_script_chars=1000)
    voice = body_limit(settings_, "POST", "/v1/voices")
    job = body_limit(settings_, "POST", "/v1/jobs/")
    assert voice.max_bytes == 1024 * 1024 + FORM_OVERHEAD_BYTES and "VOXCAST_MAX_UPLOAD_BYTES" in voice.rule
    assert job.max_bytes == 4 * (1024 * 1024 + FORM_OVERHEAD_BYTES) + 12 * 1000 + FORM_OVERHEAD_BYTES
    assert body_limit(settings_, "POST", "/v1/audio/speech").max_bytes == SMALL_BODY_BYTES
    assert body_limit(settings_, "GET", "/v1/voices").max_bytes == SMALL_BODY_BYTES
    assert body_limit(settings_, "POST", "/studio/upload").max_bytes == job.max_bytes
    assert [byte_size(size) for size in (900, 64 * 1024, 1536 * 1024, 3 << 30)] == [
        "900 bytes",
        "64 KiB",
        "1.5 MiB",
        "3 GiB",
    ]


def test_a_flac_that_does_not_say_its_length_is_decoded_only_as_far_as_it_is_used(tmp_path: Path) -> None:
    """Three hours at a constant level compress to almost nothing; only the first MAX_SECONDS are decoded."""
    from tests.hardening import flac_without_length

    buffer = io.BytesIO()
    with sf.SoundFile(buffer, "w", 8000, 1, format="FLAC") as flac:
        for _ in range(180):
            flac.write(np.full(8000 * 60, 3000, dtype=np.int16))
    path = tmp_path / "stream.flac"
    path.write_bytes(flac_without_length(buffer.getvalue()))
    assert len(path.read_bytes()) < 2 * 1024 * 1024 and sf.info(path).frames == 2**63 - 1
    started = time.process_time()
    prompt = load_voice_prompt(path)
    assert time.process_time() - started < 2
    assert prompt.trimmed and len(prompt.samples) == MAX_SECONDS * SAMPLE_RATE


def test_a_wav_header_claiming_1024_channels_is_read_in_bounded_blocks(tmp_path: Path) -> None:
    """Memory per block is the same for 1 or 1,024 channels: blocks are counted in samples, not frames."""
    import tracemalloc

    frames = 48_000  # a second at 48 kHz x 1,024 channels of 8-bit noise: 188 MiB of float32 if read at once
    data = np.random.default_rng(0).integers(0, 255, frames * 1024, dtype=np.uint8).tobytes()
    path = tmp_path / "wide.wav"
    path.write_bytes(wav_bytes(data, channels=1024, rate=48_000, bits=8))
    tracemalloc.start()
    try:
        load_voice_prompt(path)
    except VoicePromptError as error:
        assert "1.00 s long" in str(error)
    else:
        raise AssertionError("a one-second recording must be refused as too short")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 * 1024 * 1024, peak
