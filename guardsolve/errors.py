"""The guardsolve error hierarchy: one exception class per concern."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping, Sequence

if TYPE_CHECKING:
    from guardsolve.ir.node import Node, SourceLoc


class GuardsolveError(Exception):
    """Base class of every error guardsolve raises on purpose.

    Pickles as it is (its message and attributes; no `__init__` is re-run), so an error met in
    a worker process (`solve.parallel`) is raised by the parent unchanged:

    >>> import pickle
    >>> e = pickle.loads(pickle.dumps(UnsatisfiableGuardsError(["`a`", "`b`"], "they clash")))
    >>> e.conflict, str(e)
    (('`a`', '`b`'), 'unsatisfiable guards: `a` and `b` (they clash)')
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type[GuardsolveError], args: tuple[Any, ...], state: dict[str, Any]) -> GuardsolveError:
    e = Exception.__new__(cls)
    e.args = args
    e.__dict__.update(state)
    return e


# -- graphs -------------------------------------------------------------------


class GraphError(GuardsolveError):
    """An ill-formed graph: unknown op, wrong arity or type, bad names."""

    def __init__(self, message: str, node: "Node | None" = None, index: int | None = None):
        where = ""
        if node is not None:
            line = getattr(node, "meta", {}).get("line")  # NOTE: a parsed node knows its line
            at = f" (line {line})" if isinstance(line, int) else ""
            where = f"node {index}{at} `{node}`: " if index is not None else f"node{at} `{node}`: "
        super().__init__(where + message)
        self.node = node
        self.index = index


class ParseError(GraphError):
    """Malformed graph text; names the line and column."""

    def __init__(self, message: str, line: int, column: int, text: str = ""):
        GuardsolveError.__init__(self, f"line {line}, column {column}: {message}" + (f"\n  {text}" if text else ""))
        self.node = None
        self.index = None
        self.line = line
        self.column = column


class MissingRuleError(GuardsolveError):
    """An interpretation has no rule for an op."""

    def __init__(self, op: str, table: str, node: "Node | None" = None):
        at = f" (while interpreting `{node}`)" if node is not None else ""
        super().__init__(f"the {table} rule table has no rule for op {op}{at}")
        self.op = op
        self.table = table


class InterpretError(GuardsolveError):
    """A rule raised while interpreting a node; wraps the cause with the node."""


# -- tracing ------------------------------------------------------------------


class TraceError(GuardsolveError):
    """Tracing a user function failed."""


class UnsupportedOpError(TraceError):
    """PyTorch itself cannot trace an op symbolically (its shape rule fails over SymInts), or a
    value guardsolve does not model reached one; names the op and the user's line."""

    def __init__(self, op: str, reason: str, where: str = ""):
        super().__init__(f"{op}: {reason}" + (f" — {where}" if where else ""))
        self.op = op
        self.reason = reason
        self.where = where  # NOTE: the user's line, as printed (`SourceLoc`'s str), or ""


class EagerError(TraceError):
    """The program fails in eager PyTorch itself, and so does its trace: raised as eager's own
    exception type (a subclass of it and of `TraceError`), with eager's message and the user's
    line appended, so `except RuntimeError` catches it where it catches eager's.

    >>> e = eager_error(RuntimeError("The size of tensor a (3) must match"), " — f.py:2")
    >>> isinstance(e, RuntimeError), isinstance(e, TraceError), str(e)
    (True, True, 'The size of tensor a (3) must match — f.py:2')
    >>> import pickle
    >>> type(pickle.loads(pickle.dumps(e))).__mro__[1] is RuntimeError
    True
    """

    eager_type: type[Exception] = Exception

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild_eager, (self.eager_type, self.args, self.__dict__)


@functools.lru_cache(maxsize=None)
def _eager_type(base: type[Exception]) -> type[EagerError]:
    """The exception class for eager's `base`: named as it is, a subclass of both."""
    cls = type(base.__name__, (base, EagerError), {"__module__": base.__module__, "eager_type": base})
    cls.__qualname__ = getattr(base, "__qualname__", base.__name__)
    return cls


def _rebuild_eager(base: type[Exception], args: tuple[Any, ...], state: dict[str, Any]) -> Exception:
    cls = _eager_type(base)
    e = Exception.__new__(cls)
    e.args = args
    e.__dict__.update(state)
    return e


def eager_error(e: Exception, where: str = "") -> Exception:
    """`e`, which eager PyTorch raised, as the error of a trace: same type and message, the
    user's line (`where`) appended. A guardsolve error, or a type that cannot be subclassed or
    built from one message, comes back as it is."""
    if isinstance(e, GuardsolveError):
        return e
    try:
        cls = _eager_type(type(e))
        new = cls(f"{e}{where}")
    except Exception:
        return e
    new.__dict__.update(getattr(e, "__dict__", {}))
    return new


class DataDependentError(TraceError):
    """Python decided on tensor data (`if x.sum() > 0`, `if t.item() > 1`): shapes cannot guard that."""


class GuardFailure(GuardsolveError):
    """A bailout saw a different value than the one recorded at trace time."""

    def __init__(self, expected: bool, node: "Node | None" = None, loc: "SourceLoc | None" = None,
                 values: Mapping[str, Any] | None = None):
        self.expected = expected
        self.node = node
        self.loc = loc
        self.values = dict(values or {})
        super().__init__(self._message())

    def _message(self) -> str:
        what = f"`{self.node}`" if self.node is not None else "a bailout"
        msg = f"guard failed: {what} expected {self.expected}, got {not self.expected}"
        if self.loc is not None:
            msg += f" — {self.loc}"
        return msg

    def at(self, node: "Node") -> "GuardFailure":
        """The same failure, attributed to `node` and its source location."""
        return GuardFailure(self.expected, node, node.meta.get("loc"), self.values)


# -- solving ------------------------------------------------------------------


class SolverError(GuardsolveError):
    """Simplification or verification could not be carried out."""


class UnsatisfiableGuardsError(SolverError):
    """The guards contradict each other: no input satisfies them."""

    def __init__(self, conflict: Sequence[str], detail: str = ""):
        self.conflict = tuple(conflict)
        text = "unsatisfiable guards: " + " and ".join(self.conflict)
        super().__init__(text + (f" ({detail})" if detail else ""))


class VerificationError(SolverError):
    """A z3 proof about a GuardSet failed; carries a counterexample."""

    def __init__(self, message: str, counterexample: Mapping[str, int] | None = None):
        self.counterexample = dict(counterexample or {})
        cx = ", ".join(f"{k}={v}" for k, v in sorted(self.counterexample.items()))
        super().__init__(message + (f" (counterexample: {cx})" if cx else ""))


class UnknownOpError(GraphError):
    """A node names an op that is not in the op table."""


class ArityError(GraphError):
    """A node has the wrong number of inputs, outputs or params."""


class TypeMismatchError(GraphError):
    """A node's input has a different type than the op's signature says."""


class UndefinedNameError(GraphError):
    """A node uses a name that no node defines."""


class UseBeforeDefinitionError(GraphError):
    """A node uses a name that is only defined by a later node."""


class DuplicateNameError(GraphError):
    """Two nodes define the same output name."""


class InputMismatchError(GuardsolveError):
    """Inputs given to a trace or check do not fit its signature (count, kind or rank)."""


def first_line(e: BaseException) -> str:
    """An exception's message, its first line alone (its class name where it has none), for
    one-line reasons and CLI errors.

    >>> first_line(RuntimeError(chr(10).join(["shapes differ", "at dim 1"]))), first_line(KeyError())
    ('shapes differ', 'KeyError')
    """
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
