"""Every request and response body of the api, in one place."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from api.params import ID_PATTERN, MAX_DATABASE_INT
from api.podcast_categories import split_category
from core.audio_formats import BITRATES, AudioFormat, BitrateFormat
from core.job_events import AudioEvent, ProgressEvent, SegmentEvent
from core.job_states import JobState, QueueKind
from core.text_rules import drop_bidi_controls, forbidden_character
from core.worker_presence import SupervisedWorker, SupervisedWorkerState
from script_text.plan import SEEDS, Mode

SpeechFormat = Literal["mp3", "opus", "flac", "wav", "pcm"]
MAX_SEED = SEEDS - 1
# Names, titles and keys are printable text: control characters (NUL among them, which PostgreSQL refuses to
# store) have no place in them.
PRINTABLE_TEXT = r"^[^\x00-\x1f\x7f-\x9f]*$"
ShortText = Annotated[str, Field(min_length=1, max_length=100, pattern=PRINTABLE_TEXT)]


def _published(single_line: bool) -> BeforeValidator:
    """The rule for text a feed, an MP3's tags and a web page carry (`core.text_rules`): a character they cannot
    carry is refused, naming its position; bidirectional controls are dropped."""

    def check(value: object) -> object:
        if not isinstance(value, str):
            return value  # the type's own check says what is wrong
        found = forbidden_character(value, single_line)
        if found is not None:
            raise PydanticCustomError("forbidden_character", "{reason}", {"reason": found.message(single_line)})
        return drop_bidi_controls(value)

    return BeforeValidator(check)


# A title, an author: one line of published text.
TitleText = Annotated[str, Field(min_length=1, max_length=200), _published(single_line=True)]
# Show notes: line breaks are welcome. Apple Podcasts reads at most 4,000 characters of a description.
DescriptionText = Annotated[str, Field(min_length=1, max_length=4000), _published(single_line=False)]
LanguageTag = Annotated[
    str,
    Field(
        max_length=35,  # RFC 5646's advice for a tag's storage: 35 characters hold every tag in use
        pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$",
        description="a BCP 47 language tag: 'en', 'en-GB', 'de'",
    ),
]
ShowType = Literal["episodic", "serial"]
MAX_EMAIL_CHARS = 254  # RFC 5321's longest address


def _email_address(value: str) -> str:
    if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", value):
        raise PydanticCustomError("email", "an email address reads name@example.com: one @, a dotted domain, no spaces")
    return value


EmailAddress = Annotated[
    str, Field(max_length=MAX_EMAIL_CHARS), _published(single_line=True), AfterValidator(_email_address)
]
MAX_SPEECH_INPUT_CHARS = 4096  # OpenAI's limit; about five minutes of speech, one generation


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


_DEFAULT_FORMATS: list[AudioFormat] = ["wav", "mp3"]


class GenerationParams(_Body):
    """Quality knobs; the defaults are the original VibeVoice demo's."""

    cfg_scale: float = Field(1.3, ge=1.0, le=10.0)
    diffusion_steps: int = Field(10, ge=1, le=100)
    seed: int = Field(0, ge=0, le=MAX_SEED)


_BITRATE_CHOICES = "; ".join(
    f"{name} {', '.join(map(str, bitrates.choices))} (default {bitrates.default})"
    for name, bitrates in BITRATES.items()
)


class EpisodeOptions(_Body):
    """A job as an episode of one of the key's shows: listed in the show's feed once it is done (its MP3 is the
    enclosure, so the job must ask for `mp3`)."""

    show_id: str = Field(max_length=32, pattern=ID_PATTERN, description="one of this key's shows (`POST /v1/shows`)")
    title: TitleText = Field(description="the episode's title in the feed and its MP3's tags")
    description: DescriptionText | None = Field(None, description="the episode's notes (up to 4,000 characters)")
    number: int | None = Field(None, ge=1, le=MAX_DATABASE_INT, description="its number in the show, from 1")
    season: int | None = Field(None, ge=1, le=MAX_DATABASE_INT, description="the season it belongs to, from 1")


