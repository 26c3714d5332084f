"""Files the studio fetched from the api so the browser can play and download them.

The api's files need the caller's key, which a browser's `<audio src>` or download link cannot send, so the
studio fetches them (with the key, over HTTP) into its own folder, and Gradio serves that folder. Folder
names are keyed digests of job and voice ids with a secret of this process: a URL cannot be guessed from
an id, so one user cannot reach another's files through the studio.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import re
import secrets
import shutil
import tempfile
from pathlib import Path

from api.schemas import JobView

# Gradio's route for files it may serve, relative to the page (the studio's root, e.g. /studio/).
_GRADIO_FILE_ROUTE = "gradio_api/file="
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class StudioFiles:
    """A folder of fetched files: one subfolder per job, one per voice preview."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._secret = secrets.token_bytes(32)

    @classmethod
    def temporary(cls) -> StudioFiles:
        """A fresh folder under the system's temporary folder, removed when the process exits."""
        root = Path(tempfile.mkdtemp(prefix="voxcast-studio-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        return cls(root)

    def _digest(self, kind: str, identifier: str) -> str:
        return hmac.new(self._secret, f"{kind}:{identifier}".encode(), hashlib.sha256).hexdigest()[:32]

    def job_folder(self, job_id: str) -> Path:
        return self.root / f"job-{self._digest('job', job_id)}"

    def voice_preview(self, voice_id: str) -> Path:
        return self.root / "voices" / f"{self._digest('voice', voice_id)}.wav"

    def show_artwork(self, show_id: str) -> Path:
        """Where a show's artwork is fetched to, for its preview (its suffix set by what the image is)."""
        return self.root / "shows" / f"{self._digest('show', show_id)}.img"

    def url(self, path: Path) -> str:
        """The URL Gradio serves `path` at, relative to the studio's page; a rewritten file gets a new URL.

        A regenerated turn rewrites a job's files in place; the version in the query keeps browsers from
        playing what they cached of the old ones.
        """
        return f"{_GRADIO_FILE_ROUTE}{path.resolve()}?v={path.stat().st_mtime_ns}"


def episode_file_name(job: JobView, extension: str) -> str:
    """A download's name: the job's title (or "episode") and the start of its id, e.g. `pilot-3f2a9c1b.mp3`."""
    stem = _UNSAFE_NAME.sub("-", job.title or "episode").strip("-._")[:60] or "episode"
    return f"{stem}-{job.id[:8]}.{extension}"
