"""Hostile scripts and uploads against the running service (uvicorn api, Celery worker, Redis, PostgreSQL when it
answers, else SQLite): every one is a 4xx whose message says what is wrong, the api stays up, and a refused
request leaves no row and no file behind. Inputs that are odd but valid are accepted and generated."""

from __future__ import annotations

import gzip
import io
import json
import os
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.hardening import (
    assert_healthy,
    assert_refused,
    chunked,
    flac_without_length,
    footprint,
    leaves_nothing,
    raw_exchange,
    wav_bytes,
)
from tests.service_client import upload_voice, wait_for
from tests.synthetic_audio import voice_like

UPLOAD_LIMIT = 2 * 1024 * 1024
FAST = {"diffusion_steps": 2, "seed": 1}
TWO_SPEAKERS = "Alice: Hello there.\nBob: Hi, Alice.\n"


@pytest.fixture(scope="module")
def stack(postgres_or_sqlite_url: str | None, make_service_stack):  # type: ignore[no-untyped-def]
    settings = {"max_upload_bytes": str(UPLOAD_LIMIT)}
    if postgres_or_sqlite_url is not None:
        settings["database_url"] = postgres_or_sqlite_url
    return make_service_stack(**settings).start()


@pytest.fixture(scope="module")
def voice(alice: httpx.Client, voice_wav: Path) -> str:
    return upload_voice(alice, voice_wav, "alice")


def pcm16(seconds: float, rate: int = 16_000) -> bytes:
    return (voice_like(seconds, rate) * 20_000).astype("<i2").tobytes()


def encoded(samples: np.ndarray, rate: int, audio_format: str) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, rate, format=audio_format)
    return buffer.getvalue()


# --- scripts ---------------------------------------------------------------------------------------------