class JobOptions(_Body):
    """Everything about a job but its script (the multipart form carries these as one JSON part)."""

    voices: dict[ShortText, ShortText] = Field(
        default_factory=dict,
        description="speaker (number, name or key as in the script) -> voice id; inline uploads fill the rest",
    )
    mode: Mode = "whole"
    formats: list[AudioFormat] = Field(default_factory=lambda: _DEFAULT_FORMATS.copy(), min_length=1, max_length=5)
    kbps: dict[BitrateFormat, int] = Field(
        default_factory=dict, description=f"a lossy format's bitrate in kbit/s: {_BITRATE_CHOICES}"
    )
    settings: GenerationParams = Field(default_factory=GenerationParams)
    queue: QueueKind | None = Field(
        None,
        description="absent: `interactive` when the job's estimated audio is short (VOXCAST_INTERACTIVE_MAX_SECONDS, "
        "default 120 s), else `batch`",
    )
    priority: int = Field(5, ge=0, le=9, description="0..9; higher runs sooner within its queue")
    title: Annotated[str, Field(max_length=200), _published(single_line=True)] | None = Field(
        None, description="what the studio lists it as; its MP3's title when it is no show's episode"
    )
    episode: EpisodeOptions | None = Field(
        None, description="publish it as an episode of one of this key's shows once it is done; needs `mp3`"
    )

    @field_validator("kbps")
    @classmethod
    def _offered_bitrates(cls, kbps: dict[str, int]) -> dict[str, int]:
        for name, rate in kbps.items():
            bitrates = BITRATES[name]
            if rate not in bitrates.choices:
                allowed = ", ".join(str(choice) for choice in bitrates.choices)
                raise ValueError(f"{name} is written at {allowed} kbit/s, not {rate}")
        return kbps


class JobCreate(JobOptions):
    script: str = Field(description="the script text: 'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON")


class ScriptDraftOptions(_Body):
    """Drafting a script from notes; hosts, length and tone are checked by the drafting stage's own rules."""

    task: Literal["draft"]
    hosts: int | None = Field(None, description="1 to 4; absent: as many as `names`, or 2")
    names: list[str] | None = Field(
        None, description="the hosts' names in speaking order; absent: Alice, Bob, Carol, Dave (as many as `hosts`)"
    )
    minutes: float = Field(10, description="the length to aim for, 1 to 90 minutes")
    tone: str | None = Field(None, description="one line, up to 120 characters; absent: warm, curious and clear")


class ScriptNormaliseOptions(_Body):
    """Cleaning up a transcript: the parser first, then the deterministic clean-up, then the script model."""

    task: Literal["normalise"]
    force_model: bool = Field(False, description="rewrite it with the script model even if the parser reads it")


ScriptOptions = Annotated[ScriptDraftOptions | ScriptNormaliseOptions, Field(discriminator="task")]


class ScriptDraftCreate(ScriptDraftOptions):
    material: str = Field(description="notes or an article to draft from (at most 30,000 characters)")


class ScriptNormaliseCreate(ScriptNormaliseOptions):
    transcript: str = Field(description="a rough transcript: timestamps, cues and stage directions are fine")


ScriptCreate = Annotated[ScriptDraftCreate | ScriptNormaliseCreate, Field(discriminator="task")]


class ScriptAttemptView(BaseModel):
    attempt: int = Field(description="1 for the model's first reply")
    rejected: str | None = Field(description="why the reply was not taken; null while it is written, or once taken")


