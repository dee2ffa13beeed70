"""The text syntax of filters: the CLI's `--where`, the Spark `where` option, the inspector.

SQL-like, and a superset of the Python-like syntax Conch accepted first:

    silence_ratio < 0.1 and audio.meta.size >= 100
    id = 3 or id != 4                    -- `=` and `==`, `!=` and `<>`
    not (x > 1)                          -- `not`, `and`, `or` (also `~`, `&`, `|`)
    x between 1 and 5                    -- inclusive; `not between` too
    id in (1, 2, 3)                      -- `[...]` too; `not in`
    name is null / name is not null      -- `is None` / `is not None` too
    name like 'abc%'                     -- prefix patterns only (they are pushed down as ranges)
    caption matches 'red car'            -- full text (`conch.expr.textmatch`); `not matches` too
    `Adj. Close*` > 10                   -- backticks quote a column name with odd characters
    d >= date '1994-01-01'               -- typed literals: date '...', timestamp '...', decimal '...'

Strings are quoted with '...' or "..."; `true`/`false`/`null` (any case) and `True`/`False`/`None`
are literals; `date 'YYYY-MM-DD'`, `timestamp 'YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]'` (with an
offset: an instant, for zoned columns; without: a local time) and `decimal '0.05'` (exact) are
typed literals (`date`, `timestamp`, `decimal` not followed by a string are column names);
comparisons chain as in Python (`0 < x <= 1`). Precedence, loosest first: `or`,
`and`, `not`, then one predicate. A like pattern other than `'prefix%'` (or an exact string) is
refused: it could not be evaluated on fragment statistics or pushed into Vortex.
"""

from __future__ import annotations

import datetime
import decimal
import re
from dataclasses import dataclass
from typing import Any

