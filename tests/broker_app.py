"""A Celery app configured as voxcast's (`workers.celery_app.create_celery_app`: its transport, late acks, its queues)
with one task that holds its delivery a few seconds: what the broker-outage test runs in a real worker process."""

from __future__ import annotations

import os
import time
from pathlib import Path

from core.settings import Settings
from workers.celery_app import create_celery_app

app = create_celery_app(Settings.from_env(), include=())


@app.task(name="tests.hold_then_note")
def hold_then_note(name: str, seconds: float) -> None:
    """Hold the delivery (unacknowledged, as a job does) for `seconds`, then note that it finished."""
    time.sleep(seconds)
    (Path(os.environ["BROKER_TEST_NOTES"]) / name).write_text("done")