class ScriptView(BaseModel):
    id: str
    task: Literal["draft", "normalise"]
    state: JobState
    names: list[str] | None = Field(description="draft: the hosts")
    minutes: float | None = Field(description="draft: the length aimed for")
    tone: str | None = Field(description="draft: the tone")
    force_model: bool | None = Field(description="normalise: whether the model rewrites it whatever the parser says")
    attempts: list[ScriptAttemptView] = Field(description="the script model's replies so far, each with its verdict")
    max_attempts: int = Field(description="replies allowed before the job fails (VOXCAST_SCRIPT_MAX_ATTEMPTS)")
    script: str | None = Field(description="the script, as `Name: text` lines, once done")
    via: Literal["parser", "cleanup", "model"] | None = Field(
        description="what made the script: the parser as sent, after the deterministic clean-up, or the model"
    )
    speakers: list[str] = Field(description="the script's speakers, once done")
    words: int | None = Field(description="the script's spoken words, once done")
    notes: list[str] = Field(description="things worth a look, such as two names that may be one person")
    error: str | None = Field(description="why it failed, ending with the last rejected reply's reason")
    cancel_requested: bool
    handbacks: int = Field(
        description="times its scripts worker gave it back on a planned stop (the service stopped or restarted): it "
        "was queued again and starts over"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner_id: int


class ScriptList(BaseModel):
    scripts: list[ScriptView]


class JobProgress(BaseModel):
    frames_done: int
    frames_planned: int
    audio_seconds_done: float
    audio_seconds_planned: float
    segments_done: int
    segments_total: int
    eta_seconds: float | None


class JobOutputs(BaseModel):
    """Download links of a finished job: one per requested audio format, plus transcript and chapters."""

    audio: dict[str, str]
    srt: str
    vtt: str
    chapters: str = Field(description="chapter marks in the Podcasting 2.0 JSON chapters format")
    turns: str = Field(description="every turn's timing (`index` is what a regeneration names)")


class ScriptWarningView(BaseModel):
    line: int
    message: str


class PreviousSegment(BaseModel):
    index: int
    audio: str = Field(description="the segment as it was before the last regeneration")


class PreviousTake(BaseModel):
    """The segments the last regeneration replaced, kept until the listener keeps one take (`POST .../takes`)."""

    revision: int = Field(description="the revision they were made at")
    segments: list[PreviousSegment]


class TakeChoice(_Body):
    keep: Literal["new", "previous"] = Field(
        description="`new`: the regenerated take stays and the earlier one is removed; `previous`: the earlier take "
        "comes back (the episode is assembled again at a new revision)"
    )


class EpisodeView(BaseModel):
    """A job as an episode of a show."""

    show_id: str
    show_title: str
    title: str
    description: str | None
    number: int | None
    season: int | None
    published_at: datetime | None = Field(
        description="its pubDate: when it was first listed in the feed (null until the job is done)"
    )
    guid: str = Field(description="the feed item's guid: the same for the episode whatever changes")


class JobView(BaseModel):
    id: str
    state: JobState
    mode: Mode
    queue: QueueKind
    priority: int
    title: str | None
    formats: list[str]
    kbps: dict[str, int] = Field(description="the bitrate, in kbit/s, each lossy format of the job is written at")
    settings: GenerationParams
    position: int | None = Field(description="1 for the next job to start in its queue; null unless queued")
    progress: JobProgress
    cancel_requested: bool
    error: str | None
    audio_seconds: float | None
    revision: int = Field(description="0 as submitted; +1 per regenerated turn")
    warnings: list[ScriptWarningView] = Field(
        description="what in the submitted script is likely a typo (it was generated as written): an untagged line "
        "joining the turn before it, a 'Note:' read as a speaker, a gap in speaker numbers"
    )
    attempts: int = Field(description="times a worker took the job (more than 1 after a worker died or it was retried)")
    worker_deaths: int = Field(
        description="attempts that ended with their worker dead; at VOXCAST_MAX_WORKER_DEATHS the job fails"
    )
    handbacks: int = Field(
        description="attempts its worker gave back on a planned stop (the service stopped or restarted): the job was "
        "queued again with what it had stored, and no worker death was counted"
    )
    outputs: JobOutputs | None
    regenerable: bool = Field(
        description="whether a turn can be regenerated: the job is done and keeps its segments (the retention "
        "policy removes them VOXCAST_KEEP_INTERMEDIATES_DAYS after a job ends)"
    )
    intermediates_removed_at: datetime | None = Field(
        description="when the retention policy removed the job's segments; null while it keeps them"
    )
    previous_take: PreviousTake | None = Field(
        description="after a regeneration, the take it replaced, to compare and keep either; null when none is kept"
    )
    episode: EpisodeView | None = Field(description="the show it is an episode of, if any")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner_id: int
    owner_name: str = Field(description="the name of the API key that submitted it")


class JobList(BaseModel):
    jobs: list[JobView]


class PlanTurnView(BaseModel):
    index: int = Field(description="the turn's number in the script, from 0")
    speaker: str = Field(description="the speaker's name")
    text: str = Field(
        description="what this segment speaks of the turn: a long turn generated in pieces (`turns` "
        "mode) has a piece in each of several segments"
    )


class PlanSegmentView(BaseModel):
    index: int
    estimated_seconds: float = Field(description="about how much audio it makes, before it is generated")
    turns: list[PlanTurnView]


class JobPlanView(BaseModel):
    """How the job is generated, as its workers generate it: its segments in episode order (the `segment` of its
    events), each with the turns it speaks. Within a segment each turn takes its share of the audio by its share of
    the text, the rule the transcript follows."""

    revision: int = Field(description="the script revision this plan is of")
    mode: Mode
    segments: list[PlanSegmentView]


class UsageView(BaseModel):
    """What a key keeps in the service's storage."""

    key_id: int
    key_name: str
    bytes: int = Field(description="its jobs' files (counted as expected while a job runs) and its voices")
    jobs: int
    voices: int
    audio_minutes: float = Field(description="minutes of its finished episodes")
    quota_bytes: int | None = Field(description="VOXCAST_MAX_STORAGE_BYTES; null when there is no quota")


class UsageList(BaseModel):
    keys: list[UsageView]


CategoryName = Annotated[
    str, Field(max_length=100, description="an Apple Podcasts category: 'Technology' or 'Category/Subcategory'")
]


class ShowFields(_Body):
    """What a show's feed says of it, as podcast directories require."""

    title: TitleText
    description: DescriptionText
    author: TitleText
    language: LanguageTag
    category: CategoryName
    explicit: bool = False
    owner_email: EmailAddress | None = Field(
        None,
        description="the owner's address, for directories to verify who owns the feed (its itunes:owner and "
        "podcast:locked); published in the feed, so anyone holding the feed's URL reads it",
    )
    show_type: ShowType = Field(
        "episodic", description="episodic: newest first; serial: in order, from episode 1 (apps list it that way)"
    )
    locked: bool = Field(
        False,
        description="podcast:locked: ask other hosting platforms not to import the feed (set it back to false before "
        "moving the show to another host); said only with an owner_email",
    )

    @field_validator("category")
    @classmethod
    def _listed_category(cls, category: str) -> str:
        split_category(category)
        return category


class ShowChange(_Body):
    """A show's fields to change; those left out stay as they are (`owner_email: null` removes the address)."""

    title: TitleText | None = None
    description: DescriptionText | None = None
    author: TitleText | None = None
    language: LanguageTag | None = None
    category: CategoryName | None = None
    explicit: bool | None = None
    owner_email: EmailAddress | None = None
    show_type: ShowType | None = None
    locked: bool | None = None

    @field_validator("category")
    @classmethod
    def _listed_category(cls, category: str | None) -> str | None:
        return None if category is None else ShowFields._listed_category(category)


class ShowEpisodeView(BaseModel):
    job_id: str
    title: str
    number: int | None
    season: int | None
    state: JobState = Field(description="its job's state: the feed lists it once it is done")
    published_at: datetime | None


class ShowView(BaseModel):
    id: str
    title: str
    description: str
    author: str
    language: str
    category: str
    explicit: bool
    owner_email: str | None
    show_type: ShowType
    locked: bool
    artwork: str | None = Field(description="the artwork's URL (with the key); null until one is uploaded")
    feed_url: str = Field(
        description="the feed podcast apps subscribe to; anyone holding it reads the feed and its files (no key), so "
        "rotate its token (`POST /v1/shows/{id}/feed-token`) to cut off an old one"
    )
    page_url: str = Field(
        description="the show's public web page (the feed's channel link): artwork, description, episodes with "
        "players, and the feed's URL to copy; reached by the same token as the feed"
    )
    podcast_guid: str = Field(description="the show's Podcasting 2.0 guid: it stays when the feed's URL changes")
    episodes: list[ShowEpisodeView] = Field(description="its episodes, newest first")
    created_at: datetime
    updated_at: datetime


class ShowList(BaseModel):
    shows: list[ShowView]


class CategoryList(BaseModel):
    categories: list[str] = Field(description="'Category' or 'Category/Subcategory', as a show names one")


class VoiceView(BaseModel):
    id: str
    name: str
    seconds: float
    original_sample_rate: int
    original_channels: int
    trimmed: bool
    preview: str
    created_at: datetime


class VoiceList(BaseModel):
    voices: list[VoiceView]


class VoiceRename(_Body):
    """A library voice's new name, held to the rules of an upload's `name`: 1 to 100 printable characters."""

    name: ShortText


class PriorityChange(_Body):
    priority: int = Field(ge=0, le=9)


class QueueDepth(BaseModel):
    queue: QueueKind
    waiting_in_broker: int | None = Field(description="messages in Redis; null when Redis does not answer")
    queued: int
    running: int


class QueueReport(BaseModel):
    queues: list[QueueDepth]


class TurnRegeneration(_Body):
    """A new take of one turn of a finished job: a seed (a fresh one when absent) and, optionally, new words."""

    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="the first regenerated segment's seed")
    text: str | None = Field(
        None,
        min_length=1,
        max_length=20_000,
        description="what the turn's speaker says instead: one line, no speaker or pause tags",
    )


