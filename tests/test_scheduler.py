"""Scheduling policies, alone: plain request views in, a step plan out, no model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeline.engine.scheduler import (
    OfflinePolicy,
    OnlinePolicy,
    PrefillCosts,
    RequestView,
    StepBudget,
    StepCosts,
    admission_order,
    choose_victim,
)


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


# --- interactive work beside a full batch ----------------------------------------------------------------------


def test_step_costs_are_learnt_per_row_count_and_read_off_a_line_between() -> None:
    costs = StepCosts(smoothing=0.5)
    costs.record(16, 3.0)
    assert costs.estimate(16) == 3.0 and costs.estimate(1) is None  # one size seen: no line yet
    costs.record(1, 1.0)
    assert costs.estimate(6) == pytest.approx(1.0 + 2.0 / 15 * 5)  # on the line through (1, 1.0) and (16, 3.0)
    costs.record(16, 4.0)
    assert costs.estimate(16) == 3.5  # a moving average: half way to the new step's seconds (now 0.167 a row)
    assert costs.rows_within(1.5, least=1, most=16) == 4  # 1.0 + 0.167 per row beyond the first


def mixed(interactive_rows: int, batch_rows: int) -> list[RequestView]:
    interactive = [queued(n, arrival=10 + n, interactive=True) for n in range(interactive_rows)]
    batch = [queued(100 + n, arrival=n, job="long") for n in range(batch_rows)]
    return [replace(view, prompt_remaining=0, has_audio=True) for view in batch + interactive]


def policy_that_saw(steps: dict[int, float], slowdown: float = 1.5) -> OnlinePolicy:
    policy = OnlinePolicy(interactive_slowdown=slowdown)
    for rows, seconds in steps.items():
        policy.observe(rows, 0, seconds)
    return policy


FULL = StepBudget(max_batch=16, token_budget=528, prefill_chunk=512)


def test_interactive_work_leads_and_batch_rows_fill_only_what_keeps_its_steps_fast() -> None:
    cpu = policy_that_saw({1: 1.0, 16: 3.0})  # each row adds 2/15 of a one-row step
    decode = cpu.plan(mixed(1, 15), FULL).decode
    # the interactive row first, then batch rows while the step stays within 1.5x a step of the interactive row
    # alone: 1.0 + 3 x 2/15 = 1.4 s for four rows, 1.53 s for five
    assert decode == (0, 100, 101, 102)
    assert len(cpu.plan(mixed(0, 16), FULL).decode) == 16  # no interactive work: every row steps


def test_a_speech_request_leads_short_interactive_jobs_of_a_lower_priority_the_same_way() -> None:
    cpu = policy_that_saw({1: 1.0, 16: 3.0})
    short_jobs = [replace(view, interactive=True) for view in mixed(0, 15)]  # interactive by size, priority 5
    speech = replace(queued(50, arrival=40, interactive=True, priority=9), prompt_remaining=0, has_audio=True)
    assert cpu.plan([*short_jobs, speech], FULL).decode == (50, 100, 101, 102)
    assert len(cpu.plan(short_jobs, FULL).decode) == 15  # one class and priority: nothing leads, every row steps


def test_on_a_gpu_every_batch_row_still_steps_beside_interactive_work() -> None:
    gpu = policy_that_saw({1: 0.010, 16: 0.011})  # a row costs next to nothing
    decode = gpu.plan(mixed(2, 14), FULL).decode
    assert decode[:2] == (0, 1) and len(decode) == 16


def test_before_anything_is_learnt_interactive_rows_step_alone_once() -> None:
    policy = policy_that_saw({16: 3.0})
    assert policy.plan(mixed(1, 15), FULL).decode == (0,)  # this step shows what the interactive row costs alone
    policy.observe(1, 0, 1.0)
    assert len(policy.plan(mixed(1, 15), FULL).decode) == 4
    policy.observe(3, 40, 9.0)  # a step that also prefilled says nothing about decode rows
    assert policy.costs.estimate(3) != 9.0


def test_an_interactive_prompt_prefilling_keeps_batch_rows_to_what_fits() -> None:
    policy = policy_that_saw({1: 1.0, 16: 3.0})
    requests = mixed(0, 16) + [queued(7, arrival=30, interactive=True)]  # prompt of 10 tokens to prefill
    plan = policy.plan(requests, FULL)
    assert plan.prefill == ((7, 10),) and len(plan.decode) == 4


# --- admission and preemption --------------------------------------------------------------------------------


def queued(request_id: int, *, arrival: float = 0.0, job: str | None = None, interactive: bool = False,
           priority: int = 5, admitted: int = 0) -> RequestView:  # fmt: skip
    return RequestView(request_id, arrival, 10, False, False, 0.0, job, interactive, priority, admitted)


def test_interactive_work_is_admitted_first_then_higher_priority_then_arrival() -> None:
    waiting = [
        queued(1, arrival=0, priority=9),
        queued(2, arrival=1, interactive=True, priority=1),
        queued(3, arrival=2, priority=7),
        queued(4, arrival=3, interactive=True, priority=9),
        queued(5, arrival=4, priority=9),
    ]
    assert admission_order(waiting, []) == [4, 2, 1, 5, 3]


def test_rows_go_round_the_jobs_of_one_class_and_priority() -> None:
    big = [queued(i, arrival=i, job="big") for i in range(1, 7)]
    small = [queued(10, arrival=9, job="small"), queued(11, arrival=10, job="small")]
    running = [queued(20, job="big", admitted=1), queued(21, job="big", admitted=2)]
    assert admission_order([*big, *small], running)[:4] == [10, 11, 1, 2]
    assert admission_order([*big, *small], [])[:4] == [1, 10, 2, 11]


def test_the_victim_is_the_least_important_then_the_most_recently_admitted() -> None:
    active = [
        queued(1, priority=5, admitted=1),
        queued(2, priority=5, admitted=3),
        queued(3, priority=2, admitted=2),
        queued(4, interactive=True, priority=0, admitted=4),
    ]
    assert choose_victim(active) == 3
    assert choose_victim([view for view in active if view.request_id != 3]) == 2
    assert choose_victim(active[3:]) == 4


def test_an_interactive_request_preempts_only_less_important_work() -> None:
    active = [queued(1, interactive=True, priority=9, admitted=1), queued(2, interactive=True, priority=3, admitted=2)]
    assert choose_victim(active, below=(1, 5)) == 2
    assert choose_victim(active, below=(1, 3)) is None
    assert choose_victim([queued(3, priority=9, admitted=1)], below=(1, 0)) == 3  # any batch work gives way


def test_online_puts_interactive_work_first_then_requests_without_audio() -> None:
    requests = [
        RequestView(1, 0.0, 0, True, False, 0.0, "a", False, 9),
        RequestView(2, 1.0, 0, True, False, 0.0, "b", True, 1),
        RequestView(3, 2.0, 0, False, False, 0.0, "c", False, 5),
    ]
    policy = policy_that_saw({1: 0.010, 2: 0.010})  # rows cost nothing more: every row steps
    assert policy.plan(requests, BUDGET).decode == (2, 3)  # interactive first, then what has no audio yet


def test_batch_work_gives_its_memory_back_before_a_stream_of_the_same_importance() -> None:
    stream = RequestView(1, 0.0, 0, True, True, 0.5, "show", admitted=1)
    batch = RequestView(2, 0.0, 0, True, False, 0.0, "long", admitted=0)
    later_stream = replace(stream, request_id=3, admitted=2)
    assert choose_victim([stream, batch, later_stream]) == 2  # the batch job, though admitted first
    assert choose_victim([stream, later_stream]) == 3  # among streams, the most recent


def test_a_stream_with_little_audio_ahead_keeps_the_step_to_one_prompt_chunk() -> None:
    prompts = [queued(7, arrival=3), queued(8, arrival=4)]  # ten-token prompts: both fit the token budget
    thin = replace(view(1, stream=True, buffered=0.1), streaming=True)
    comfortable = replace(thin, buffered_seconds=1.0)
    assert OnlinePolicy().plan([thin, *prompts], FULL).prefill == ((7, 10),)
    assert OnlinePolicy().plan([comfortable, *prompts], FULL).prefill == ((7, 10), (8, 10))


def test_a_streams_prompt_prefills_before_batch_work_of_the_same_importance() -> None:
    batch = queued(7, arrival=0)
    stream = replace(queued(8, arrival=5), streaming=True)
    assert OnlinePolicy().plan([batch, stream], StepBudget(4, 14, 16)).prefill == ((8, 10), (7, 4))


# --- prompts beside a thin stream: as many as the step has time for ---------------------------------------------


def thin_stream_and_prompts(prompts: int) -> list[RequestView]:
    playing = view(1, stream=True, buffered=0.133)  # has just made its first frame: the next step must end by then
    return [playing, *(view(10 + n, arrival=n, prompt=100, audio=False) for n in range(prompts))]


def policy_that_prefilled(further_chunk_ms: float | None) -> OnlinePolicy:
    """A policy that saw 90 ms decode steps and one-chunk prefills of 19 ms + 0.04 ms a token; with
    `further_chunk_ms`, also a two-chunk step whose second chunk added that beyond its tokens."""
    policy = policy_that_saw({1: 0.090, 16: 0.090}, slowdown=1.5)
    policy.observe(1, 100, 0.090 + 0.023)
    policy.observe(1, 200, 0.090 + 0.027)
    if further_chunk_ms is not None:
        policy.observe(1, 200, 0.090 + 0.027 + further_chunk_ms / 1000, chunks=2)
    return policy


PROMPTS = StepBudget(max_batch=16, token_budget=528, prefill_chunk=512)


def test_beside_a_thin_stream_a_step_takes_the_prompts_its_predicted_time_allows() -> None:
    # a runner that prefills a step's chunks in one forward: 90 + 19 + 4 a prompt = 121 ms for three prompts, within
    # the thin stream's 133 ms less the 5 ms margin
    batched = policy_that_prefilled(further_chunk_ms=0.0)
    assert batched.plan(thin_stream_and_prompts(3), PROMPTS).prefill == ((10, 100), (11, 100), (12, 100))
    assert len(batched.plan(thin_stream_and_prompts(5), PROMPTS).prefill) == 4  # the fifth would end at 133 ms
    # a forward a chunk: a second prompt costs 19 ms more (136 ms): one prompt a step, as before
    assert policy_that_prefilled(further_chunk_ms=19.0).plan(thin_stream_and_prompts(3), PROMPTS).prefill == (
        (10, 100),
    )
    # no step of several chunks seen yet: each further chunk is priced as its own forward
    assert len(policy_that_prefilled(further_chunk_ms=None).plan(thin_stream_and_prompts(3), PROMPTS).prefill) == 1
    # nothing learnt of prefill: one prompt; no thin stream: the token budget alone decides
    assert len(policy_that_saw({1: 0.090, 16: 0.090}).plan(thin_stream_and_prompts(3), PROMPTS).prefill) == 1
    comfortable = [replace(thin_stream_and_prompts(0)[0], buffered_seconds=0.5), *thin_stream_and_prompts(5)[1:]]
    assert len(policy_that_prefilled(further_chunk_ms=19.0).plan(comfortable, PROMPTS).prefill) == 5


def test_prefill_costs_are_a_line_for_one_chunk_and_a_mean_for_each_further_one() -> None:
    costs = PrefillCosts()
    assert costs.estimate(1, 100) is None and costs.estimate(0, 0) == 0.0
    costs.record(1, 100, 0.010)
    assert costs.estimate(1, 200) == pytest.approx(0.020)  # one prompt size seen: priced by the token
    costs.record(1, 300, 0.014)
    assert costs.estimate(1, 200) == pytest.approx(0.012)  # 8 ms + 0.02 ms a token
    assert costs.estimate(3, 300) == pytest.approx(0.030)  # further chunks priced as the first's fixed 8 ms
    costs.record(3, 300, 0.018)
    assert costs.estimate(3, 300) == pytest.approx(0.018)  # they cost 2 ms each
