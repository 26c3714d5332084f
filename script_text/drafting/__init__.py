"""The script-drafting stage: from notes, articles and rough transcripts to a script the pipeline takes.

    normalise_transcript(text, load_model, budget)  parser first, then clean-up, then the LLM
    draft_script(source, DraftRequest(...), model, budget)  the LLM writes a dialogue for 1 to 4 hosts

Modules: `jobs` (the two jobs and the retry loop), `prompts` (what the model is told, and the JSON schema
of its reply), `replies` (reading and checking a reply), `cleanup` (deterministic transcript clean-up),
`chat` (the model interface; its transformers implementation is `models.instruct_chat`, which imports torch, so
that script text stays torch-free).
"""

from script_text.drafting.chat import ChatMessage, ChatModel
from script_text.drafting.jobs import (
    AttemptObserver,
    DraftCancelled,
    DraftedScript,
    DraftingError,
    DraftInputError,
    DraftRequest,
    ModelBudget,
    default_host_names,
    draft_script,
    normalise_transcript,
)
from script_text.drafting.prompts import SCRIPT_JSON_SCHEMA

__all__ = [
    "SCRIPT_JSON_SCHEMA",
    "AttemptObserver",
    "ChatMessage",
    "ChatModel",
    "DraftCancelled",
    "DraftInputError",
    "DraftRequest",
    "DraftedScript",
    "DraftingError",
    "ModelBudget",
    "default_host_names",
    "draft_script",
    "normalise_transcript",
]