class RegeneratedSegment(BaseModel):
    index: int
    seed: int


class RegenerationView(BaseModel):
    """The regeneration as queued: the job (queued again), its new revision, the turn and its segments."""

    job: JobView
    revision: int = Field(description="0 as submitted; +1 per regeneration")
    turn: int
    speaker: str
    text: str = Field(description="the turn's text as it will be spoken and transcribed (normalised)")
    segments: list[RegeneratedSegment] = Field(description="the segments generated again, with their new seeds")


class PlannedTurn(BaseModel):
    index: int
    speaker: str
    words: str = Field(description="the turn's first words")


class RegenerationPlan(BaseModel):
    """What regenerating a turn would do, asked before starting it; nothing changes."""

    turn: int
    segments: list[int] = Field(description="the segments that would be generated again")
    turns: list[PlannedTurn] = Field(
        description="every turn those segments hold: in `whole` mode a segment holds several, and each is spoken anew"
    )
    audio_seconds: float = Field(description="the audio those segments hold now")
    estimated_seconds: float | None = Field(
        description="about how long it would take: what those segments took when last generated (null if unknown)"
    )


VoiceName = ShortText


class VoiceRef(_Body):
    """OpenAI's custom-voice form of `voice`: `{"id": "<voice id>"}`."""

    id: VoiceName


