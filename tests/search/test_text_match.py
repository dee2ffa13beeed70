"""A text-match term inside `where` (`t["caption"].matches(...)`, issue 31), against a naive model:
over writes, partial upserts that leave the caption alone, null captions, deletes and compactions,
`scan(where=matches)` returns exactly the fresh records holding a query word (tantivy's default
analysis: split on non-alphanumerics, lowercased; words OR'd), and `+word +word` those holding
all. The same rows `search_text` ranks; typed errors where a term is malformed or unsupported."""

from __future__ import annotations

import re
import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

import conch
from conch.errors import ExpressionError, FilterSyntaxError
from conch.expr.syntax import parse, to_text

WORDS = ["red", "Car", "blue", "bike", "RED-car", "tree", "red's"]
CAPTION = st.one_of(st.none(), st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join))
QUERY = st.lists(st.sampled_from(["red", "car", "blue", "bike", "tree", "s"]), min_size=1, max_size=2, unique=True)
KEYS = st.integers(0, 25)


def tokens(text: str) -> set[str]:
    return {w.lower() for w in re.split(r"[^0-9A-Za-z]+", text) if w}


class MatchMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.dir = tempfile.mkdtemp()
        self.cat = conch.connect(self.dir, maintenance=conch.Policy(auto=False))
        self.t = self.cat.create_table("t", [("id", pa.int64())])
        self.t.write(
            pa.table({"id": pa.array([], pa.int64()), "cap": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
        )
        self.t.create_index("cap", kind="text")
        self.model: dict[int, dict[str, Any]] = {}

    def teardown(self) -> None:
        self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(rows=st.dictionaries(KEYS, CAPTION, min_size=1, max_size=6))
    def write(self, rows: dict[int, str | None]) -> None:
        ids = sorted(rows)
        self.t.write(pa.table({"id": ids, "cap": pa.array([rows[i] for i in ids], pa.string()), "n": ids}))
        for i in ids:
            self.model[i] = {"cap": rows[i], "n": i}

    @rule(ids=st.lists(KEYS, min_size=1, max_size=5, unique=True))
    def touch_other_column(self, ids: list[int]) -> None:  # a partial upsert: the caption stays
        ids = sorted(ids)
        self.t.write(pa.table({"id": ids, "n": [-i for i in ids]}))
        for i in ids:
            self.model.setdefault(i, {"cap": None})["n"] = -i

    @rule(ids=st.lists(KEYS, min_size=1, max_size=4, unique=True))
    def delete(self, ids: list[int]) -> None:
        self.t.delete(ids)
        for i in ids:
            self.model.pop(i, None)

    @rule()
    def compact(self) -> None:
        self.t.compact()

    @rule(words=QUERY, all_words=st.booleans())
    def check(self, words: list[str], all_words: bool) -> None:
        query = " ".join(f"+{w}" for w in words) if all_words else " ".join(words)
        want = sorted(
            k
            for k, r in self.model.items()
            if r["cap"] is not None and (all if all_words else any)(w in tokens(r["cap"]) for w in words)
        )
        got = self.t.scan("id", where=self.t["cap"].matches(query)).to_arrow()["id"].to_pylist()
        assert sorted(got) == want
        negated = self.t.scan("id", where=~self.t["cap"].matches(query)).to_arrow()["id"].to_pylist()
        assert sorted(negated) == sorted(k for k, r in self.model.items() if r["cap"] is not None and k not in want)
        ranked = self.t.search_text(query, k=100).to_arrow()["id"].to_pylist()
        assert sorted(ranked) == want  # search_text ranks exactly the matching records


TestMatchModel = MatchMachine.TestCase
TestMatchModel.settings = settings(max_examples=25, stateful_step_count=20, deadline=None)


def test_matches_in_where_everywhere(catalog: conch.Catalog) -> None:
    t = catalog.create_table("c", [("id", pa.int64())])
    t.write(pa.table({"id": [1, 2, 3, 4], "cap": ["a red car", "blue car", "red apple", None], "x": [1, 2, 3, 4]}))
    t.create_index("cap", kind="text")
    assert t.scan("id", where=t["cap"].matches("red car") & (t["x"] > 1)).to_arrow()["id"].to_pylist() == [2, 3]
    # the text syntax (CLI --where, Spark's where option) round-trips
    e = parse("cap matches 'red' and not cap matches 'apple'")
    assert to_text(parse(to_text(e))) == to_text(e)
    assert t.scan("id", where=e).to_arrow()["id"].to_pylist() == [1]
    # inside search_text's and delete's where
    assert t.search_text("car", where=t["cap"].matches("red")).to_arrow()["id"].to_pylist() == [1]
    t.delete(where=t["cap"].matches("apple"))
    assert t.scan("id").to_arrow()["id"].to_pylist() == [1, 2, 4]


def test_matches_in_the_nested_api(catalog: conch.Catalog) -> None:
    """`t.cap.matches(...)` and `_.cap.matches(...)` are the filter `t["cap"].matches(...)` builds;
    on a child level the match is evaluated per child row (`select` and `where`)."""
    from conch import _

    t = catalog.create_table("n", [("id", pa.int64())])
    t.write(pa.table({"id": [1, 2, 3], "cap": ["a red car", "blue car", None]}))
    for where in (t.cap.matches("red"), _.cap.matches("red"), (t["id"] > 0) & t.cap.matches("red")):
        assert t.scan("id", where=where).to_arrow()["id"].to_pylist() == [1]
    assert repr(t.cap.matches("red").__conch_expr__()) == repr(t["cap"].matches("red"))
    got = t.where(t["cap"].matches("car")).select(hit=_.cap.matches("blue")).scan().to_arrow()
    assert got.column("hit").to_pylist() == [False, True]
    with pytest.raises(ExpressionError, match="non-empty query"):
        t.cap.matches("")

    kids = pa.list_(pa.struct([("$", pa.int64()), ("note", pa.string())]))
    k = catalog.create_table("k", [("id", pa.int64())], pa.schema([("kids", kids)]))
    k.write([{"id": 1, "kids": [{"$": 1, "note": "red car"}, {"$": 2, "note": "green tree"}]}])
    notes = k.kids.where(_.note.matches("tree")).select(n=_.note).scan().to_arrow()
    assert notes.column("n").to_pylist() == ["green tree"]
    flags = k.kids.select(m=k.kids.note.matches("car")).scan().to_arrow()
    assert flags.column("m").to_pylist() == [True, False]


def test_matches_errors(catalog: conch.Catalog) -> None:
    t = catalog.create_table("c", [("id", pa.int64())])
    t.write(pa.table({"id": [1], "cap": ["x"]}))
    with pytest.raises(ExpressionError, match="non-empty query"):
        t["cap"].matches("  ")
    with pytest.raises(ExpressionError, match="does not parse"):
        t["cap"].matches("a:(")
    with pytest.raises(ExpressionError, match="needs a string column"):
        t.scan(where=t["id"].matches("x")).to_arrow()
    with pytest.raises(ExpressionError, match="string column"):
        (t["id"] + 1).matches("x")
    with pytest.raises(FilterSyntaxError, match="column on its left"):
        parse("'x' matches 'y'")
