"""How much of the data folder each API key uses, and the per-key quota (`VOXCAST_MAX_STORAGE_BYTES`).

A job's bytes are stored on its row (`Job.storage_bytes`): measured from its folder when it is submitted, when
it ends (done, failed, cancelled: by its worker, by the worker-death guard or at once while queued) and when the
retention policy removes its intermediates (`record_job_bytes`), so usage is one query, not a walk of the disk.
Until it ends, a job counts what it is expected to write (`expected_job_bytes`) on top of its inputs: a key cannot
pass its quota by submitting several long jobs at once. Voices count the size of their files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from core import job_repository
from core.audio_formats import AUDIO_FORMATS
from core.audio_rates import FRAMES_PER_SECOND, SAMPLE_RATE
from core.models import ApiKey, Job, Voice
from core.storage import DataFolder

_LATENT_VALUES = 64  # VibeVoice's acoustic latent: float32 values a frame
# What a second of generated audio takes on disk, at most: the segment counted at 4 bytes a sample (its 24-bit FLAC
# never takes more than the 3 of uncompressed 24-bit PCM, plus framing), its latents, and each output
# (`AudioFormatSpec.bytes_per_second`).
_SEGMENT_BYTES_PER_SECOND = 4 * SAMPLE_RATE + int(FRAMES_PER_SECOND * _LATENT_VALUES * 4)


@dataclass(frozen=True)
class KeyUsage:
    key_id: int
    key_name: str
    bytes: int  # jobs (measured, or expected while in flight) and voices
    jobs: int
    voices: int
    audio_minutes: float  # of the finished episodes


def expected_job_bytes(estimated_seconds: float, formats: Sequence[str]) -> int:
    """What generating `estimated_seconds` of audio in `formats` will write, at most (the plan's estimate)."""
    per_second = _SEGMENT_BYTES_PER_SECOND + sum(AUDIO_FORMATS[name].bytes_per_second for name in formats)
    return int(estimated_seconds * per_second)


def record_job_bytes(session: Session, data: DataFolder, job_id: str) -> int:
    """Measure what the job's folder holds now and store it as the job's usage; the bytes.

    For a job that has ended: from then on it counts what it really holds, not what it was expected to write.
    """
    held = data.files.tree_bytes(data.job(job_id).root)
    job_repository.record_storage_bytes(session, job_id, held)
    return held


def key_usage(session: Session, data: DataFolder, key: ApiKey) -> KeyUsage:
    """What `key` uses now: its jobs' bytes, its voices' files, its jobs and its minutes of finished audio."""
    jobs, job_bytes, seconds = session.execute(
        select(func.count(Job.id), func.coalesce(func.sum(Job.storage_bytes), 0), func.sum(Job.audio_seconds)).where(
            Job.owner_id == key.id
        )
    ).one()
    voice_ids = list(session.scalars(select(Voice.id).where(Voice.owner_id == key.id)))
    voice_bytes = sum(size for path in map(data.voice, voice_ids) if (size := data.files.size(path)) is not None)
    return KeyUsage(key.id, key.name, int(job_bytes) + voice_bytes, jobs, len(voice_ids), (seconds or 0.0) / 60)


def every_key_usage(session: Session, data: DataFolder) -> list[KeyUsage]:
    """Every key's usage, the largest first."""
    usages = [key_usage(session, data, key) for key in session.scalars(select(ApiKey))]
    return sorted(usages, key=lambda usage: usage.bytes, reverse=True)
