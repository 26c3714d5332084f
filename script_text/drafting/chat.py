"""The narrow interface between the drafting stage and whatever LLM answers it.

The stage needs one thing from a model: given a conversation, the assistant's next reply as text. Keeping
that behind a Protocol lets the transformers implementation (`models.instruct_chat`) and a scripted fake in
tests stand in for each other, and keeps torch out of the imports of the deterministic paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

Role = Literal["system", "user", "assistant"]


@dataclass(frozen=True)
class ChatMessage:
    """One message of a chat conversation, as a chat template takes it."""

    role: Role
    content: str


class ChatModel(Protocol):
    """An instruct LLM: it answers a conversation with the assistant's next message."""

    @property
    def source(self) -> str:
        """What the model was loaded from (hub id, folder or `tiny-random`), for messages."""
        ...

    def reply(
        self, messages: Sequence[ChatMessage], max_new_tokens: int, stop: Callable[[], bool] | None = None
    ) -> str:
        """The assistant's reply to `messages`, at most `max_new_tokens` tokens long.

        `stop`, when given, is asked between tokens; once it answers True the reply ends where it is (a
        cancelled job should not wait for a long reply nobody will read).
        """
        ...