class SpeechRequest(_Body):
    """OpenAI's `POST /v1/audio/speech` body, plus voxcast's optional `settings`."""

    model: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[\x21-\x7e]+$",
        description="any model name, echoed in X-Voxcast-Model; the worker's model speaks",
    )
    input: str = Field(min_length=1, max_length=MAX_SPEECH_INPUT_CHARS)
    voice: VoiceName | VoiceRef = Field(description="a voice id or the name of one of this key's voices, or {id}")
    response_format: SpeechFormat = "mp3"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    instructions: str | None = Field(None, max_length=4096)
    stream: bool = Field(
        False,
        description="send the audio in chunks: pcm and wav as they are generated (raw, not loudness-normalised), "
        "other formats as the finished file is read",
    )
    stream_format: Literal["audio"] | None = None
    settings: GenerationParams = Field(default_factory=GenerationParams)

    @property
    def voice_key(self) -> str:
        """The voice id or name, whichever form `voice` came in."""
        return self.voice if isinstance(self.voice, str) else self.voice.id

    @field_validator("speed")
    @classmethod
    def _natural_speed(cls, speed: float) -> float:
        if speed != 1.0:
            raise ValueError(
                "only 1.0 is supported: VibeVoice has no speaking-rate control, and voxcast does not time-stretch"
            )
        return speed

    @field_validator("instructions")
    @classmethod
    def _no_instructions(cls, instructions: str | None) -> str | None:
        if instructions and instructions.strip():
            raise ValueError("not supported: VibeVoice takes its style from the voice prompt, not from instructions")
        return instructions


