"""Tests for script_text.plan: real scripts parsed by script_text.parser, planned in both modes."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

from core.audio_rates import FRAMES_PER_SECOND
from script_text.parser import (
    MAX_PAUSE_SECONDS,
    MAX_SCRIPT_CHARS,
    Pause,
    Script,
    ScriptError,
    Speaker,
    Turn,
    parse_script,
)
from script_text.plan import (
    CHARS_PER_SECOND,
    DEFAULT_MAX_SEGMENT_SECONDS,
    MAX_EPISODE_MINUTES,
    MODES,
    EpisodeTooLong,
    Plan,
    PlannedTurn,
    Segment,
    Silence,
    estimate_seconds,
    plan_script,
)

SCRIPTS_DIR = Path(__file__).resolve().parents[2] / "shared" / "examples" / "scripts"

# Budget rule documented in plan.py: 2x the estimate + 5 s, in frames at 7.5 Hz.
BUDGET_FACTOR = 2.0
BUDGET_SLACK_SECONDS = 5.0


def kinds(plan: Plan) -> list[str]:
    return [type(item).__name__ for item in plan.items]


def texts(segment: Segment) -> list[str]:
    return [turn.text for turn in segment.turns]


def example_script(name: str) -> Script:
    path = SCRIPTS_DIR / name
    if not path.is_file():
        pytest.skip(f"example script {path} is absent (shared/examples is not checked out here)")
    return parse_script(path.read_text(encoding="utf-8"))


# --- whole mode -------------------------------------------------------------------


def test_whole_mode_without_pauses_is_one_segment_with_every_turn_in_order() -> None:
    script = parse_script("Speaker 1: Hello there.\nSpeaker 2: Hi!\n\nSpeaker 1: How are you?\nSpeaker 3: Fine.\n")
    plan = plan_script(script, "whole")

    assert plan.mode == "whole"
    assert plan.speakers == script.speakers
    assert kinds(plan) == ["Segment"]
    (segment,) = plan.segments
    assert segment.index == 0
    assert segment.turns == (
        PlannedTurn(0, 0, "Hello there.", 1),
        PlannedTurn(1, 1, "Hi!", 2),
        PlannedTurn(2, 0, "How are you?", 4),
        PlannedTurn(3, 2, "Fine.", 5),
    )
    assert segment.text.lines == ((0, "Hello there."), (1, "Hi!"), (0, "How are you?"), (2, "Fine."))


def test_whole_mode_is_the_default() -> None:
    script = parse_script("Speaker 1: One.\nSpeaker 2: Two.")
    assert plan_script(script).mode == "whole"
    assert len(plan_script(script).segments) == 1


def test_whole_mode_splits_at_a_pause_line_into_segment_silence_segment() -> None:
    script = parse_script("Speaker 1: Before the break.\nSpeaker 2: Indeed.\n[pause: 800ms]\nSpeaker 1: After it.\n")
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Segment", "Silence", "Segment"]
    first, silence, second = plan.items
    assert texts(first) == ["Before the break.", "Indeed."]
    assert silence == Silence(seconds=0.8, line=3)
    assert texts(second) == ["After it."]
    assert [first.index, second.index] == [0, 1]
    # Turn indexes keep counting across the silence.
    assert [turn.index for turn in first.turns + second.turns] == [0, 1, 2]
    assert second.turns[0] == PlannedTurn(2, 0, "After it.", 4)


def test_pause_inside_a_turn_splits_it_into_two_turns_of_the_same_speaker() -> None:
    script = parse_script("Speaker 1: Hello.\nSpeaker 2: Let me think [pause: 1.5s] yes, I agree.\n")
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Segment", "Silence", "Segment"]
    first, silence, second = plan.items
    assert texts(first) == ["Hello.", "Let me think"]
    assert silence == Silence(seconds=1.5, line=2)
    assert second.turns == (PlannedTurn(2, 1, "yes, I agree.", 2),)


def test_trailing_pause_becomes_a_trailing_silence() -> None:
    script = parse_script("Speaker 1: Goodbye.\nSpeaker 2: Bye!\n[pause: 2s]\n")
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Segment", "Silence"]
    assert plan.items[1] == Silence(seconds=2.0, line=3)
    assert texts(plan.segments[0]) == ["Goodbye.", "Bye!"]


def test_leading_and_back_to_back_pauses_make_no_empty_segments() -> None:
    script = parse_script("[pause: 1s]\nSpeaker 1: Intro.\n[pause: 500ms]\n[pause: 3s]\nSpeaker 2: Outro.\n")
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Silence", "Segment", "Silence", "Silence", "Segment"]
    assert [item.seconds for item in plan.items if isinstance(item, Silence)] == [1.0, 0.5, 3.0]
    assert [segment.index for segment in plan.segments] == [0, 1]
    assert all(segment.turns for segment in plan.segments)


def test_segment_indexes_count_0_1_2_across_silences() -> None:
    script = parse_script(
        "Speaker 1: One.\n[pause: 1s]\nSpeaker 2: Two.\n[pause: 2s]\nSpeaker 1: Three.\nSpeaker 2: Four.\n"
    )
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Segment", "Silence", "Segment", "Silence", "Segment"]
    assert [segment.index for segment in plan.segments] == [0, 1, 2]
    assert [texts(segment) for segment in plan.segments] == [["One."], ["Two."], ["Three.", "Four."]]
    assert [item.line for item in plan.items if isinstance(item, Silence)] == [2, 4]


def test_whole_mode_never_splits_a_long_turn() -> None:
    long_text = " ".join(f"Sentence number {n} is here." for n in range(20))
    script = parse_script(f"Speaker 1: {long_text}\nSpeaker 2: Short.")
    plan = plan_script(script, "whole", max_segment_seconds=5.0)

    assert kinds(plan) == ["Segment"]
    assert texts(plan.segments[0]) == [long_text, "Short."]


# --- turns mode -------------------------------------------------------------------


def test_turns_mode_gives_one_segment_per_turn_with_silences_between() -> None:
    script = parse_script(
        "Alice: Hello Bob.\nBob: Hi Alice.\n[pause: 700ms]\nAlice: Shall we start?\nBob: Let's.\n[pause: 1s]\n"
    )
    plan = plan_script(script, "turns")

    assert plan.mode == "turns"
    assert [speaker.name for speaker in plan.speakers] == ["Alice", "Bob"]
    assert kinds(plan) == ["Segment", "Segment", "Silence", "Segment", "Segment", "Silence"]
    assert [segment.index for segment in plan.segments] == [0, 1, 2, 3]
    assert [segment.turns for segment in plan.segments] == [
        (PlannedTurn(0, 0, "Hello Bob.", 1),),
        (PlannedTurn(1, 1, "Hi Alice.", 2),),
        (PlannedTurn(2, 0, "Shall we start?", 4),),
        (PlannedTurn(3, 1, "Let's.", 5),),
    ]
    assert [item for item in plan.items if isinstance(item, Silence)] == [Silence(0.7, 3), Silence(1.0, 6)]


def test_turns_mode_splits_a_long_turn_at_sentence_ends_within_the_bound() -> None:
    bound_seconds = 5.0
    max_chars = bound_seconds * CHARS_PER_SECOND  # 70 characters
    sentences = [
        "The first sentence is short.",
        "Here comes a second one!",
        "Does a third one fit as well?",
        "A fourth closes the thought.",
        "And a fifth, just to be sure.",
    ]
    long_text = " ".join(sentences)
    assert len(long_text) > max_chars
    script = parse_script(f"Speaker 1: Intro.\nSpeaker 2: {long_text}\nSpeaker 1: Outro.\n")
    plan = plan_script(script, "turns", max_segment_seconds=bound_seconds)

    intro, *pieces, outro = plan.segments
    assert texts(intro) == ["Intro."] and texts(outro) == ["Outro."]
    assert len(pieces) > 1
    assert [segment.index for segment in plan.segments] == list(range(len(plan.segments)))
    for piece in pieces:
        (turn,) = piece.turns
        assert (turn.index, turn.speaker, turn.line) == (1, 1, 2)
        assert len(turn.text) <= max_chars
        assert turn.text[-1] in ".!?"  # cut at a sentence end
    # Nothing lost, nothing reordered: the pieces join back into the turn.
    assert " ".join(piece.turns[0].text for piece in pieces) == long_text
    # Pieces are greedy: no two neighbours would have fitted together.
    for left, right in zip(pieces, pieces[1:], strict=False):
        assert len(left.turns[0].text) + 1 + len(right.turns[0].text) > max_chars
    assert outro.turns[0].index == 2


def test_turn_exactly_at_the_bound_is_not_split() -> None:
    text = "Ab. " * 17 + "C."  # 17 * 4 + 2 = 70 characters, exactly 5 s, with sentence ends to cut at
    assert len(text) == 70
    plan = plan_script(parse_script(f"Speaker 1: {text}"), "turns", max_segment_seconds=5.0)
    assert [texts(segment) for segment in plan.segments] == [[text]]
    # One character more and it is cut.
    longer = plan_script(parse_script(f"Speaker 1: {text}D"), "turns", max_segment_seconds=5.0)
    assert len(longer.segments) == 2


def test_a_single_overlong_sentence_stays_whole() -> None:
    overlong = "This single sentence keeps going and going without any full stop for well over seventy characters"
    assert len(overlong) > 70
    script = parse_script(f"Speaker 1: Short start. {overlong}. Short end.")
    plan = plan_script(script, "turns", max_segment_seconds=5.0)

    assert [texts(segment) for segment in plan.segments] == [["Short start."], [f"{overlong}."], ["Short end."]]
    assert all(segment.turns[0].index == 0 and segment.turns[0].speaker == 0 for segment in plan.segments)


def test_split_pieces_sit_between_the_right_silences() -> None:
    long_text = "One sentence here. Another sentence there. A third sentence now. And the fourth one."
    script = parse_script(f"Speaker 1: Hi.\n[pause: 1s]\nSpeaker 2: {long_text}\n[pause: 2s]\nSpeaker 1: Bye.")
    plan = plan_script(script, "turns", max_segment_seconds=3.0)  # 42 characters

    assert kinds(plan)[:2] == ["Segment", "Silence"] and kinds(plan)[-2:] == ["Silence", "Segment"]
    middle = plan.items[2:-2]
    assert len(middle) >= 2 and all(isinstance(item, Segment) for item in middle)
    assert all(item.turns[0].index == 1 for item in middle)
    assert " ".join(item.turns[0].text for item in middle) == long_text


# --- estimates and budgets --------------------------------------------------------


def test_estimate_seconds_follows_the_reading_rate_with_a_one_second_floor() -> None:
    assert estimate_seconds("x" * 140) == pytest.approx(140 / CHARS_PER_SECOND) == pytest.approx(10.0)
    assert estimate_seconds("Hi.") == 1.0
    assert estimate_seconds("") == 1.0


def test_segment_budget_is_twice_the_estimate_plus_five_seconds() -> None:
    long_turn = "x" * 139  # with "Hi." joined by one space: 143 characters
    plan = plan_script(parse_script(f"Speaker 1: Hi.\nSpeaker 2: {long_turn}"), "whole")
    (segment,) = plan.segments
    assert segment.estimated_seconds == pytest.approx(143 / CHARS_PER_SECOND)
    assert segment.max_frames == math.ceil((143 / CHARS_PER_SECOND * 2 + 5) * FRAMES_PER_SECOND)

    short = plan_script(parse_script("Speaker 1: Hi."), "whole").segments[0]
    assert short.estimated_seconds == 1.0
    assert short.max_frames == math.ceil(7.0 * FRAMES_PER_SECOND) == 53


def test_plan_estimates_are_consistent() -> None:
    script = parse_script(
        "Speaker 1: A fairly ordinary opening line for the show.\n[pause: 1.5s]\n"
        "Speaker 2: Short.\nSpeaker 1: " + "Another sentence to read aloud. " * 12 + "\n[pause: 30s]\n"
    )
    for mode in MODES:
        plan = plan_script(script, mode, max_segment_seconds=10.0)
        silences = [item.seconds for item in plan.items if isinstance(item, Silence)]
        assert silences == [1.5, 30.0]
        speech = sum(segment.estimated_seconds for segment in plan.segments)
        assert plan.estimated_seconds == pytest.approx(speech + 31.5)
        assert plan.estimated_frames == sum(
            math.ceil(segment.estimated_seconds * FRAMES_PER_SECOND) for segment in plan.segments
        )
        for segment in plan.segments:
            expected = math.ceil((segment.estimated_seconds * BUDGET_FACTOR + BUDGET_SLACK_SECONDS) * FRAMES_PER_SECOND)
            assert segment.max_frames == expected
            assert segment.max_frames >= math.ceil(segment.estimated_seconds * FRAMES_PER_SECOND)


def test_turns_mode_estimate_is_close_to_whole_mode_estimate() -> None:
    # The same words, cut differently: the estimates differ only by joining spaces and the 1 s floors.
    script = parse_script("\n".join(f"Speaker {n % 2 + 1}: " + "Words to speak aloud. " * 5 for n in range(8)))
    whole = plan_script(script, "whole")
    turns = plan_script(script, "turns")
    assert len(turns.segments) == 8
    assert turns.estimated_seconds == pytest.approx(whole.estimated_seconds, abs=8 / CHARS_PER_SECOND)


# --- episode length limit ------------------------------------------------------------


def test_a_script_beyond_the_episode_limit_is_refused_with_the_limit_in_the_message() -> None:
    limit_chars = MAX_EPISODE_MINUTES * 60 * CHARS_PER_SECOND  # 75,600 characters of speech
    turn = "This line is part of a very long episode. " * 20  # 840 characters
    lines = [f"Speaker {n % 2 + 1}: {turn}" for n in range(100)]
    text = "\n".join(lines)
    assert limit_chars < 100 * len(turn.strip()) and len(text) < MAX_SCRIPT_CHARS
    script = parse_script(text)  # parsing accepts it; only planning refuses it

    for mode in MODES:
        with pytest.raises(EpisodeTooLong) as caught:
            plan_script(script, mode)
        message = str(caught.value)
        assert f"at most {MAX_EPISODE_MINUTES:.0f} minutes" in message
        assert "about 100 minutes" in message  # 100 turns of 60 s each
        assert caught.value.line is None
        # A server answers with its own limit from `minutes`; workers pass the error between processes.
        assert caught.value.minutes == pytest.approx(100, abs=0.5)
        copied = pickle.loads(pickle.dumps(caught.value))
        assert isinstance(copied, EpisodeTooLong) and str(copied) == message and copied.minutes == caught.value.minutes


def test_pauses_count_toward_the_episode_limit_and_the_limit_itself_is_allowed() -> None:
    # 178 pauses of 30 s plus one 60 s turn: exactly 90 minutes.
    pauses = f"[pause: {MAX_PAUSE_SECONDS:g}s]\n" * 178
    speech = "x" * int(60 * CHARS_PER_SECOND)
    plan = plan_script(parse_script(f"{pauses}Speaker 1: {speech}"), "turns")
    assert plan.estimated_seconds == MAX_EPISODE_MINUTES * 60
    assert len(plan.segments) == 1 and len(plan.items) == 179

    with pytest.raises(ScriptError, match=f"at most {MAX_EPISODE_MINUTES:.0f} minutes"):
        plan_script(parse_script(f"{pauses}Speaker 1: {speech}y"), "turns")


def test_plan_accepts_a_script_built_from_dataclasses() -> None:
    script = Script(
        speakers=(Speaker("1", "Speaker 1"), Speaker("Bob", "Bob")),
        items=(Turn(0, "Hello.", 1), Pause(0.25, 2), Turn(1, "Hi.", 3), Turn(0, "Bye.", 4)),
    )
    plan = plan_script(script, "whole")
    assert kinds(plan) == ["Segment", "Silence", "Segment"]
    assert plan.segments[1].turns == (PlannedTurn(1, 1, "Hi.", 3), PlannedTurn(2, 0, "Bye.", 4))


# --- modes ---------------------------------------------------------------------------


def test_unknown_mode_raises_value_error_naming_the_allowed_modes() -> None:
    script = parse_script("Speaker 1: Hello.")
    with pytest.raises(ValueError) as caught:
        plan_script(script, "chunks")  # type: ignore[arg-type]
    message = str(caught.value)
    assert "'chunks'" in message
    assert all(mode in message for mode in ("whole", "turns"))
    assert not isinstance(caught.value, ScriptError)


# --- the real example scripts ------------------------------------------------------------


def test_example_3p_script_in_turns_mode_is_one_segment_per_turn_with_three_speakers() -> None:
    script = example_script("3p_gpt5.txt")
    plan = plan_script(script, "turns")

    assert [speaker.name for speaker in plan.speakers] == ["Speaker 1", "Speaker 2", "Speaker 3"]
    assert len(script.turns) > 40
    # No turn in this script exceeds the default bound, so none is split.
    assert max(len(turn.text) for turn in script.turns) <= DEFAULT_MAX_SEGMENT_SECONDS * CHARS_PER_SECOND
    assert kinds(plan) == ["Segment"] * len(script.turns)
    for segment, turn in zip(plan.segments, script.turns, strict=True):
        assert segment.turns == (PlannedTurn(segment.index, turn.speaker, turn.text, turn.line),)
    assert {segment.turns[0].speaker for segment in plan.segments} == {0, 1, 2}


@pytest.mark.parametrize("name", ["1p_abs.txt", "2p_music.txt", "2p_short.txt", "3p_gpt5.txt"])
def test_example_scripts_in_whole_mode_are_one_segment_within_the_limit(name: str) -> None:
    script = example_script(name)
    plan = plan_script(script, "whole")

    assert kinds(plan) == ["Segment"]
    assert [turn.text for turn in plan.segments[0].turns] == [turn.text for turn in script.turns]
    speech_chars = sum(len(turn.text) for turn in script.turns) + len(script.turns) - 1
    assert plan.estimated_seconds == pytest.approx(max(1.0, speech_chars / CHARS_PER_SECOND))
    assert plan.estimated_seconds < MAX_EPISODE_MINUTES * 60
