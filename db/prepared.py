"""The turn's statements, compiled once per database by SQLAlchemy and run on the driver's cursor.

A plain turn runs about 18 short statements. Through `Connection.execute` each one also pays for
SQLAlchemy's per-execution work (an execution context, the parameters' processing, a result object), which
measured about as much as the statement itself and the larger share of a turn's database time
(bench/bench_chat.py; docs/design-notes.md, "The turn's statements"). A `Prepared` statement is still written
with SQLAlchemy Core and compiled by the connection's dialect, and its parameters and rows still go through
the column types' own processors (`TypeEngine.dialect_impl(...).bind_processor/result_processor`): only the
execution goes straight to the driver, on the caller's connection and so in its transaction. A driver error
is raised as SQLAlchemy's (`IntegrityError`...), and a connection the error shows dead is invalidated, as
`Connection.execute` does.

What a prepared statement may not use (refused when it is first compiled, so a test catches it): expanding
IN lists, bind values computed at execution, Python-side column defaults (an INSERT names every column
it fills; a default may want SQLAlchemy's execution context).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, exc
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import ClauseElement, ColumnElement
from sqlalchemy.sql.expression import Executable
from sqlalchemy.types import TypeEngine

Processor = Callable[[Any], Any]
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PYFORMAT = re.compile(r"%\((\w+)\)s")
_GIVEN = object()  # a bind the caller's parameters must hold


@dataclass(frozen=True, slots=True)
class _Bind:
    name: str
    fixed: Any  # _GIVEN, or a literal of the statement
    process: Processor | None


@dataclass(slots=True)
class _Form:
    """A statement as one dialect runs it."""

    sql: str
    positional: bool
    binds: tuple[_Bind, ...]
    columns: tuple[TypeEngine[Any], ...]  # of the rows it returns (their dialect's implementation)
    # (column index, processor) of the columns that have one, made from the first rows' description: a
    # processor may depend on the type the driver reports (psycopg's numbers).
    results: tuple[tuple[int, Processor], ...] | None = None

    def processors(
        self, dialect: Dialect, description: Sequence[Sequence[Any]]
    ) -> tuple[tuple[int, Processor], ...]:
        if self.results is None:
            found = (
                t.result_processor(dialect, d[1]) for t, d in zip(self.columns, description, strict=True)
            )
            self.results = tuple((i, p) for i, p in enumerate(found) if p is not None)
        return self.results

    def parameters(self, given: Mapping[str, Any]) -> Sequence[Any] | dict[str, Any]:
        values = []
        for b in self.binds:
            value = given[b.name] if b.fixed is _GIVEN else b.fixed
            values.append(value if b.process is None else b.process(value))
        return values if self.positional else {b.name: v for b, v in zip(self.binds, values, strict=True)}


def _compile(statement: Executable, dialect: Dialect, keys: Sequence[str] | None) -> _Form:
    assert isinstance(statement, ClauseElement)
    compiled = statement.compile(dialect=dialect, column_keys=list(keys) if keys is not None else None)
    assert isinstance(compiled, SQLCompiler)
    sql = compiled.string
    if "__[POSTCOMPILE" in sql:  # an expanding IN list, a literal rendered at execution
        raise ValueError(f"a prepared statement needs its final SQL at compile time: {sql}")
    positional = bool(compiled.positional)
    # The parameters in the order the SQL takes them (positional), or each once (named).
    names = list(compiled.positiontup or ()) if positional else list(dict.fromkeys(_PYFORMAT.findall(sql)))
    needs_defaults = [c.key for c in (*compiled.insert_prefetch, *compiled.update_prefetch)]
    if needs_defaults:  # (a default may want SQLAlchemy's execution context): the caller gives them
        raise ValueError(f"a prepared statement must be given the columns {needs_defaults}")
    binds = []
    for name in names:
        if not _NAME.match(name):
            raise ValueError(f"a prepared statement's parameter names must be plain: {name!r}")
        bind = compiled.binds[name]
        if bind.callable is not None:
            raise ValueError(f"a prepared statement cannot compute {name!r} when it runs")
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        binds.append(_Bind(name, _GIVEN if bind.required else bind.value, process))
    columns: Iterable[ColumnElement[Any]] = getattr(statement, "exported_columns", ())
    return _Form(sql, positional, tuple(binds), tuple(c.type.dialect_impl(dialect) for c in columns))


class Prepared:
    """A Core statement run on the driver's cursor of the caller's connection (see the module's doc).

    `keys`: for an INSERT or UPDATE without `.values()`, the columns the caller gives (as
    `Connection.execute` infers them from the first parameters)."""

    __slots__ = ("_forms", "_keys", "statement")

    def __init__(self, statement: Executable, keys: Sequence[str] | None = None) -> None:
        self.statement = statement
        self._keys = tuple(keys) if keys is not None else None
        self._forms: dict[tuple[str, str], _Form] = {}

    def _form(self, dialect: Dialect) -> _Form:
        key = (dialect.name, dialect.driver)
        form = self._forms.get(key)
        if form is None:
            form = self._forms[key] = _compile(self.statement, dialect, self._keys)
        return form

    def rows(self, conn: Connection, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Every row the statement returns."""
        form = self._form(conn.dialect)
        raw, description = _run(conn, form, form.parameters(params or {}), fetch=True)
        if not raw:
            return []
        processors = form.processors(conn.dialect, description)
        if not processors:
            return [tuple(r) for r in raw]
        # Only the columns that have a processor (on SQLite, a history's JSON column of seven): a generator
        # over every value of every row cost 2 µs a row, this 0.3 µs.
        rows = []
        for r in raw:
            values = list(r)
            for i, p in processors:
                values[i] = p(values[i])
            rows.append(tuple(values))
        return rows

    def first(self, conn: Connection, params: Mapping[str, Any] | None = None) -> tuple[Any, ...] | None:
        """The first row, or None."""
        found = self.rows(conn, params)
        return found[0] if found else None

    def scalar(self, conn: Connection, params: Mapping[str, Any] | None = None) -> Any:
        """The first row's first value, or None."""
        row = self.first(conn, params)
        return row[0] if row else None

    def run(self, conn: Connection, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement that returns no rows; how many rows it changed."""
        form = self._form(conn.dialect)
        changed: int = _run(conn, form, form.parameters(params or {}), fetch=False)
        return changed

    def run_many(self, conn: Connection, params: Sequence[Mapping[str, Any]]) -> None:
        """Run it once for each set of parameters (the driver's executemany)."""
        if params:
            form = self._form(conn.dialect)
            _run(conn, form, [form.parameters(p) for p in params], fetch=False, many=True)


def _run(conn: Connection, form: _Form, params: Any, *, fetch: bool, many: bool = False) -> Any:
    dbapi_conn = conn.connection.dbapi_connection
    assert dbapi_conn is not None
    cursor = dbapi_conn.cursor()
    # The engine's cursor events still fire (instrumentation, bench/bench_chat.py's statement counts);
    # a listener's replacement statement or parameters are not taken.
    events = conn.dispatch
    try:
        if events.before_cursor_execute:
            events.before_cursor_execute(conn, cursor, form.sql, params, None, many)
        if many:
            cursor.executemany(form.sql, params)
        else:
            cursor.execute(form.sql, params)
        if events.after_cursor_execute:
            events.after_cursor_execute(conn, cursor, form.sql, params, None, many)
        return (cursor.fetchall(), cursor.description) if fetch else cursor.rowcount
    except conn.dialect.loaded_dbapi.Error as error:
        dialect = conn.dialect
        gone = dialect.is_disconnect(error, dbapi_conn, cursor)
        if gone:
            conn.invalidate(error)
        raise exc.DBAPIError.instance(
            form.sql,
            params,
            error,
            dialect.loaded_dbapi.Error,
            hide_parameters=conn.engine.hide_parameters,
            connection_invalidated=gone,
            dialect=dialect,
            ismulti=many,
        ) from error
    finally:
        cursor.close()