# (id, script, words the 422 must hold, script line it must name or None)
SCRIPTS = [
    ("empty", "", "the script is empty", None),
    ("blank lines and tabs", "\n\n \t \r\n", "the script is empty", None),
    (
        "only invisible and control characters",
        "\u200b\u200c\u200d\ufeff\x00\x07\x1b\x7f\x85",
        "the script is empty",
        None,
    ),
    ("200,001 characters", "Alice: " + "a" * 199_994, "at most 200,000 (VOXCAST_MAX_SCRIPT_CHARS)", None),
    ("one megabyte", "Alice: hi\n" * 104_858, "at most 200,000 (VOXCAST_MAX_SCRIPT_CHARS)", None),
    ("five speakers", "".join(f"P{n}: hello.\n" for n in range(5)), "would be a 5th speaker", 5),
    ("Speaker 100", "Speaker 100: hello", "use Speaker 0 to Speaker 99", 1),
    ("speaker number of 30 digits", "Speaker " + "9" * 30 + ": hello", "out of range", 1),
    ("text before any tag", "Once upon a time\nAlice: hi", "text before the first speaker tag", 1),
    ("tag without text", "Alice:\nBob: hi", "has no text", 1),
    ("tag with only NUL and escapes", "Alice: hi\nBob: \x00\x1b\x9b", "'Bob:' has no text", 2),
    (
        "a turn of only emoji",
        "Alice: Hello.\nBob: \U0001f389\U0001f389",
        "Bob's turn has nothing to say aloud: '\U0001f389\U0001f389' is only emoji, symbols or punctuation "
        "(no letter or number); write the words to speak, or remove the turn",
        2,
    ),
    ("a turn of only punctuation", "Alice: Hello.\n\nBob:\n  ?!...", "Bob's turn has nothing to say aloud", 4),
    ("emoji after a pause", "Alice: Hi [pause: 1s] \U0001f44d", "Alice's turn has nothing to say aloud", 1),
    (
        "JSON turn of NUL and emoji",
        '{"turns": [\n{"speaker": "Alice", "text": "Hi"},\n{"speaker": "Bob", "text": "\\u0000\u2764\ufe0f"}]}',
        "Bob's turn has nothing to say aloud: '\u2764\ufe0f'",
        3,
    ),
    ("pause -1s", "Alice: hi [pause: -1s] there", "cannot read the pause", 1),
    ("pause 0s", "Alice: hi\n[pause: 0s]\nBob: yo", "out of range", 2),
    ("pause 30.001s", "Alice: hi\n[pause: 30.001s]\nBob: yo", "at most 30 s", 2),
    ("pause 100000ms", "Alice: hi [pause: 100000ms]", "out of range", 1),
    ("pause 400 digits", "Alice: hi [pause: " + "9" * 400 + "s]", "out of range", 1),
    ("pause 1e309s", "Alice: hi [pause: 1e309s]", "cannot read the pause", 1),
    ("pause NaN", "Alice: hi [pause: NaNs]", "cannot read the pause", 1),
    ("pause 1.5.5s", "Alice: hi [pause: 1.5.5s]", "cannot read the pause", 1),
    ("pause in hours", "Alice: hi [pause: 1h]", "cannot read the pause", 1),
    ("pause without a length", "Alice: hi [pause]", "cannot read the pause", 1),
    ("JSON speaker -1", json.dumps({"turns": [{"speaker": -1, "text": "hi"}]}), '"speaker" must be', 1),
    (
        "JSON speaker 10**30",
        '{"turns": [{"speaker": 1000000000000000000000000000000, "text": "hi"}]}',
        "out of range",
        1,
    ),
    ("JSON speaker true", '{"turns": [{"speaker": true, "text": "hi"}]}', '"speaker" must be', 1),
    ("JSON speaker object", '{"turns": [{"speaker": {"a": 1}, "text": "hi"}]}', '"speaker" must be', 1),
    ("JSON text number", '{"turns": [{"speaker": 1, "text": 5}]}', '"text" must be a string', 1),
    ("JSON pause NaN", '{"turns": [{"speaker": 1, "text": "hi"}, {"pause": NaN}]}', "out of range", 1),
    ("JSON pause Infinity", '{"turns": [{"speaker": 1, "text": "hi"}, {"pause": Infinity}]}', "out of range", 1),
    ("JSON pause -0.0", '{"turns": [{"speaker": 1, "text": "hi"}, {"pause": -0.0}]}', "out of range", 1),
    ("JSON pause and text", '{"turns": [{"speaker": 1, "text": "hi", "pause": 1}]}', 'has both "pause"', 1),
    ("JSON not closed", '{"turns": [{"speaker": 1, "text": "hi"}', "invalid JSON", 1),
    ("JSON nested 100,000 deep", '{"turns": ' + "[" * 100_000, "JSON", None),
    (
        "JSON integer of 5,000 digits",
        '{"turns": [{"speaker": 1' + "0" * 5000 + ', "text": "x"}]}',
        "number too long",
        None,
    ),
    ("JSON turns a string", '{"turns": "hello"}', 'non-empty "turns" list', None),
    ("JSON 10,000 empty items", '{"turns": [' + ",".join(["{}"] * 10_000) + "]}", "turn #1", 1),
    (
        "backtracking: '[pause: 1' x 22,000",
        "Speaker 1: " + "[pause: 1" * 22_000,
        "at most 90 minutes per job (VOXCAST_MAX_JOB_AUDIO_MINUTES)",
        None,
    ),
    ("Speaker -1", "Speaker 1: hello\nSpeaker -1: hello", "speaker number -1 is out of range", 2),
    ("backtracking: 100,000 '['", "[" * 100_000, "text before the first speaker tag", 1),
    ("backtracking: 'Speaker ' x 24,999 + '1:'", "Speaker " * 24_999 + "1:", "text before the first speaker tag", 1),
    ("backtracking: 199,999 ':'", ":" * 199_999, "text before the first speaker tag", 1),
]


