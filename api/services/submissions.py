"""Reading a job submission from the request: a JSON body, or a multipart form with files.

JSON: a `JobCreate` object. Multipart: a `script` part (a file or a text field, UTF-8), an optional
`options` part (the JSON of `JobOptions`), and `voice.<speaker>` file parts for voices uploaded with the
job (`voice.1`, `voice.Alice`). Both end as one `JobSubmission`; malformed ones as 422 naming the field.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from api.errors import ApiError, ContentTooLarge, InvalidInput, Problem
from api.schemas import JobCreate, JobOptions
from api.services.jobs import JobSubmission
from script_text.parser import MAX_SCRIPT_CHARS

VOICE_PART_PREFIX = "voice."
MAX_SPEAKER_FILES = 4
MAX_TEXT_PART_BYTES = MAX_SCRIPT_CHARS * 4  # UTF-8 needs up to 4 bytes a character
# How Starlette refuses a text field over `max_part_size` (a 400 without the field's name).
_STARLETTE_PART_TOO_LARGE = "Part exceeded maximum size"


class UnsupportedMediaType(ApiError):
    status_code = 415


@contextlib.asynccontextmanager
async def read_submission(request: Request, max_script_chars: int) -> AsyncIterator[JobSubmission]:
    """The submission, valid in shape (the script itself is checked later); uploads closed afterwards.

    `max_script_chars` (`VOXCAST_MAX_SCRIPT_CHARS`) is only named here, in the refusal of a script part too large
    to read; the script's length in characters is checked with the rest of it.
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        yield _from_json(await request.body())
    elif content_type == "multipart/form-data":
        async with text_form(request, MAX_SPEAKER_FILES + 1, 8, max_script_chars) as form:
            script = form.get("script")
            options = form.get("options")
            uploads = {
                name.removeprefix(VOICE_PART_PREFIX): value
                for name, value in form.multi_items()
                if name.startswith(VOICE_PART_PREFIX) and isinstance(value, UploadFile)
            }
            if script is None:
                raise InvalidInput(
                    [Problem("script", "a job needs a script: a 'script' file or text field", kind="missing")]
                )
            yield JobSubmission(
                script=await read_text_part(script, "script", max_script_chars, what="the script file"),
                options=_options(options),
                uploads=uploads,
            )
    else:
        raise UnsupportedMediaType(
            f"send the job as application/json or multipart/form-data, not {content_type or 'no content type'}"
        )


def _from_json(body: bytes) -> JobSubmission:
    try:
        job = JobCreate.model_validate_json(body)
    except ValidationError as error:
        raise validation_error(error, prefix=("body",)) from error
    options = JobOptions.model_validate(job.model_dump(exclude={"script"}))
    return JobSubmission(script=job.script, options=options, uploads={})


@contextlib.asynccontextmanager
async def text_form(request: Request, max_files: int, max_fields: int, max_chars: int) -> AsyncIterator[FormData]:
    """The request's multipart form, whose text fields may each hold `MAX_TEXT_PART_BYTES`; closed afterwards.

    A text field over that is refused while the form is read: 413 naming `VOXCAST_MAX_SCRIPT_CHARS` (`max_chars`,
    the longest text a form carries), where Starlette would answer a bare 400.
    """
    try:
        form = await request.form(max_files=max_files, max_fields=max_fields, max_part_size=MAX_TEXT_PART_BYTES)
    except HTTPException as error:
        if error.status_code == 400 and str(error.detail).startswith(_STARLETTE_PART_TOO_LARGE):
            raise ContentTooLarge(_too_large("a text field of the form", max_chars)) from error
        raise
    try:
        yield form
    finally:
        await form.close()


async def read_text_part(part: UploadFile | str | None, field: str, max_chars: int, *, what: str) -> str:
    """A form part holding text, as a file (UTF-8, a BOM allowed) or a field; 422 naming `field` otherwise.

    A file is read up to `MAX_TEXT_PART_BYTES`, what `text_form` allows a field: more is refused naming
    `VOXCAST_MAX_SCRIPT_CHARS` (`max_chars`).
    """
    if part is None:
        raise InvalidInput(
            [Problem(field, f"{what} is missing: send it as a {field!r} file or text field", kind="missing")]
        )
    if isinstance(part, str):
        return part
    data = await part.read(MAX_TEXT_PART_BYTES + 1)
    if len(data) > MAX_TEXT_PART_BYTES:
        raise InvalidInput([Problem(field, _too_large(what, max_chars))])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidInput(
            [Problem(field, f"{what} is not UTF-8 text (byte {error.start}); save it as UTF-8")]
        ) from error


def _too_large(what: str, max_chars: int) -> str:
    # Past 4 bytes a character, the text is longer than MAX_SCRIPT_CHARS, the most the setting may be.
    return (
        f"{what} is over {MAX_TEXT_PART_BYTES:,} bytes: longer than the {max_chars:,} characters this server takes "
        "(VOXCAST_MAX_SCRIPT_CHARS)"
    )


def _options(part: UploadFile | str | None) -> JobOptions:
    if part is None:
        return JobOptions()
    if not isinstance(part, str):
        raise InvalidInput([Problem("options", "options is a JSON text field, not a file")])
    try:
        return JobOptions.model_validate_json(part)
    except ValidationError as error:
        raise validation_error(error, prefix=("body", "options")) from error


def validation_error(error: ValidationError, prefix: tuple[str, ...]) -> RequestValidationError:
    errors = []
    for item in error.errors(include_url=False):
        errors.append({**item, "loc": (*prefix, *item["loc"])})
    return RequestValidationError(errors)