from conch.errors import FilterSyntaxError
from conch.expr.tree import And, Cmp, Col, Expr, IsIn, IsNull, Lit, Matches, Not, Or

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)
  | (?P<str>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*")
  | (?P<op><>|!=|==|<=|>=|=|<|>|\(|\)|\[|\]|,|&|\||~|-)
  | (?P<name>(?:[A-Za-z_$][A-Za-z0-9_$]*|`(?:[^`]|``)+`)(?:\.(?:[A-Za-z_$][A-Za-z0-9_$]*|`(?:[^`]|``)+`))*)
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "not", "in", "is", "null", "none", "between", "like", "matches", "true", "false"}
_CMP = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str  # num | str | name | op | kw | end
    text: str
    value: Any
    pos: int


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise FilterSyntaxError(f"cannot parse filter {text!r}: unexpected {text[pos]!r} at character {pos + 1}")
        kind, raw = m.lastgroup or "", m.group()
        if kind == "num":
            out.append(_Tok("num", raw, float(raw) if any(c in raw for c in ".eE") else int(raw), pos))
        elif kind == "str":
            body = raw[1:-1]
            body = body.replace("''", "'") if raw[0] == "'" else body
            out.append(_Tok("str", raw, re.sub(r"\\(.)", r"\1", body), pos))
        elif kind == "name":
            if raw.lower() in _KEYWORDS:
                out.append(_Tok("kw", raw, raw.lower(), pos))
            else:
                parts = re.findall(r"`(?:[^`]|``)+`|[^.`]+", raw)
                path = ".".join(p[1:-1].replace("``", "`") if p.startswith("`") else p for p in parts)
                out.append(_Tok("name", raw, path, pos))
        elif kind == "op":
            out.append(_Tok("op", raw, raw, pos))
        pos = m.end()
    out.append(_Tok("end", "", None, len(text)))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    # ----- helpers -----------------------------------------------------------------------
    def peek(self, offset: int = 0) -> _Tok:
        return self.toks[min(self.i + offset, len(self.toks) - 1)]

    def take(self) -> _Tok:
        tok = self.peek()
        self.i += 1
        return tok

    def at(self, kind: str, *values: str) -> bool:
        tok = self.peek()
        return tok.kind == kind and (not values or tok.value in values)

    def expect(self, kind: str, value: str, what: str) -> None:
        if not self.at(kind, value):
            self.fail(f"expected {what}")
        self.take()

    def fail(self, what: str) -> Any:
        tok = self.peek()
        where = f"at {tok.text!r} (character {tok.pos + 1})" if tok.kind != "end" else "at the end"
        raise FilterSyntaxError(f"cannot parse filter {self.text!r}: {what} {where}")

    # ----- grammar -----------------------------------------------------------------------
    def parse(self) -> Expr:
        if self.at("end"):
            self.fail("empty filter")
        e = self.or_()
        if not self.at("end"):
            self.fail("expected `and`, `or` or the end of the filter")
        return e

    def or_(self) -> Expr:
        e = self.and_()
        while self.at("kw", "or") or self.at("op", "|"):
            self.take()
            e = Or(e, self.and_())
        return e

    def and_(self) -> Expr:
        e = self.not_()
        while self.at("kw", "and") or self.at("op", "&"):
            self.take()
            e = And(e, self.not_())
        return e

    def not_(self) -> Expr:
        if self.at("kw", "not") or self.at("op", "~"):
            self.take()
            return Not(self.not_())
        return self.predicate()

    def predicate(self) -> Expr:
        if self.at("op", "("):
            self.take()
            inner = self.or_()
            self.expect("op", ")", "`)`")
            if self.at("op", *_CMP) or self.at("kw", "between", "in", "like", "matches", "is"):
                self.fail("a parenthesised condition cannot be compared")
            return inner
        left = self.operand()
        negate = (
            self.at("kw", "not")
            and self.peek(1).kind == "kw"
            and self.peek(1).value in ("between", "in", "like", "matches")
        )
        if negate:
            self.take()
        tok = self.peek()
        if tok.kind == "kw" and tok.value == "between":
            self.take()
            lo = self.operand()
            self.expect("kw", "and", "`and` of `between ... and ...`")
            hi = self.operand()
            e: Expr = And(Cmp(">=", left, lo), Cmp("<=", left, hi))
        elif tok.kind == "kw" and tok.value == "in":
            self.take()
            e = IsIn(left, self.literal_list())
        elif tok.kind == "kw" and tok.value == "like":
            self.take()
            e = self.like(left)
        elif tok.kind == "kw" and tok.value == "matches":
            self.take()
            query = self.literal()
            if not isinstance(left, Col):
                self.fail("`matches` needs a column on its left")
            e = left.matches(query)
        elif tok.kind == "kw" and tok.value == "is":
            self.take()
            is_not = self.at("kw", "not")
            if is_not:
                self.take()
            if not self.at("kw", "null", "none"):
                self.fail("expected `null` after `is`")
            self.take()
            e = Not(IsNull(left)) if is_not else IsNull(left)
        elif tok.kind == "op" and tok.value in _CMP:
            e = self.comparisons(left)
        else:
            return self.fail("expected a comparison (=, !=, <, <=, >, >=, between, in, is null, like, matches)")
        return Not(e) if negate else e

    def comparisons(self, left: Expr) -> Expr:
        out: Expr | None = None
        while self.at("op", *_CMP):
            op = _CMP[self.take().value]
            right = self.operand()
            term = Cmp(op, left, right)
            out = term if out is None else And(out, term)
            left = right
        assert out is not None
        return out

    def operand(self) -> Expr:
        tok = self.peek()
        if tok.kind == "name" and not self.typed():
            self.take()
            return Col(tok.value)
        return Lit(self.literal())

    def typed(self) -> bool:
        """At a typed literal (`date '...'`): a bare type name followed by a string."""
        tok = self.peek()
        return tok.kind == "name" and tok.text.lower() in _TYPED and self.peek(1).kind == "str"

    def literal(self) -> Any:
        if self.typed():
            kind = self.take().text.lower()
            tok = self.take()
            try:
                return _TYPED[kind](tok.value)
            except (ValueError, ArithmeticError):
                self.i -= 1
                return self.fail(f"not a valid {kind} literal")
        tok = self.take()
        if tok.kind in ("num", "str"):
            return tok.value
        if tok.kind == "op" and tok.value == "-" and self.at("num"):
            return -self.take().value
        if tok.kind == "kw" and tok.value in ("true", "false"):
            return tok.value == "true"
        if tok.kind == "kw" and tok.value in ("null", "none"):
            self.i -= 1
            self.fail("compare with null using `is null` (a comparison with null is never true)")
        self.i -= 1
        return self.fail("expected a column or a literal")

    def literal_list(self) -> tuple[Any, ...]:
        if not (self.at("op", "(") or self.at("op", "[")):
            self.fail("expected `(` with a list of literals after `in`")
        close = ")" if self.take().value == "(" else "]"
        values: list[Any] = []
        while not self.at("op", close):
            values.append(self.literal())
            if not self.at("op", close):
                self.expect("op", ",", "`,`")
        self.take()
        return tuple(values)

    def like(self, left: Expr) -> Expr:
        tok = self.take()
        if tok.kind != "str":
            self.i -= 1
            self.fail("expected a quoted pattern after `like`")
        return like_range(left, tok.value, self.text)