class WorkerView(BaseModel):
    """A live worker process (seen within the last few heartbeats) and the jobs it is running."""

    name: str = Field(description="<host>:<pid>")
    hostname: str
    pid: int
    model: str
    device: str = Field(description="the GPU's name, or cpu")
    dtype: str
    slots: int = Field(description="generation requests the engine batches side by side")
    slots_in_use: int
    waiting: int = Field(description="generation requests waiting for a row and K/V memory")
    kv_blocks: int = Field(description="blocks of the engine's paged K/V pool")
    kv_blocks_in_use: int
    kv_block_tokens: int = Field(description="tokens one block holds (both CFG branches draw from the pool)")
    longest_generation_tokens: int = Field(
        description="prompt plus new tokens one generation may reach on this worker: the model's context, "
        "or what the pool holds (7.5 tokens are a second of audio)"
    )
    chars_per_token: float = Field(description="its tokenizer's characters per token on English text")
    model_name: str = Field(
        "", description="the published model it runs (VibeVoice-1.5B, VibeVoice-Large), else its source"
    )
    context_tokens: int | None = Field(
        None, description="its model's context: prompt plus new tokens of one generation never exceed it"
    )
    preemptions: int = Field(description="generations preempted for memory or interactive work, then replayed")
    frames_per_second: float = Field(0.0, description="frames its engine made a second lately (7.5: real time)")
    step_mode: str = Field(
        "eager",
        description="how its engine decodes: graphs (the fixed-shape step as CUDA graphs), fixed (that step run "
        "eagerly) or eager (the data-shaped step)",
    )
    step_mode_reason: str = Field("", description="why: as configured, or what made it fall back (one line)")
    cuda_graphs: int = Field(0, description="decode-step CUDA graphs its engine holds")
    warm_up_seconds: float | None = Field(
        None, description="seconds it spent capturing graphs and checking its fast path before serving"
    )
    kv_read_ratio: float | None = Field(
        None, description="K/V entries its attention read per entry its rows could see, since it started (1.0 at best)"
    )
    running_jobs: list[str]
    started_at: datetime
    seen_at: datetime


class WorkerList(BaseModel):
    workers: list[WorkerView]
    supervised: SupervisedWorker | None = Field(
        description="the worker `voxcast serve` supervises beside this api (null for an api run alone)"
    )


class SupervisedWorkerHealth(BaseModel):
    """The supervised worker as `/health` shows it: its state, not its jobs (the route needs no key)."""

    state: SupervisedWorkerState
    restarts: int
    last_exit: str | None
    next_start_in_seconds: float | None


class HealthView(BaseModel):
    """Whether the service can take and run jobs, and what is missing when it cannot."""

    status: Literal["ok", "degraded", "down"] = Field(
        description="ok; degraded: jobs are taken but may wait (no live worker, Redis down, worker restarting); "
        "down: the database does not answer"
    )
    database: str = Field(description='"ok" or why not')
    redis: str = Field(description='"ok" or why not')
    workers: int = Field(description="live workers (announced in Redis within the last few heartbeats)")
    stalled_loops: list[str] = Field(
        default_factory=list,
        description="background loops a worker runs (its sweeper, its announcements) that have not completed a round "
        'in time, as "<worker>: <loop>"; any makes the service degraded',
    )
    supervised_worker: SupervisedWorkerHealth | None = Field(description="the worker `voxcast serve` supervises")


class ErrorMessage(BaseModel):
    """Every error but a 422: what went wrong and what to do, in one sentence."""

    detail: str


class ProblemView(BaseModel):
    """One thing to fix in a request: `field` is its dotted name, `line` the script line when there is one."""

    type: str
    loc: list[str | int]
    field: str
    msg: str
    line: int | None = None


class ValidationErrors(BaseModel):
    """A 422: every problem found in the request."""

    detail: list[ProblemView]


# --- server-sent events: the event name, and the model of its `data` ----------------------------------------


class SegmentReady(SegmentEvent):
    """A job's `segment` event: a segment is stored; `audio` is its URL, to listen while the rest generates."""

    audio: str


JobStreamEvent = JobView | ProgressEvent | SegmentReady | AudioEvent
# GET /v1/jobs/{id}/events: `state` is the whole job; `progress` and `audio` are what the worker published.
JOB_STREAM_EVENTS: dict[str, type[JobStreamEvent]] = {
    "state": JobView,
    "progress": ProgressEvent,
    "segment": SegmentReady,
    "audio": AudioEvent,
}
ScriptStreamEvent = ScriptView | ScriptAttemptView
# GET /v1/scripts/{id}/events: `state` is the whole script job; `attempt` is one reply of the model and its verdict.
SCRIPT_STREAM_EVENTS: dict[str, type[ScriptStreamEvent]] = {"state": ScriptView, "attempt": ScriptAttemptView}
