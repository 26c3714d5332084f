"""What every screen of the studio needs: where the api is, where fetched files go, the bundled examples."""

from __future__ import annotations

from dataclasses import dataclass, field

from webui.api_client import StudioApi
from webui.examples import Examples
from webui.files import StudioFiles
from webui.live_audio import LiveFolders


@dataclass(frozen=True)
class StudioContext:
    api_url: str
    files: StudioFiles
    examples: Examples
    live_folders: LiveFolders = field(default_factory=LiveFolders)

    def api(self, key: str | None) -> StudioApi:
        """A client acting as the key typed in the page (None or blank: no key, for a single-user api)."""
        return StudioApi(self.api_url, key)