@pytest.mark.parametrize(("script", "words", "line"), [case[1:] for case in SCRIPTS], ids=[case[0] for case in SCRIPTS])
def test_hostile_scripts_are_422_naming_the_line(
    stack, alice: httpx.Client, voice: str, script: str, words: str, line: int | None
) -> None:  # type: ignore[no-untyped-def]
    body = {"script": script, "voices": {"Alice": voice, "Bob": voice}, "settings": FAST}
    with leaves_nothing(stack):
        started = time.monotonic()
        response = alice.post("/v1/jobs", json=body)
        assert time.monotonic() - started < 5, "a hostile script must not take the parser long"
        assert_refused(response, 422, words, field="script")
    if line is not None:
        assert response.json()["detail"][0]["line"] == line


# (id, voices mapping given the stored voice id, field named, words)
VOICE_MAPPINGS = [
    (
        "speaker 'Carol' not in the script",
        lambda v: {"Alice": v, "Bob": v, "Carol": v},
        "voices.Carol",
        "no speaker 'Carol'",
    ),
    ("speaker number 3 of 2", lambda v: {"Alice": v, "3": v}, "voices.3", "no speaker '3'"),
    ("speaker number 0", lambda v: {"Alice": v, "0": v}, "voices.0", "no speaker '0'"),
    ("speaker number -1", lambda v: {"Alice": v, "-1": v}, "voices.-1", "no speaker '-1'"),
    ("speaker number of 20 digits", lambda v: {"Alice": v, "9" * 20: v}, "voices." + "9" * 20, "no speaker"),
    ("a speaker without a voice", lambda v: {"Alice": v}, "voices", "no voice for Bob"),
    (
        "two voices for one speaker",
        lambda v: {"Alice": v, "alice": v, "Bob": v},
        "voices.alice",
        '"Alice" and "alice" are the same speaker, Alice (names match whatever their case or spacing); '
        "give each speaker one voice",
    ),
    (
        "a name and its place for one speaker",
        lambda v: {"Alice": v, "Bob": v, "2": v},
        "voices.2",
        '"Bob" and "2" are the same speaker, Bob ("Bob" is its name, "2" its place in order of first appearance)',
    ),
    ("a voice id that does not exist", lambda v: {"Alice": v, "Bob": "0" * 32}, "voices.Bob", "no voice"),
    ("a path as the voice id", lambda v: {"Alice": v, "Bob": "../../../etc/passwd"}, "voices.Bob", "no voice"),
    ("NUL in the voice id", lambda v: {"Alice": v, "Bob": "ab\x00cd"}, "voices.Bob", "printable text"),
    ("ESC in the speaker key", lambda v: {"Alice": v, "B\x1bob": v}, "voices.B\x1bob.[key]", "printable text"),
    (
        "a 101-character speaker key",
        lambda v: {"Alice": v, "B" * 101: v},
        "voices." + "B" * 101 + ".[key]",
        "at most 100",
    ),
    ("1,000 speaker keys", lambda v: {f"S{n}": v for n in range(1000)}, "voices.S999", "no speaker"),
]


@pytest.mark.parametrize(
    ("mapping", "field", "words"), [case[1:] for case in VOICE_MAPPINGS], ids=[case[0] for case in VOICE_MAPPINGS]
)
def test_speaker_ids_out_of_range_are_422_naming_the_voice(
    stack, alice: httpx.Client, voice: str, mapping, field: str, words: str
) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", json={"script": TWO_SPEAKERS, "voices": mapping(voice), "settings": FAST})
        assert_refused(response, 422, words, field=field)


ZERO_AND_ONE = "Speaker 0: Hello there.\nSpeaker 1: Hi.\n"


def test_voices_numbered_from_one_for_speakers_from_zero_are_told_how_speakers_are_numbered(
    stack, alice: httpx.Client, voice: str
) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", json={"script": ZERO_AND_ONE, "voices": {"1": voice, "2": voice}})
        message = assert_refused(response, 422, field="voices.2")
    assert message == (
        'the script has no Speaker 2; its speakers are Speaker 0 and Speaker 1 (voice keys "0" and "1", or their '
        'names); voice key N means "Speaker N" as written in the script, not the Nth speaker'
    )
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", json={"script": ZERO_AND_ONE, "voices": {"1": voice, "Speaker 1": voice}})
        message = assert_refused(response, 422, field="voices.Speaker 1")
    assert message == (
        '"1" and "Speaker 1" are the same speaker, Speaker 1 ("1" is its number, "Speaker 1" its name); '
        "give each speaker one voice"
    )
    accepted = alice.post(
        "/v1/jobs", json={"script": ZERO_AND_ONE, "voices": {"0": voice, "speaker 01": voice}, "settings": FAST}
    )
    assert accepted.status_code == 202, accepted.text
    assert wait_for(alice, accepted.json()["id"], {"done", "failed"})["state"] == "done"


