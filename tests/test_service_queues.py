"""The two queues are two: what is sent to `interactive` lands in the interactive Redis lists and what is sent to
`batch` in the batch lists, read from a real Redis; and a job that names no queue goes by its size.

Celery left to itself binds every queue to the default queue's exchange and routing key (a worker then logged
`voxcast.interactive exchange=voxcast.batch key=voxcast.batch`), so a message routed by exchange landed in both
queues; each queue now has a direct exchange of its own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import redis

from core.job_states import QUEUE_KINDS
from core.settings import Settings
from script_text.parser import parse_script
from script_text.plan import plan_script
from tests.service_client import upload_voice
from workers.celery_app import RUN_JOB_TASK, create_celery_app, enqueue_job, priority_list_keys, queue_name, task_queue

SHORT = "Alice: A short line, said once."
# About three minutes of speech by the plan's estimate (14 characters a second): past the 120 s threshold.
LONG = "".join(
    f"Alice: Line {n} of a long script, which keeps the listener company for a good while.\n" for n in range(32)
)


def waiting_in(client: redis.Redis, namespace: str) -> dict[str, list[str]]:
    """The task ids waiting in each queue's Redis lists (one list per priority)."""
    found: dict[str, list[str]] = {}
    for kind in QUEUE_KINDS:
        payloads = [payload for key in priority_list_keys(namespace, kind) for payload in client.lrange(key, 0, -1)]
        found[kind] = sorted(json.loads(payload)["headers"]["id"] for payload in payloads)
    return found


@pytest.fixture
def broker(service_redis_url: str) -> Iterator[tuple[Settings, redis.Redis]]:
    namespace = f"voxcast-test-queues-{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env({"VOXCAST_REDIS_URL": service_redis_url, "VOXCAST_REDIS_NAMESPACE": namespace})
    client = redis.Redis.from_url(service_redis_url)
    yield settings, client
    for key in client.scan_iter(match=f"{namespace}*"):
        client.delete(key)


def test_each_queue_is_its_own_redis_lists_however_a_message_is_routed(broker) -> None:  # type: ignore[no-untyped-def]
    settings, client = broker
    namespace = settings.redis_namespace
    app = create_celery_app(settings)
    for kind in QUEUE_KINDS:  # each declared as a worker declares it: bound to an exchange of its own name
        declared = app.amqp.queues[queue_name(namespace, kind)]
        assert (declared.exchange.name, declared.routing_key) == (queue_name(namespace, kind),) * 2
    with app.connection_for_write() as connection:  # the bindings a running worker leaves in Redis
        for queue in app.amqp.queues.values():
            queue(connection.default_channel).declare()

    enqueue_job(app, namespace, "short-job", "interactive", 9)
    enqueue_job(app, namespace, "long-job", "batch", 5)
    for kind in QUEUE_KINDS:  # routed through the queue's exchange instead of by its name
        declared = task_queue(namespace, kind)
        app.send_task(
            RUN_JOB_TASK,
            args=[f"{kind}-routed"],
            task_id=f"{kind}-routed",
            exchange=declared.exchange.name,
            routing_key=declared.routing_key,
        )
    assert waiting_in(client, namespace) == {
        "interactive": ["interactive-routed", "short-job"],
        "batch": ["batch-routed", "long-job"],
    }


def test_a_job_without_a_queue_goes_by_its_size(make_service_stack, voice_wav) -> None:  # type: ignore[no-untyped-def]
    stack = make_service_stack()
    stack.start_api()  # no worker: the messages stay in the broker to be read
    client = stack.client(stack.mint_key("sizes"))
    voice = upload_voice(client, voice_wav, "voice")

    def submit(script: str, **options: object) -> dict:
        response = client.post("/v1/jobs", json={"script": script, "voices": {"Alice": voice}, **options})
        assert response.status_code == 202, response.text
        return response.json()

    short, long = submit(SHORT), submit(LONG)
    named = submit(SHORT, queue="batch")
    assert (short["queue"], long["queue"], named["queue"]) == ("interactive", "batch", "batch")
    threshold = stack.settings.interactive_max_seconds
    assert (
        plan_script(parse_script(SHORT)).estimated_seconds
        <= threshold
        < plan_script(parse_script(LONG)).estimated_seconds
    )
    assert waiting_in(redis.Redis.from_url(stack.redis_url), stack.namespace) == {
        "interactive": [short["id"]],
        "batch": sorted([long["id"], named["id"]]),
    }
