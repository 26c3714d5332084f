"""The script-drafting stage: transcript clean-up, reading and checking LLM replies, the retry loop, both
jobs, and the script model itself.

The schema checks, retries and the failure message run for real on a tiny random Qwen2 instruct checkpoint
(built once per session, loaded through the user's code path): its replies are garbage, so every job on it
must retry and then fail clearly. A scripted stand-in for the model is used only where a test is about the
retry logic itself (what goes back into the conversation, how attempts are counted, the success path).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.settings import Settings, SettingsError
from models.instruct_chat import (
    ContextTooLongError,
    TransformersChatModel,
    load_chat_model,
)
from models.loading import ModelLoadError
from script_text.drafting import (
    ChatMessage,
    DraftingError,
    DraftInputError,
    DraftRequest,
    ModelBudget,
    default_host_names,
    draft_script,
    normalise_transcript,
)
from script_text.drafting.cleanup import clean_transcript
from script_text.drafting.jobs import (
    MAX_MODEL_TRANSCRIPT_CHARS,
    MAX_SOURCE_CHARS,
    REPLY_ECHO_CHARS,
    DraftCancelled,
    ask_for_script,
    check_source_text,
    look_alike_speakers,
)
from script_text.drafting.prompts import MAX_TURNS, SCRIPT_JSON_SCHEMA, draft_messages, normalise_messages
from script_text.drafting.replies import (
    ReplyError,
    check_cast,
    check_kept_words,
    extract_json_object,
    script_from_reply,
    script_to_text,
)
from script_text.parser import Pause, Script, Speaker, Turn, parse_script

TINY_BUDGET = ModelBudget(max_attempts=3, max_new_tokens=24)  # garbage replies stay short, so tests stay fast
UNTAGGED_TRANSCRIPT = "so I was saying hello to everyone and then Bob said yes indeed that is right"


def reply(*turns: dict[str, object], **extra: object) -> str:
    return json.dumps({"turns": list(turns), **extra})


def turn(speaker: str, text: str) -> dict[str, object]:
    return {"speaker": speaker, "text": text}


@dataclass
class ScriptedModel:
    """Answers with the given replies in order and records each conversation: for retry-logic tests only."""

    replies: list[str]
    source: str = "scripted"
    conversations: list[list[ChatMessage]] = field(default_factory=list)
    token_limits: list[int] = field(default_factory=list)

    def reply(
        self, messages: Sequence[ChatMessage], max_new_tokens: int, stop: Callable[[], bool] | None = None
    ) -> str:
        self.conversations.append(list(messages))
        self.token_limits.append(max_new_tokens)
        return self.replies[len(self.conversations) - 1]


@dataclass
class Recorded:
    """The real model, with each conversation it was asked recorded."""

    model: TransformersChatModel
    conversations: list[list[ChatMessage]] = field(default_factory=list)

    @property
    def source(self) -> str:
        return self.model.source

    def reply(
        self, messages: Sequence[ChatMessage], max_new_tokens: int, stop: Callable[[], bool] | None = None
    ) -> str:
        self.conversations.append(list(messages))
        return self.model.reply(messages, max_new_tokens, stop)


def never_loaded() -> ScriptedModel:
    raise AssertionError("the model was loaded although the parser could read the input")


@pytest.fixture(scope="session")
def tiny_chat_model(tiny_instruct_checkpoint: Path) -> TransformersChatModel:
    return load_chat_model(str(tiny_instruct_checkpoint), device="cpu")


# --- transcript clean-up ------------------------------------------------------------------------


def test_cleanup_turns_a_subtitle_style_transcript_into_a_script() -> None:
    transcript = (
        "WEBVTT\n\n1\n00:00:01.000 --> 00:00:04.000\n"
        "[00:00:01] ALICE: Hi there [laughs] and welcome.\n\n"
        "2\n00:00:05,000 --> 00:00:07,000\n"
        "00:00:05 Bob: Thanks (chuckles). [crosstalk]\n"
        "Alice Smith  00:01:23\n"
        "So [pause] where were we? (long pause) Right.\n"
    )
    assert clean_transcript(transcript) == (
        "ALICE: Hi there and welcome.\nBob: Thanks.\nAlice Smith:\nSo [pause: 1s] where were we? [pause: 2s] Right."
    )


@pytest.mark.parametrize(
    ("line", "cleaned"),
    [
        ("[00:01:23] Alice: Hi.", "Alice: Hi."),
        ("(1:23) Alice: Hi.", "Alice: Hi."),
        ("00:01:23 Alice: Hi.", "Alice: Hi."),
        ("01:23 - Alice: Hi.", "Alice: Hi."),
        ("01:23 [Alice] Hi.", "[Alice] Hi."),
        ("10:30 works for me", "10:30 works for me"),
        ("Alice: see you at 10:30", "Alice: see you at 10:30"),
        ("Alice: see you (00:03:12) soon", "Alice: see you soon"),
        ("Alice Smith  00:01:23", "Alice Smith:"),
        ("Speaker 2 (00:01:23)", "Speaker 2:"),
        ("We said 00:01:23", "We said 00:01:23"),
        ("Alice: Hi (laughs).", "Alice: Hi."),
        ("Alice: Hi [door slams] there", "Alice: Hi there"),
        ("Alice: Hi [Laughter] there", "Alice: Hi there"),
        ("Alice: Hi *sighs* there", "Alice: Hi there"),
        ("Alice: Hi *really* there", "Alice: Hi *really* there"),
        ("Alice: Hi (which is fun) there", "Alice: Hi (which is fun) there"),
        ("Alice: So [pause] yes", "Alice: So [pause: 1s] yes"),
        ("Alice: So (short silence) yes", "Alice: So [pause: 500ms] yes"),
        ("Alice: So [pause: 800ms] yes", "Alice: So [pause: 800ms] yes"),
        ("[Alice] Hello", "[Alice] Hello"),
        ("Alice: ok [[laughs]] fine", "Alice: ok fine"),
        ("Alice: ok [inaudible 00:03:12] fine", "Alice: ok fine"),
        ("Alice: ok [[[x]]] fine", "Alice: ok [] fine"),
        ("42", ""),
        ("00:00:01,000 --> 00:00:02,500 align:start", ""),
    ],
)
def test_cleanup_of_one_line(line: str, cleaned: str) -> None:
    assert clean_transcript(line) == cleaned


@pytest.mark.parametrize(
    "hostile",
    [
        "[" * 50_000 + "x" + "]" * 50_000,
        "(" * 100_000,
        "[a" * 50_000,
        "1:" * 50_000,
        "*a" * 50_000,
        "a " * 50_000 + "00:00",
    ],
)
def test_cleanup_of_hostile_input_is_linear(hostile: str) -> None:
    # This process's CPU time, not the wall clock: what a backtracking pattern burns, whatever else the machine runs.
    started = time.process_time()
    clean_transcript(hostile)
    assert time.process_time() - started < 1.0  # ReDoS guard, generous bound


# --- reading replies ------------------------------------------------------------------------------


def test_a_reply_in_prose_and_a_code_fence_is_read() -> None:
    text = (
        'Sure! Here it is:\n```json\n{"turns": [{"speaker": "Alice", "text": "Hi."}, {"pause": "800ms"}]}\n```\nEnjoy.'
    )
    script = script_from_reply(text)
    assert script.speakers == (Speaker("Alice", "Alice"),)
    assert script.items == (Turn(0, "Hi.", 1), Pause(0.8, 1))


def test_extra_top_level_keys_are_ignored() -> None:
    assert len(script_from_reply(reply(turn("Alice", "Hi."), title="Episode 1")).turns) == 1


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("I cannot help with that.", "the reply has no JSON object"),
        ("{{{{{{", "the reply is not valid JSON: Expecting property name"),
        ('{"turns": [', "the reply is not valid JSON"),
        ('{"turns": ' + "[" * 100_000, "nested too deeply"),
        ('{"script": []}', 'needs a non-empty "turns" list'),
        ('{"turns": []}', 'needs a non-empty "turns" list'),
        ('{"turns": "Alice: hi"}', 'needs a non-empty "turns" list'),
        ('{"turns": ["Alice: hi"]}', "turn #1 is not an object"),
        (reply(turn("Alice", "Hi."), {"speaker": "Bob", "text": "Yo", "emotion": "happy"}), 'turn #2 has "emotion"'),
        (reply({"speaker": "Alice"}), 'turn #1 has "speaker"; a turn has exactly "speaker" and "text"'),
        (reply({"speaker": 1, "text": "Hi."}), "must be the speaker's name as a string"),
        (reply(turn("Alice", "  ")), '"text" must be a non-empty string'),
        (reply(turn("Alice", "Hi."), {"pause": "40s"}), 'turn #2: pause "40s" is out of range'),
        (reply(turn("Alice", "Hi."), {"pause": "soon"}), 'turn #2 has pause "soon"'),
        (reply(turn("Alice: Bob", "Hi.")), 'turn #1 has speaker "Alice: Bob"'),
        (reply(*(turn(name, "Hi.") for name in ("A", "B", "C", "D", "E"))), "E would be a 5th speaker"),
        (reply(*([turn("Alice", "Hi.")] * (MAX_TURNS + 1))), f"at most {MAX_TURNS:,} are allowed"),
    ],
)
def test_unacceptable_replies_say_what_to_fix(text: str, problem: str) -> None:
    with pytest.raises(ReplyError) as rejected:
        script_from_reply(text)
    assert problem in str(rejected.value)
    assert "\n" not in str(rejected.value)


def test_only_the_first_brace_is_tried() -> None:
    with pytest.raises(ReplyError, match="not valid JSON"):
        extract_json_object('{broken {"turns": [{"speaker": "A", "text": "x"}]}')


def test_the_cast_must_be_exactly_the_hosts_and_is_spelled_as_asked() -> None:
    script = script_from_reply(reply(turn("alice", "Hi."), turn("BOB", "Hello.")))
    renamed = check_cast(script, ("Alice", "Bob"))
    assert [speaker.name for speaker in renamed.speakers] == ["Alice", "Bob"]
    with pytest.raises(ReplyError, match="the speakers must be exactly Alice, Bob and Carol; Carol never speaks"):
        check_cast(script, ("Alice", "Bob", "Carol"))
    with pytest.raises(ReplyError, match="BOB is not a host and Carol never speaks"):
        check_cast(script, ("Alice", "Carol"))


def test_a_normalised_script_keeps_the_transcripts_words() -> None:
    script = script_from_reply(reply(turn("Alice", "one two three four five")))
    check_kept_words(script, 10)
    with pytest.raises(ReplyError, match="keep everything that is said"):
        check_kept_words(script, 100)
    with pytest.raises(ReplyError, match="add nothing that was not said"):
        check_kept_words(script_from_reply(reply(turn("Alice", "word " * 200))), 10)


def test_the_schema_matches_the_checks() -> None:
    turns = SCRIPT_JSON_SCHEMA["properties"]["turns"]  # type: ignore[index]
    assert turns["maxItems"] == MAX_TURNS
    kinds = [set(kind["required"]) for kind in turns["items"]["oneOf"]]
    assert kinds == [{"speaker", "text"}, {"pause"}]


names = st.sampled_from(["Alice", "Speaker 3", "Dr. O'Neil", "Ann-Marie Lee"])  # at most 4 speakers
spoken = st.text(alphabet="abc XYZ.,!?'", min_size=1, max_size=30).filter(lambda text: text.strip(".,!?' "))
items = st.one_of(st.tuples(names, spoken), st.floats(0.05, 30.0, allow_nan=False))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(items, min_size=1, max_size=8).filter(lambda chosen: any(isinstance(item, tuple) for item in chosen)))
def test_script_text_reads_back_as_the_same_script(chosen: list[tuple[str, str] | float]) -> None:
    document = {"turns": [turn(*item) if isinstance(item, tuple) else {"pause": item} for item in chosen]}
    script = parse_script(json.dumps(document))
    again = parse_script(script_to_text(script))
    assert again.speakers == script.speakers
    assert [_without_line(item) for item in again.items] == [_without_line(item) for item in script.items]


def _without_line(item: Turn | Pause) -> tuple[object, ...]:
    return (item.speaker, item.text) if isinstance(item, Turn) else (item.seconds,)


# --- the retry loop (scripted model) -------------------------------------------------------------------


def test_a_rejected_reply_goes_back_with_the_reason_and_the_next_one_is_taken() -> None:
    model = ScriptedModel(["not json", reply(turn("Alice", "Hi."))])
    messages = [ChatMessage("system", "rules"), ChatMessage("user", "material")]
    script, attempts = ask_for_script(model, messages, script_from_reply, max_attempts=3, max_new_tokens=99)
    assert attempts == 2
    assert script.turns[0].text == "Hi."
    retry = model.conversations[1]
    assert retry[:2] == messages
    assert retry[2] == ChatMessage("assistant", "not json")
    assert retry[3].role == "user"
    assert "Your reply was rejected: the reply has no JSON object" in retry[3].content
    assert model.token_limits == [99, 99]


def test_every_reply_rejected_fails_with_the_last_reason() -> None:
    model = ScriptedModel(["nothing", "{bad", reply({"speaker": "Alice"})])
    with pytest.raises(DraftingError) as failed:
        ask_for_script(model, [ChatMessage("user", "x")], script_from_reply, max_attempts=3, max_new_tokens=10)
    assert len(model.conversations) == 3
    assert [len(conversation) for conversation in model.conversations] == [1, 3, 5]
    assert failed.value.attempts == 3
    message = str(failed.value)
    assert message.startswith("the script model (scripted) gave no valid script in 3 attempts;")
    assert message.endswith('turn #1 has "speaker"; a turn has exactly "speaker" and "text", a pause only "pause"')


def test_a_long_rejected_reply_is_echoed_only_in_part() -> None:
    model = ScriptedModel(["x" * (REPLY_ECHO_CHARS * 5), reply(turn("Alice", "Hi."))])
    ask_for_script(model, [ChatMessage("user", "x")], script_from_reply, max_attempts=2, max_new_tokens=10)
    assert model.conversations[1][1].content == "x" * REPLY_ECHO_CHARS


def test_one_attempt_means_no_retry() -> None:
    model = ScriptedModel(["nothing"])
    with pytest.raises(DraftingError, match="in 1 attempt;"):
        ask_for_script(model, [ChatMessage("user", "x")], script_from_reply, max_attempts=1, max_new_tokens=10)


# --- the jobs --------------------------------------------------------------------------------------------


def test_a_transcript_the_parser_reads_never_loads_the_model() -> None:
    result = normalise_transcript("Alice: Hi.\n\nBob: Hello.\n", never_loaded, TINY_BUDGET)
    assert result.via == "parser"
    assert result.attempts == 0
    assert result.text == "Alice: Hi.\nBob: Hello.\n"
    assert result.script == parse_script(result.text)


def test_a_transcript_the_cleanup_fixes_never_loads_the_model() -> None:
    result = normalise_transcript("[00:00:01] Alice: Hi (laughs).\n00:00:02 Bob: Hello.\n", never_loaded, TINY_BUDGET)
    assert result.via == "cleanup"
    assert result.text == "Alice: Hi.\nBob: Hello.\n"


def test_names_that_may_be_one_person_are_pointed_out() -> None:
    result = normalise_transcript("Alice: Hi.\nAlice Smith: Hello.\nBob: Yo.\n", never_loaded, TINY_BUDGET)
    assert look_alike_speakers(result.script) == [("Alice", "Alice Smith")]
    assert result.notes == (
        "'Alice' and 'Alice Smith' may be the same person; rerun with the script model to merge them",
    )


def test_a_transcript_the_parser_cannot_read_goes_to_the_model() -> None:
    words = UNTAGGED_TRANSCRIPT.split()
    model = ScriptedModel([reply(turn("Narrator", " ".join(words[:8])), turn("Bob", " ".join(words[8:])))])
    result = normalise_transcript(UNTAGGED_TRANSCRIPT + " [laughs]", lambda: model, ModelBudget(3, 10_000))
    assert result.via == "model"
    assert result.attempts == 1
    assert result.text.startswith("Narrator: so I was saying")
    user_message = model.conversations[0][1].content
    assert UNTAGGED_TRANSCRIPT in user_message and "[laughs]" not in user_message
    assert model.token_limits == [len(UNTAGGED_TRANSCRIPT) // 3 + 256]


def test_force_model_sends_even_a_clean_script_to_the_model() -> None:
    model = ScriptedModel([reply(turn("Alice", "Hi there."), turn("Bob", "Hello."))])
    result = normalise_transcript("Alice: Hi there.\nBob: Hello.\n", lambda: model, TINY_BUDGET, force_model=True)
    assert result.via == "model"
    assert len(model.conversations) == 1


def test_a_model_reply_that_drops_the_transcript_is_retried() -> None:
    model = ScriptedModel([reply(turn("Alice", "hello")), reply(turn("Alice", UNTAGGED_TRANSCRIPT))])
    result = normalise_transcript(UNTAGGED_TRANSCRIPT, lambda: model, TINY_BUDGET)
    assert result.attempts == 2
    assert "keep everything that is said" in model.conversations[1][-1].content


def test_transcripts_the_stage_refuses() -> None:
    with pytest.raises(DraftInputError, match="the transcript is empty"):
        normalise_transcript(" \n ", never_loaded, TINY_BUDGET)
    with pytest.raises(DraftInputError, match=f"rewrites at most {MAX_MODEL_TRANSCRIPT_CHARS:,}") as refused:
        normalise_transcript("word " * MAX_MODEL_TRANSCRIPT_CHARS, never_loaded, TINY_BUDGET)
    assert refused.value.field == "text"


def test_a_draft_uses_the_hosts_names_as_asked() -> None:
    model = ScriptedModel(
        [
            reply(turn("alice", "Welcome."), turn("Zed", "Hi.")),
            reply(turn("alice", "Welcome."), {"pause": "1s"}, turn("BOB", "Thanks.")),
        ]
    )
    request = DraftRequest(names=("Alice", "Bob"), minutes=2, tone="playful")
    result = draft_script("Notes about tea.", request, model, ModelBudget(3, 10_000))
    assert result.text == "Alice: Welcome.\n[pause: 1s]\nBob: Thanks.\n"
    assert result.attempts == 2
    assert "Zed is not a host and Bob never speaks" in model.conversations[1][-1].content
    assert model.token_limits[0] == 2 * 300 + 256
    system, user = model.conversations[0][:2]
    assert '"Alice" and "Bob"' in system.content and "about 300 words" in system.content and "playful" in system.content
    assert "<<<\nNotes about tea.\n>>>" in user.content


def test_a_long_draft_is_capped_by_the_budget() -> None:
    model = ScriptedModel([reply(turn("Alice", "Hi."))])
    draft_script("Notes.", DraftRequest(names=("Alice",), minutes=90), model, ModelBudget(1, 16_384))
    assert model.token_limits == [16_384]


def test_prompts_name_the_cast_and_the_format() -> None:
    monologue = draft_messages("x", ("Ann",), 1, 150, "calm")[0].content
    assert 'This is a monologue: every turn\'s "speaker" is "Ann".' in monologue
    assert '{"turns": [{"speaker": "Ann"' in monologue
    normalise = normalise_messages("t")[0].content
    assert "Reply with a single JSON object and nothing else" in normalise


@pytest.mark.parametrize(
    ("make", "field_name"),
    [
        (lambda: DraftRequest(names=(), minutes=5), "names"),
        (lambda: DraftRequest(names=("A", "B", "C", "D", "E"), minutes=5), "names"),
        (lambda: DraftRequest(names=("Ann", "ann"), minutes=5), "names"),
        (lambda: DraftRequest(names=("Ann", "B:b"), minutes=5), "names"),
        (lambda: DraftRequest(names=("Ann", ""), minutes=5), "names"),
        (lambda: DraftRequest(names=("Ann",), minutes=0.5), "minutes"),
        (lambda: DraftRequest(names=("Ann",), minutes=91), "minutes"),
        (lambda: DraftRequest(names=("Ann",), minutes=float("nan")), "minutes"),
        (lambda: DraftRequest(names=("Ann",), minutes=5, tone=""), "tone"),
        (lambda: DraftRequest(names=("Ann",), minutes=5, tone="x" * 121), "tone"),
        (lambda: default_host_names(0), "hosts"),
        (lambda: default_host_names(5), "hosts"),
        (lambda: ModelBudget(max_attempts=0), "max_attempts"),
        (lambda: ModelBudget(max_attempts=11), "max_attempts"),
        (lambda: ModelBudget(max_new_tokens=8), "max_new_tokens"),
        (lambda: check_source_text("   "), "text"),
        (lambda: check_source_text("x" * (MAX_SOURCE_CHARS + 1)), "text"),
    ],
)
def test_requests_the_stage_refuses(make: object, field_name: str) -> None:
    with pytest.raises(DraftInputError) as refused:
        make()  # type: ignore[operator]
    assert refused.value.field == field_name


@dataclass
class Watcher:
    """An attempt observer that records what it hears and cancels once `cancel_at` attempts have started."""

    cancel_at: int | None = None
    heard: list[tuple[str, int, str]] = field(default_factory=list)

    def started(self, attempt: int) -> None:
        self.heard.append(("started", attempt, ""))

    def rejected(self, attempt: int, reason: str) -> None:
        self.heard.append(("rejected", attempt, reason))

    def cancelled(self) -> bool:
        return self.cancel_at is not None and sum(kind == "started" for kind, _, _ in self.heard) >= self.cancel_at


def test_an_observer_hears_each_attempt_and_each_rejection_with_its_reason() -> None:
    model = ScriptedModel(["not json", reply(turn("Alice", "Hi."))])
    watcher = Watcher()
    _, attempts = ask_for_script(
        model, [ChatMessage("user", "x")], script_from_reply, max_attempts=3, max_new_tokens=9, observer=watcher
    )
    assert attempts == 2
    assert [(kind, number) for kind, number, _ in watcher.heard] == [("started", 1), ("rejected", 1), ("started", 2)]
    assert watcher.heard[1][2].startswith("the reply has no JSON object")


def test_broken_json_reads_plainly_to_the_user_while_the_model_gets_the_decoders_detail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with pytest.raises(ReplyError) as rejected:
        extract_json_object('{"turns": [')
    assert "not valid JSON: Expecting value (line 1, column 12)" in str(rejected.value)
    assert rejected.value.shown == "the reply was broken JSON, so no script could be read from it"
    model, watcher = ScriptedModel(['{"turns": [', "{bad"]), Watcher()
    with caplog.at_level("INFO", logger="script_text.drafting.jobs"), pytest.raises(DraftingError) as failed:
        ask_for_script(
            model, [ChatMessage("user", "x")], script_from_reply, max_attempts=2, max_new_tokens=9, observer=watcher
        )
    assert "Expecting value (line 1, column 12)" in model.conversations[1][-1].content  # what to fix, for the model
    assert [reason for kind, _, reason in watcher.heard if kind == "rejected"] == [rejected.value.shown] * 2
    assert str(failed.value).endswith(f"rejected because {rejected.value.shown}") and "column" not in str(failed.value)
    logged = [(record.attempt, record.problem) for record in caplog.records]  # the detail stays in the logs
    assert logged[0] == (1, str(rejected.value)) and logged[1][0] == 2 and "(line 1, column 2)" in logged[1][1]


def test_a_cancelled_observer_ends_the_job_without_another_attempt() -> None:
    model = ScriptedModel(["not json", reply(turn("Alice", "Hi."))])
    with pytest.raises(DraftCancelled, match="during attempt 1"):
        ask_for_script(
            model, [ChatMessage("user", "x")], script_from_reply, max_attempts=3, max_new_tokens=9,
            observer=Watcher(cancel_at=1),
        )  # fmt: skip
    assert len(model.conversations) == 1


def test_default_hosts() -> None:
    assert default_host_names(3) == ("Alice", "Bob", "Carol")
    assert DraftRequest(names=("Speaker 1", "Dr. Lee"), minutes=10).target_words == 1500


# --- the real (tiny, random) script model ------------------------------------------------------------------


def test_the_tiny_model_replies_with_a_json_object_opening(tiny_chat_model: TransformersChatModel) -> None:
    answer = tiny_chat_model.reply(normalise_messages("Alice: hi"), max_new_tokens=8)
    assert answer.startswith("{")


def test_a_draft_on_the_tiny_model_retries_and_fails_clearly(tiny_chat_model: TransformersChatModel) -> None:
    model = Recorded(tiny_chat_model)
    request = DraftRequest(names=("Alice", "Bob"), minutes=1)
    with pytest.raises(DraftingError) as failed:
        draft_script("Notes about tea: green, black, oolong.", request, model, TINY_BUDGET)
    assert [len(conversation) for conversation in model.conversations] == [2, 4, 6]
    assert all(message.role == "assistant" for message in model.conversations[2][2::2])
    assert "Your reply was rejected:" in model.conversations[1][3].content
    message = str(failed.value)
    assert message.startswith(f"the script model ({tiny_chat_model.source}) gave no valid script in 3 attempts;")
    assert failed.value.last_problem in message


def test_normalising_on_the_tiny_model_retries_and_fails_clearly(tiny_chat_model: TransformersChatModel) -> None:
    model = Recorded(tiny_chat_model)
    with pytest.raises(DraftingError, match="gave no valid script in 2 attempts"):
        normalise_transcript("Alice: Hi.\nBob: Hello.", lambda: model, ModelBudget(2, 24), force_model=True)
    assert len(model.conversations) == 2


def test_a_reply_stops_within_a_token_of_being_told(tiny_chat_model: TransformersChatModel) -> None:
    asked = 0

    def stop() -> bool:
        nonlocal asked
        asked += 1
        return asked >= 3

    whole = tiny_chat_model.tokenizer(tiny_chat_model.reply(normalise_messages("Alice: hi"), 40))["input_ids"]
    stopped = tiny_chat_model.tokenizer(tiny_chat_model.reply(normalise_messages("Alice: hi"), 40, stop))["input_ids"]
    assert asked == 3
    assert len(stopped) < len(whole)


def test_a_conversation_longer_than_the_context_is_refused(tiny_instruct_checkpoint: Path) -> None:
    model = load_chat_model(str(tiny_instruct_checkpoint), device="cpu")
    model.model.config.max_position_embeddings = 64
    with pytest.raises(ContextTooLongError, match="holds 64"):
        model.reply(normalise_messages("Alice: hi " * 50), max_new_tokens=8)


def test_tiny_random_builds_its_model_on_the_fly() -> None:
    model = load_chat_model("tiny-random", device="cpu")
    assert model.source == "tiny-random"
    assert model.is_tiny_random
    assert model.tokenizer.chat_template


def test_a_checkpoint_without_a_chat_template_is_refused(tiny_instruct_checkpoint: Path, tmp_path: Path) -> None:
    base = shutil.copytree(tiny_instruct_checkpoint, tmp_path / "base")
    (base / "chat_template.jinja").unlink()
    with pytest.raises(ModelLoadError, match="has no chat template, so it is not an instruct model"):
        load_chat_model(str(base), device="cpu")


def test_a_vibevoice_checkpoint_is_not_a_script_model(tiny_hf_checkpoint: Path) -> None:
    with pytest.raises(ModelLoadError, match="cannot load a script model from"):
        load_chat_model(str(tiny_hf_checkpoint), device="cpu")


def test_a_file_or_an_empty_folder_is_not_a_script_model(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is a file"):
        load_chat_model(str(tmp_path / "model.bin"), device="cpu")
    with pytest.raises(ModelLoadError, match="no config.json"):
        load_chat_model(str(tmp_path), device="cpu")


def test_an_unreachable_hub_says_how_to_pass_a_local_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as refused:
        load_chat_model("Qwen/Qwen2.5-1.5B-Instruct", device="cpu")
    message = str(refused.value)
    assert message.startswith("no script model available: cannot reach the Hugging Face hub")
    assert "--script-model /path/to/Qwen2.5-1.5B-Instruct" in message
    assert "--model " not in message
    assert "\n" not in message


# --- settings ------------------------------------------------------------------------------------------------


def test_script_settings_come_from_the_environment() -> None:
    assert Settings().script_model == "Qwen/Qwen2.5-1.5B-Instruct"
    settings_from_env = Settings.from_env(
        {
            "VOXCAST_SCRIPT_MODEL": "/models/qwen",
            "VOXCAST_SCRIPT_MAX_ATTEMPTS": "5",
            "VOXCAST_SCRIPT_MAX_NEW_TOKENS": "64",
        }
    )
    assert (settings_from_env.script_model, settings_from_env.script_max_attempts) == ("/models/qwen", 5)
    assert settings_from_env.script_max_new_tokens == 64
    with pytest.raises(SettingsError, match="VOXCAST_SCRIPT_MAX_ATTEMPTS"):
        Settings.from_env({"VOXCAST_SCRIPT_MAX_ATTEMPTS": "three"})


def test_a_script_from_the_model_is_one_the_pipeline_takes() -> None:
    model = ScriptedModel([reply(turn("Alice", "Hi."), turn("Bob", "Hello."))])
    result = draft_script("x", DraftRequest(names=("Alice", "Bob"), minutes=1), model, TINY_BUDGET)
    assert isinstance(result.script, Script)
    assert result.script == parse_script(result.text)
    assert result.words == 2