def _date(text: str) -> datetime.date:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        raise ValueError(text)
    return datetime.date.fromisoformat(text)


def _timestamp(text: str) -> datetime.datetime:
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?", text):
        raise ValueError(text)
    return datetime.datetime.fromisoformat(text)


def _decimal(text: str) -> decimal.Decimal:
    if not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", text):
        raise ValueError(text)
    return decimal.Decimal(text)


_TYPED = {"date": _date, "timestamp": _timestamp, "decimal": _decimal}


def like_range(col: Expr, pattern: str, text: str = "") -> Expr:
    """`col like 'abc%'` as the range `'abc' <= col < 'abd'` (exact without a wildcard).

    Only prefix patterns: a range is what fragment statistics and Vortex can prune on.
    """
    body = pattern[:-1] if pattern.endswith("%") else pattern
    if "%" in body or "_" in body:
        raise FilterSyntaxError(
            f"cannot parse filter {text or pattern!r}: like supports prefix patterns 'abc%' (or an exact "
            f"string) only, got {pattern!r}; filter the rest in your engine"
        )
    if not pattern.endswith("%"):
        return Cmp("==", col, Lit(body))
    if not body:
        return Not(IsNull(col))
    upper = _next_prefix(body)
    low = Cmp(">=", col, Lit(body))
    return low if upper is None else And(low, Cmp("<", col, Lit(upper)))


def _next_prefix(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: no bound)."""
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x10FFFF:
            nxt = last + 1 if last + 1 not in range(0xD800, 0xE000) else 0xE000
            chars[-1] = chr(nxt)
            return "".join(chars)
        chars.pop()
    return None


def parse(text: str) -> Expr:
    """Parse a filter (the syntax in this module's docstring) into a Conch expression.

    >>> parse("x between 1 and 5 and name like 'ab%'")
    (((x >= 1) & (x <= 5)) & ((name >= 'ab') & (name < 'ac')))
    """
    return _Parser(text).parse()


def to_text(e: Expr) -> str:
    """`e` in this module's syntax, such that `parse(to_text(e))` is the same filter (every column
    quoted with backticks, every compound term parenthesised). Raises `FilterSyntaxError` for what
    the syntax cannot state: a NaN or infinite float, a null literal, another literal type.

    >>> to_text(parse("d >= date '1994-01-01' and s like 'ab%'"))
    "((`d` >= date '1994-01-01') and ((`s` >= 'ab') and (`s` < 'ac')))"
    """
    if isinstance(e, Col):
        return ".".join("`" + p.replace("`", "``") + "`" for p in e.path.split("."))
    if isinstance(e, Lit):
        return _literal_text(e.value)
    if isinstance(e, Cmp):
        op = "=" if e.op == "==" else e.op
        return f"({to_text(e.left)} {op} {to_text(e.right)})"
    if isinstance(e, And | Or):
        word = "and" if isinstance(e, And) else "or"
        return f"({to_text(e.left)} {word} {to_text(e.right)})"
    if isinstance(e, Not):
        return f"(not {to_text(e.operand)})"
    if isinstance(e, IsNull):
        return f"({to_text(e.operand)} is null)"
    if isinstance(e, Matches):
        return f"({to_text(e.operand)} matches {_literal_text(e.query)})"
    if isinstance(e, IsIn):
        return f"({to_text(e.operand)} in ({', '.join(_literal_text(v) for v in e.values)}))"
    raise FilterSyntaxError(f"cannot write {e!r} as filter text")


def _literal_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and v == v and abs(v) != float("inf"):
        return repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(v, datetime.datetime):
        return f"timestamp '{v.isoformat(sep=' ')}'"
    if isinstance(v, datetime.date):
        return f"date '{v.isoformat()}'"
    if isinstance(v, decimal.Decimal) and v.is_finite():
        return f"decimal '{v}'"
    raise FilterSyntaxError(f"cannot write the literal {v!r} ({type(v).__name__}) as filter text")
