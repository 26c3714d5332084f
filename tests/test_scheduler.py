"""Scheduling policies, alone: plain request views in, a step plan out, no model."""

from __future__ import annotations

from pipeline.engine.scheduler import OfflinePolicy, OnlinePolicy, RequestView, StepBudget


def view(request_id: int, *, arrival: float = 0.0, prompt: int = 0, audio: bool = True, stream: bool = False,
         buffered: float = 10.0) -> RequestView:  # fmt: skip
    return RequestView(request_id, arrival, prompt, audio, stream, buffered)


BUDGET = StepBudget(max_batch=2, token_budget=34, prefill_chunk=16)


def test_online_puts_requests_without_audio_first() -> None:
    plan = OnlinePolicy().plan([view(1, arrival=0), view(2, arrival=1, audio=False), view(3, arrival=2)], BUDGET)
    assert plan.decode == (2, 1)


def test_online_serves_starving_streams_before_comfortable_ones() -> None:
    requests = [
        view(1, arrival=0, stream=True, buffered=8.0),
        view(2, arrival=1, stream=True, buffered=0.5),
        view(3, arrival=2, stream=True, buffered=1.5),
    ]
    assert OnlinePolicy(buffer_margin_seconds=2.0).plan(requests, BUDGET).decode == (2, 3)


def test_online_lets_batch_jobs_fill_spare_room_after_streams() -> None:
    requests = [view(1, arrival=0, stream=False), view(2, arrival=5, stream=True, buffered=1.0)]
    assert OnlinePolicy().plan(requests, BUDGET).decode == (2, 1)


def test_prefill_is_chunked_and_shares_the_token_budget() -> None:
    requests = [view(1), view(2, arrival=1, prompt=40, audio=False), view(3, arrival=2, prompt=100, audio=False)]
    plan = OnlinePolicy().plan(requests, BUDGET)
    assert plan.decode == (1,)
    assert plan.prefill == ((2, 16), (3, 16))  # 34 tokens: 1 decode row, then 16-token chunks, oldest first


def test_prefill_takes_what_is_left_of_a_short_prompt() -> None:
    plan = OfflinePolicy().plan([view(1, prompt=5, audio=False), view(2, arrival=1, prompt=50, audio=False)], BUDGET)
    assert plan.prefill == ((1, 5), (2, 16))
    assert plan.decode == ()


def test_offline_decodes_oldest_first_up_to_the_batch() -> None:
    requests = [view(3, arrival=2, audio=False), view(1, arrival=0), view(2, arrival=1, stream=True, buffered=0.0)]
    assert OfflinePolicy().plan(requests, BUDGET).decode == (1, 2)


def test_empty_plan_when_nothing_to_do() -> None:
    assert OnlinePolicy().plan([], BUDGET).empty
