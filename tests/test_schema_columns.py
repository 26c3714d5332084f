"""The request schemas (api/schemas.py) and the columns they are stored in (core/models.py) agree, with every limit
read from the SQLAlchemy models, so the two cannot drift apart: a string field is no longer than its column (a 9,002
character language tag was a 500 on PostgreSQL's varchar(35), and SQLite stored it), a whole number fits its
column, and every text field refuses NUL, which PostgreSQL cannot store in any text column."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from sqlalchemy import Integer, String
from sqlalchemy.orm import DeclarativeBase

from api.params import MAX_DATABASE_INT
from api.schemas import EpisodeOptions, JobOptions, PriorityChange, ShowChange, ShowFields, VoiceRename
from core.models import Episode, Job, Show, Voice

# Each body the api stores in a row, that row's model, and a valid body to vary one field of.
SHOW = {"title": "T", "description": "D", "author": "A", "language": "en", "category": "Technology"}
STORED_BODIES: list[tuple[type[BaseModel], type[DeclarativeBase], dict[str, Any]]] = [
    (ShowFields, Show, SHOW),
    (ShowChange, Show, {}),
    (EpisodeOptions, Episode, {"show_id": "0" * 32, "title": "Pilot"}),
    (JobOptions, Job, {}),
    (PriorityChange, Job, {"priority": 5}),
    (VoiceRename, Voice, {"name": "Ann"}),
]
CASES = [pytest.param(schema, model, body, id=schema.__name__) for schema, model, body in STORED_BODIES]


def stored_fields(schema: type[BaseModel], model: type[DeclarativeBase]) -> dict[str, Any]:
    """The schema's fields stored in a column of the same name, with that column."""
    columns = model.__table__.columns  # type: ignore[attr-defined]
    return {name: columns[name] for name in schema.model_fields if name in columns}


def alternatives(schema: type[BaseModel], name: str) -> list[dict[str, Any]]:
    """The JSON schemas a field's value may take (an optional field's null left out)."""
    field = schema.model_json_schema()["properties"][name]
    return [option for option in field.get("anyOf", [field]) if option.get("type") != "null"]


@pytest.mark.parametrize(("schema", "model", "body"), CASES)
def test_every_string_field_is_no_longer_than_its_column(
    schema: type[BaseModel], model: type[DeclarativeBase], body: dict[str, Any]
) -> None:
    checked = 0
    for name, column in stored_fields(schema, model).items():
        if not isinstance(column.type, String) or column.type.length is None:
            continue  # Text: no length to keep to (its characters are the next test's)
        for option in alternatives(schema, name):
            longest = max(map(len, option["enum"])) if "enum" in option else option.get("maxLength")
            assert longest is not None, f"{schema.__name__}.{name} has no max length; its column is {column.type}"
            assert longest <= column.type.length, f"{schema.__name__}.{name}: {longest} > {column.type}"
            checked += 1
        if any(option.get("type") == "string" and "enum" not in option for option in alternatives(schema, name)):
            with pytest.raises(ValidationError) as refused:  # and the limit holds, not only in the JSON schema
                schema.model_validate({**body, name: "a" * (column.type.length + 1)})
            assert (name,) in [error["loc"] for error in refused.value.errors()]
    assert checked or not any(isinstance(c.type, String) for c in stored_fields(schema, model).values())


@pytest.mark.parametrize(("schema", "model", "body"), CASES)
def test_every_text_field_refuses_nul(
    schema: type[BaseModel], model: type[DeclarativeBase], body: dict[str, Any]
) -> None:
    for name, column in stored_fields(schema, model).items():
        if not isinstance(column.type, String):  # Text is a String too
            continue
        if any("enum" in option for option in alternatives(schema, name)):
            continue  # a choice of fixed words
        with pytest.raises(ValidationError) as refused:
            schema.model_validate({**body, name: "a\x00b"})
        assert [error["loc"] for error in refused.value.errors()] == [(name,)], f"{schema.__name__}.{name}"


@pytest.mark.parametrize(("schema", "model", "body"), CASES)
def test_every_whole_number_fits_its_column(
    schema: type[BaseModel], model: type[DeclarativeBase], body: dict[str, Any]
) -> None:
    for name, column in stored_fields(schema, model).items():
        if not isinstance(column.type, Integer):
            continue
        (option,) = alternatives(schema, name)
        assert option.get("maximum", MAX_DATABASE_INT + 1) <= MAX_DATABASE_INT, f"{schema.__name__}.{name}"
        assert option.get("minimum", -MAX_DATABASE_INT - 2) >= -MAX_DATABASE_INT - 1, f"{schema.__name__}.{name}"


def test_the_show_and_episode_columns_a_body_sets_are_all_checked() -> None:
    """Every text column of a show and an episode that a request fills has its field in a checked schema: a new
    column with no field would be set by code this test does not see."""
    for model, schemas in ((Show, (ShowFields, ShowChange)), (Episode, (EpisodeOptions,))):
        columns = {name for schema in schemas for name in stored_fields(schema, model)}
        set_by_the_api = {"id", "owner_id", "feed_token", "podcast_guid", "artwork_format", "feed_digest", "job_id"}
        text_columns = {column.name for column in model.__table__.columns if isinstance(column.type, String)}
        assert text_columns - set_by_the_api <= columns, model.__name__
