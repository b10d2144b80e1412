"""Rows built into records by position, safely: the select's columns are made from the record's fields.

A `Prepared` statement's rows are plain tuples (db/prepared.py), and `Record(*row)` is the cheapest way to
turn one into a record on the turn's path; it is right only while the select's columns come in the order of
the record's fields. `columns_for` builds that list from the record itself, so reordering either side keeps
them in step, and tests/db/test_row_order.py pins each turn-path statement against its record. Off the turn
path, rows are read by name instead (`Record(**row._mapping)`, `row.name`): docs/database.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, fields
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.sql.expression import FromClause


def columns_for(
    table: FromClause, record: type, *, leave: Sequence[str] = ()
) -> tuple[ColumnElement[Any], ...]:
    """`table`'s columns named as `record`'s fields (those its constructor takes), in their order.

    `leave`: trailing fields, with defaults, that the select does not read (the record is built without
    them); a field in the middle cannot be left out, since every later one would then shift."""
    taken = [f for f in fields(record) if f.init]
    kept = len(taken) - len(leave)
    if [f.name for f in taken[kept:]] != list(leave):
        raise ValueError(f"{record.__name__}: only its last fields can be left out, not {list(leave)}")
    if any(f.default is MISSING and f.default_factory is MISSING for f in taken[kept:]):
        raise ValueError(f"{record.__name__}: a field left out needs a default")
    return tuple(table.c[f.name] for f in taken[:kept])


def column_names(statement: Any) -> list[str]:
    """The names of the columns a select (or an INSERT/UPDATE ... RETURNING) gives, in order."""
    return [c.key for c in statement.exported_columns]
