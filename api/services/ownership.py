"""Which rows a key may reach: its own, or any for an admin; another key's row is a 404, as if it did not exist."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import QueryableAttribute, Session

from api.deps import Caller
from api.errors import NotFound


class OwnedRow(Protocol):
    """A mapped row with an owner (`Voice`, `Show`, `Job`, `ScriptJob`); on an instance, `owner_id` is an int."""

    @property
    def owner_id(self) -> int: ...


Row = TypeVar("Row", bound=OwnedRow)


def owned_row(session: Session, caller: Caller, model: type[Row], row_id: str, missing: str) -> Row:
    """The row if this key may see it; otherwise `NotFound(missing)`, the same answer as for an id nobody holds."""
    row = session.get(model, row_id)
    if row is None or not (caller.is_admin or row.owner_id == caller.key_id):
        raise NotFound(missing)
    return row


def visible_rows(session: Session, caller: Caller, model: type[Row], order_by: QueryableAttribute[Any]) -> list[Row]:
    """Every row of `model` this key may see (an admin sees every key's), in `order_by` order."""
    query = select(model).order_by(order_by)
    if not caller.is_admin:
        query = query.filter_by(owner_id=caller.key_id)
    return list(session.scalars(query))