# --- the speech route's input -------------------------------------------------------------------------

SPEECH = {"model": "tts-1", "response_format": "wav", "settings": FAST}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "\U0001f389\U0001f389",
            "input has nothing to say aloud: '\U0001f389\U0001f389' is only emoji, symbols or "
            "punctuation (no letter or number); write the words to speak",
        ),
        ("?! ... \u2014", "input has nothing to say aloud: '?! ... \u2014' is only emoji"),
        ("\x00\x07 \x1b\x9b", "input has nothing to say aloud: only spaces or control characters; write the words"),
        ("Hello [pause: 1s] \U0001f44d", "Speaker 1's turn has nothing to say aloud: '\U0001f44d'"),
    ],
    ids=["emoji", "punctuation", "control characters", "emoji after a pause"],
)
def test_speech_input_with_nothing_to_say_is_422_naming_input(
    stack, alice: httpx.Client, voice: str, text: str, words: str
) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/audio/speech", json={**SPEECH, "voice": voice, "input": text})
        assert_refused(response, 422, words, field="input")
    (problem,) = response.json()["detail"]
    assert problem["loc"] == ["body", "input"] and "\x00" not in problem["msg"]


def test_speech_input_with_nothing_to_say_and_an_unknown_voice_is_told_both(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/audio/speech", json={**SPEECH, "voice": "nobody", "input": "\U0001f389"})
        assert_refused(response, 422, "nothing to say aloud", "no voice 'nobody'")
    assert [problem["field"] for problem in response.json()["detail"]] == ["input", "voice"]


def test_control_characters_in_speech_input_are_dropped_not_stored(alice: httpx.Client, voice: str) -> None:
    # On PostgreSQL, a NUL that reached a text column would be a 500; it is dropped like every C0/C1 control.
    response = alice.post("/v1/audio/speech", json={**SPEECH, "voice": voice, "input": "Hel\x00lo\x1b[31m there\x9b."})
    assert response.status_code == 200, response.text[:500]
    samples, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24_000 and len(samples) > 0
    job = alice.get(f"/v1/jobs/{response.headers['x-voxcast-job']}").json()
    timeline = alice.get(job["outputs"]["turns"]).json()
    assert [turn["text"] for turn in timeline["turns"]] == ["Hello[31m there."]


# (id, script file bytes, words)
ENCODINGS = [
    ("UTF-16 with a BOM", "Alice: hi".encode("utf-16"), "not UTF-8 text (byte 0)"),
    ("Latin-1", b"Alice: caf\xe9\n", "not UTF-8 text (byte 10)"),
    ("overlong UTF-8 slash", b"Alice: \xc0\xaf", "not UTF-8"),
    ("UTF-8 encoded surrogate", b"Alice: \xed\xa0\x80", "not UTF-8"),
    ("cut in the middle of a character", "Alice: caf\u00e9".encode()[:-1], "not UTF-8"),
    ("binary", bytes(range(256)) * 4, "not UTF-8"),
]


@pytest.mark.parametrize(("data", "words"), [case[1:] for case in ENCODINGS], ids=[case[0] for case in ENCODINGS])
def test_script_files_in_other_encodings_are_422(stack, alice: httpx.Client, data: bytes, words: str) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", files={"script": ("show.txt", data, "text/plain")})
        assert_refused(response, 422, words, field="script")


TEXT_PART_LIMIT = 800_000  # bytes: 200,000 characters (VOXCAST_MAX_SCRIPT_CHARS at most) of UTF-8
OVER_TEXT_PART = "Alice: " + "a" * TEXT_PART_LIMIT


def test_a_script_part_too_large_to_read_is_refused_naming_the_setting(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    over = "over 800,000 bytes: longer than the 200,000 characters this server takes (VOXCAST_MAX_SCRIPT_CHARS)"
    with leaves_nothing(stack):
        as_file = alice.post("/v1/jobs", files={"script": ("show.txt", OVER_TEXT_PART.encode(), "text/plain")})
        assert_refused(as_file, 422, f"the script file is {over}", field="script")
        as_field = alice.post("/v1/jobs", data={"script": OVER_TEXT_PART}, files={"none": ("", b"")})
        assert_refused(as_field, 413, f"a text field of the form is {over}")
        transcript = alice.post(
            "/v1/scripts", data={"options": '{"task": "normalise"}', "transcript": OVER_TEXT_PART}, files={"none": ("", b"")}
        )
        assert_refused(transcript, 413, f"a text field of the form is {over}")


# (id, raw JSON body, words)
JSON_BODIES = [
    ("invalid UTF-8", b'{"script": "Alice: \xff\xfe"}', "Invalid JSON"),
    ("lone surrogate escape", b'{"script": "Alice: \\ud800 hi"}', "Invalid JSON"),
    ("truncated", b'{"script": "Alice: hi", "voices": {', "Invalid JSON"),
    ("nested 100,000 deep", b'{"script": "x", "voices": ' + b"[" * 100_000, "recursion limit"),
    ("number of 100,000 digits", b'{"script": "x", "priority": ' + b"9" * 100_000 + b"}", "Invalid JSON"),
    ("a top-level array", b'[{"script": "Alice: hi"}]', "Input should be an object"),
    ("a top-level string", b'"Alice: hi"', "Input should be an object"),
    ("null", b"null", "Input should be an object"),
    ("script a number", b'{"script": 5}', "valid string"),
    ("script an object", b'{"script": {"turns": []}}', "valid string"),
    ("an unknown field", b'{"script": "Alice: hi", "gpu": "all of them"}', "Extra inputs are not permitted"),
    ("NUL in the title", b'{"script": "Alice: hi", "title": "a\\u0000b"}', "printable text"),
    ("priority 10", b'{"script": "Alice: hi", "priority": 10}', "less than or equal to 9"),
    ("seed 2**31", b'{"script": "Alice: hi", "settings": {"seed": 2147483648}}', "less than or equal to"),
    (
        "diffusion_steps 1e9",
        b'{"script": "Alice: hi", "settings": {"diffusion_steps": 1000000000}}',
        "less than or equal to 100",
    ),
    ("cfg_scale NaN", b'{"script": "Alice: hi", "settings": {"cfg_scale": NaN}}', "less than or equal to 10"),
    ("formats 6 of them", b'{"script": "Alice: hi", "formats": ["wav","wav","wav","wav","wav","wav"]}', "at most 5"),
    ("format exe", b'{"script": "Alice: hi", "formats": ["exe"]}', "'wav', 'flac', 'mp3', 'ogg' or 'opus'"),
]


@pytest.mark.parametrize(("body", "words"), [case[1:] for case in JSON_BODIES], ids=[case[0] for case in JSON_BODIES])
def test_malformed_or_adversarial_json_is_422(stack, alice: httpx.Client, body: bytes, words: str) -> None:  # type: ignore[no-untyped-def]
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", content=body, headers={"content-type": "application/json"})
        assert_refused(response, 422, words)


def test_a_script_of_odd_but_valid_characters_is_generated_with_them_cleaned(alice: httpx.Client, voice: str) -> None:
    script = (
        "\ufeffAlice:\u00a0Hello\x00 \u200bthere\x07 \u202eevil\u202c, caf\u00e9 \u2018quoted\u2019 \U0001f399\ufe0f"
        " e\u0301\u0301\u0301 \x1b[31mred\x1b[0m.\r\n"
        "[PAUSE:1 ms]\r"
        "bob:  \u201cHi\u201d\u2028 [pause: 30s] again.\n"
    )
    response = alice.post(
        "/v1/jobs",
        json={"script": script, "voices": {"Alice": voice, "Bob": voice}, "formats": ["wav"], "settings": FAST},
    )
    assert response.status_code == 202, response.text
    job = wait_for(alice, response.json()["id"], {"done", "failed"})
    assert job["state"] == "done", job["error"]
    timeline = alice.get(job["outputs"]["turns"]).json()
    spoken = " ".join(turn["text"] for turn in timeline["turns"])
    assert [turn["speaker"] for turn in timeline["turns"]] == ["Alice", "bob", "bob"]
    assert "'quoted'" in spoken and '"Hi"' in spoken and "caf\u00e9" in spoken
    assert not any(char in spoken for char in "\x00\x07\x1b\u200b\ufeff\u202e\u202c")
    assert job["audio_seconds"] > 30  # the 30 s pause is silence inside the episode


# --- uploads -------------------------------------------------------------------------------------------

_NOISE = np.random.default_rng(3).bytes(20_000)
_FLAC_10S = encoded(voice_like(10.0, 16_000), 16_000, "FLAC")
_SILENT_3H_FLAC = None  # built once, on first use (about half a second)


def silent_three_hours_flac() -> bytes:
    global _SILENT_3H_FLAC
    if _SILENT_3H_FLAC is None:
        buffer = io.BytesIO()
        with sf.SoundFile(buffer, "w", 8000, 1, format="FLAC") as flac:
            for _ in range(180):
                flac.write(np.zeros(8000 * 60, dtype=np.int16))
        _SILENT_3H_FLAC = buffer.getvalue()
    return _SILENT_3H_FLAC


# (id, file name, file bytes (or a builder of them), status, words)
UPLOADS = [
    ("empty", "v.wav", b"", 422, "the file is empty"),
    ("text", "notes.wav", b"Speaker 1: this is a script\n" * 50, 422, "not audio"),
    ("PNG", "picture.wav", b"\x89PNG\r\n\x1a\n" + _NOISE, 422, "not audio"),
    ("random bytes as mp3", "noise.mp3", _NOISE, 422, "not audio"),
    ("gzip of 10 MB of zeros", "v.wav.gz", gzip.compress(bytes(10_000_000)), 422, "not audio"),
    ("truncated FLAC", "cut.flac", _FLAC_10S[: len(_FLAC_10S) // 2], 422, "corrupt, truncated or not audio"),
    ("truncated WAV, 2 s left", "cut.wav", wav_bytes(pcm16(10.0))[: 44 + 2 * 32_000], 422, "2.00 s long"),
    ("WAV header without data", "header.wav", wav_bytes(b""), 422, "no audio samples"),
    ("header: 1 Hz", "slow.wav", wav_bytes(pcm16(4.0), rate=1), 422, "sample rate 1 Hz"),
    ("header: 1 GHz", "fast.wav", wav_bytes(pcm16(4.0), rate=1_000_000_000), 422, "the allowed range is 8000"),
    ("header: 192 kHz on 16 kHz data", "lie.wav", wav_bytes(pcm16(4.0), rate=192_000), 422, "0.33 s long"),
    ("header: 0 channels", "none.wav", wav_bytes(pcm16(4.0), channels=0), 422, "Channel count is zero"),
    ("header: 65,535 channels", "many.wav", wav_bytes(pcm16(4.0), channels=65_535), 422, "Too many channels"),
    (
        "header: 1,024 channels",
        "wide.wav",
        wav_bytes(bytes(1_500_000), channels=1024, rate=8000, bits=8),
        422,
        "0.18 s long",
    ),
    ("header: 0 bits", "zero.wav", wav_bytes(pcm16(4.0), bits=0), 422, "unimplemented format"),
    (
        "NaN samples",
        "nan.wav",
        wav_bytes(np.full(64_000, np.nan, "<f4").tobytes(), bits=32, float_format=True),
        422,
        "NaN or infinite",
    ),
    (
        "infinite samples",
        "inf.wav",
        wav_bytes(np.full(64_000, np.inf, "<f4").tobytes(), bits=32, float_format=True),
        422,
        "NaN or infinite",
    ),
    ("digital silence", "quiet.wav", wav_bytes(bytes(128_000)), 422, "silent"),
    (
        "bomb: 3 h of silence in a 270 kB FLAC",
        "long.flac",
        silent_three_hours_flac,
        422,
        "10800.0 s long; recordings up to 600 s",
    ),
    (
        "bomb: the same, its length zeroed",
        "stream.flac",
        lambda: flac_without_length(silent_three_hours_flac()),
        422,
        "silent",
    ),
    ("a hostile name on junk", "../../..\\x\x00\x1b[2J\u202egnp.mp3", _NOISE, 422, "[2Jgnp.mp3'"),
    ("a 5,000-character file name", "v" * 5000 + ".wav", wav_bytes(pcm16(4.0)), 400, "Invalid multipart data"),
]


@pytest.mark.parametrize(
    ("filename", "data", "status", "words"), [case[1:] for case in UPLOADS], ids=[case[0] for case in UPLOADS]
)
def test_hostile_uploads_are_refused_with_a_reason(
    stack, alice: httpx.Client, filename: str, data, status: int, words: str
) -> None:  # type: ignore[no-untyped-def]
    content = data() if callable(data) else data
    with leaves_nothing(stack):
        started = time.monotonic()
        response = alice.post("/v1/voices", data={"name": "hostile"}, files={"file": (filename, content, "audio/wav")})
        assert time.monotonic() - started < 5
        assert_refused(response, status, words)
    if status == 422:
        (problem,) = response.json()["detail"]
        assert problem["field"] == "file"
        assert not any(hidden in problem["msg"] for hidden in ("\x00", "\x1b", "\u202e", "../"))


# (id, file name, file bytes (or a builder), seconds kept, trimmed)
ODD_BUT_VALID_UPLOADS = [
    ("WAV whose header claims 4 GiB of data", "lie.wav", wav_bytes(pcm16(4.0), data_size=0xFFFFFFF0), 4.0, False),
    ("FLAC of 3 h of tone, length unknown", "stream.flac", None, 60.0, True),
    ("a path as the file name", "../../../../etc/passwd", wav_bytes(pcm16(4.0)), 4.0, False),
    ("NUL, escapes and RTL in the name", "a\x00b\x1b[31m\u202evaw.exe", wav_bytes(pcm16(4.0)), 4.0, False),
    ("a 4,000-character file name", "v" * 4000 + ".wav", wav_bytes(pcm16(4.0)), 4.0, False),
    ("Windows path as the file name", "C:\\Users\\me\\voice.wav", wav_bytes(pcm16(4.0)), 4.0, False),
]


def three_hour_tone_flac_without_length() -> bytes:
    """A constant level compresses to almost nothing, so three hours fit in a small file (a decompression bomb)."""
    buffer = io.BytesIO()
    with sf.SoundFile(buffer, "w", 8000, 1, format="FLAC") as flac:
        for _ in range(180):
            flac.write(np.full(8000 * 60, 3000, dtype=np.int16))
    return flac_without_length(buffer.getvalue())


@pytest.mark.parametrize(
    ("filename", "data", "seconds", "trimmed"),
    [case[1:] for case in ODD_BUT_VALID_UPLOADS],
    ids=[case[0] for case in ODD_BUT_VALID_UPLOADS],
)
def test_odd_but_valid_uploads_are_stored_inside_the_data_folder_only(
    stack, alice: httpx.Client, filename: str, data: bytes | None, seconds: float, trimmed: bool
) -> None:  # type: ignore[no-untyped-def]
    content = three_hour_tone_flac_without_length() if data is None else data
    before = footprint(stack)
    started = time.monotonic()
    response = alice.post("/v1/voices", data={"name": "odd"}, files={"file": (filename, content, "audio/wav")})
    assert time.monotonic() - started < 5, "only the first 60 s may ever be decoded"
    assert response.status_code == 201, response.text
    stored = response.json()
    assert stored["seconds"] == pytest.approx(seconds, abs=0.01) and stored["trimmed"] is trimmed
    assert footprint(stack).files - before.files == {f"voices/{stored['id']}.wav"}
    assert alice.delete(f"/v1/voices/{stored['id']}").status_code == 204
    assert footprint(stack) == before


def test_an_upload_over_the_limit_is_refused_while_it_streams(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    key = alice.headers["Authorization"].encode()
    head = (
        b"POST /v1/voices HTTP/1.1\r\nHost: test\r\nAuthorization: " + key + b"\r\n"
        b"Content-Type: multipart/form-data; boundary=BOUNDARY\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    form_start = (
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="name"\r\n\r\nendless\r\n'
        b'--BOUNDARY\r\nContent-Disposition: form-data; name="file"; filename="endless.wav"\r\n'
        b"Content-Type: audio/wav\r\n\r\n"
    )
    endless = 200 * 1024 * 1024
    block = os.urandom(64 * 1024)
    with leaves_nothing(stack):
        exchange = raw_exchange(
            stack.base_url, head, chunked([form_start, *(block for _ in range(endless // len(block)))])
        )
        assert exchange.status == 413, exchange.response[:300]
        assert "VOXCAST_MAX_UPLOAD_BYTES" in exchange.body["detail"]
    # The server stopped reading at the limit: what got through is the limit plus what socket buffers hold.
    assert exchange.sent < UPLOAD_LIMIT + 16 * 1024 * 1024 < endless


def test_an_upload_declared_over_the_limit_is_refused_before_its_body(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    key = alice.headers["Authorization"].encode()
    head = (
        b"POST /v1/voices HTTP/1.1\r\nHost: test\r\nAuthorization: " + key + b"\r\n"
        b"Content-Type: multipart/form-data; boundary=B\r\nContent-Length: 100000000000\r\nExpect: 100-continue\r\n\r\n"
    )
    with leaves_nothing(stack):
        exchange = raw_exchange(stack.base_url, head)
    assert exchange.status == 413 and b"100 Continue" not in exchange.response
    assert "a voice file may be at most 2 MiB" in exchange.body["detail"]


def test_a_client_that_sends_its_whole_upload_first_reads_the_413(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    """httpx, like most clients, reads nothing until it has sent its body, and still gets the reason back."""
    oversized = wav_bytes(bytes(3 * 1024 * 1024))
    with leaves_nothing(stack):
        for _ in range(3):
            response = alice.post(
                "/v1/voices", data={"name": "big"}, files={"file": ("big.wav", oversized, "audio/wav")}
            )
            assert_refused(response, 413, "a voice file may be at most 2 MiB (VOXCAST_MAX_UPLOAD_BYTES)")


def test_voices_uploaded_with_a_job_are_held_to_the_limit_too(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    files = [
        ("script", ("show.txt", b"Alice: hi.\n", "text/plain")),
        ("voice.Alice", ("huge.wav", wav_bytes(bytes(UPLOAD_LIMIT + 1024)), "audio/wav")),
    ]
    with leaves_nothing(stack):
        response = alice.post("/v1/jobs", files=files)
        assert_refused(response, 413, "voices.Alice: huge.wav is larger than the 2 MiB", "VOXCAST_MAX_UPLOAD_BYTES")


def test_more_files_or_fields_than_a_job_has_are_400(stack, alice: httpx.Client) -> None:  # type: ignore[no-untyped-def]
    too_many_files = [("script", ("s.txt", b"Alice: hi", "text/plain"))] + [
        (f"voice.{n}", (f"{n}.wav", b"x", "audio/wav")) for n in range(5)
    ]
    with leaves_nothing(stack):
        assert_refused(alice.post("/v1/jobs", files=too_many_files), 400, "Too many files")
        assert_refused(
            alice.post("/v1/jobs", files={"script": ("s", b"x")}, data={f"f{n}": "x" for n in range(9)}),
            400,
            "Too many fields",
        )
    assert_healthy(stack)
