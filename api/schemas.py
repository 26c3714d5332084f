"""Every request and response body of the api, in one place."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

AudioFormat = Literal["wav", "flac", "mp3", "ogg", "opus"]
JobMode = Literal["whole", "turns"]
QueueName = Literal["interactive", "batch"]
JobStateName = Literal["queued", "running", "done", "failed", "cancelled"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GenerationParams(_Body):
    """Quality knobs; the defaults are the original VibeVoice demo's."""

    cfg_scale: float = Field(1.3, ge=1.0, le=10.0)
    diffusion_steps: int = Field(10, ge=1, le=100)
    seed: int = Field(0, ge=0, le=2**31 - 1)


class JobOptions(_Body):
    """Everything about a job but its script (the multipart form carries these as one JSON part)."""

    voices: dict[str, str] = Field(
        default_factory=dict,
        description="speaker (number, name or key as in the script) -> voice id; inline uploads fill the rest",
    )
    mode: JobMode = "whole"
    formats: list[AudioFormat] = Field(default_factory=lambda: ["wav", "mp3"], min_length=1, max_length=5)
    settings: GenerationParams = Field(default_factory=GenerationParams)
    queue: QueueName = "interactive"
    priority: int = Field(5, ge=0, le=9, description="0..9; higher runs sooner within its queue")
    title: str | None = Field(None, max_length=200)


class JobCreate(JobOptions):
    script: str = Field(description="the script text: 'Speaker 1: ...', 'Name: ...', '[Name] ...' or JSON")


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
    chapters: str


class JobView(BaseModel):
    id: str
    state: JobStateName
    mode: JobMode
    queue: QueueName
    priority: int
    title: str | None
    formats: list[str]
    settings: GenerationParams
    position: int | None = Field(description="1 for the next job to start in its queue; null unless queued")
    progress: JobProgress
    cancel_requested: bool
    error: str | None
    audio_seconds: float | None
    outputs: JobOutputs | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner_id: int


class JobList(BaseModel):
    jobs: list[JobView]


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


class PriorityChange(_Body):
    priority: int = Field(ge=0, le=9)


class QueueDepth(BaseModel):
    queue: QueueName
    waiting_in_broker: int | None = Field(description="messages in Redis; null when Redis does not answer")
    queued: int
    running: int


class QueueReport(BaseModel):
    queues: list[QueueDepth]
