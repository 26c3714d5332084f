"""Reading a script job request: a JSON body, or a multipart form with the notes or transcript as a file.

JSON: a `ScriptCreate` object (`task` says which). Multipart: an `options` part (the JSON of the request
without its text) and the text as a `material` part (draft) or a `transcript` part (normalise), a file or a
text field, UTF-8. Both end as one `ScriptDraftCreate` or `ScriptNormaliseCreate`; malformed ones as 422
naming the field.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import UploadFile

from api.errors import InvalidInput, Problem
from api.schemas import ScriptCreate, ScriptDraftCreate, ScriptNormaliseCreate, ScriptOptions
from api.services.submissions import UnsupportedMediaType, read_text_part, text_form, validation_error

_CREATE = TypeAdapter(ScriptCreate)
_OPTIONS = TypeAdapter(ScriptOptions)
_TEXT_PART = {"draft": "material", "normalise": "transcript"}


async def read_script_request(request: Request, max_text_chars: int) -> ScriptDraftCreate | ScriptNormaliseCreate:
    """The request, valid in shape (its text and options are checked by the drafting stage's rules later);
    `max_text_chars` (`VOXCAST_MAX_SCRIPT_CHARS`) is named when a text part is too large to read."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            return _CREATE.validate_json(await request.body())
        except ValidationError as error:
            raise _naming_the_task(validation_error(error, prefix=("body",))) from error
    if content_type == "multipart/form-data":
        async with text_form(request, 1, 4, max_text_chars) as form:
            options = _options(form.get("options"))
            part = _TEXT_PART[options.task]
            text = await read_text_part(form.get(part), part, max_text_chars, what=f"the {part}")
        created = ScriptDraftCreate if options.task == "draft" else ScriptNormaliseCreate
        return created.model_validate({**options.model_dump(), part: text})
    raise UnsupportedMediaType(
        f"send the script job as application/json or multipart/form-data, not {content_type or 'no content type'}"
    )


def _options(part: UploadFile | str | None) -> ScriptOptions:
    if part is None:
        raise InvalidInput(
            [
                Problem(
                    "options",
                    'a script job needs an "options" field: {"task": "draft"} or {"task": "normalise"}',
                    kind="missing",
                )
            ]
        )
    if not isinstance(part, str):
        raise InvalidInput([Problem("options", "options is a JSON text field, not a file")])
    try:
        return _OPTIONS.validate_json(part)
    except ValidationError as error:
        raise _naming_the_task(validation_error(error, prefix=("body", "options"))) from error


def _naming_the_task(error: RequestValidationError) -> RequestValidationError:
    """A missing or unknown `task` is located at the object holding it; say `task`, the field to fix."""
    problems = []
    for item in error.errors():
        if str(item.get("type", "")).startswith("union_tag"):
            item = {**item, "loc": (*item["loc"], "task")}
        problems.append(item)
    return RequestValidationError(problems)
