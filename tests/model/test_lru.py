"""`conch.model.lru.Lru`, the map behind every per-process cache, against a naive model: a list
of (key, value) in recency order, evicting from the front past the entry or weight bound."""

from __future__ import annotations

import threading

from hypothesis import given
from hypothesis import strategies as st

from conch.model.lru import Lru

ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 6), st.integers(1, 9)),
        st.tuples(st.just("get"), st.integers(0, 6), st.just(0)),
        st.tuples(st.just("make"), st.integers(0, 6), st.integers(1, 9)),
        st.tuples(st.just("remove"), st.integers(0, 6), st.just(0)),
    ),
    max_size=60,
)


@given(ops, st.sampled_from([None, 1, 3]), st.sampled_from([None, 5, 12]), st.sampled_from([0, 1]))
def test_lru_equals_a_recency_list(
    steps: list[tuple[str, int, int]], entries: int | None, weight: int | None, keep: int
) -> None:
    evicted: list[int] = []
    lru: Lru[int, int] = Lru(entries, weight, weight=lambda v: v, on_evict=evicted.append, keep=keep)
    model: list[tuple[int, int]] = []
    model_evicted: list[int] = []

    def bound() -> None:
        while len(model) > keep and (
            (entries is not None and len(model) > entries) or (weight is not None and sum(v for _, v in model) > weight)
        ):
            model_evicted.append(model.pop(0)[1])

    for op, key, value in steps:
        old = next((i for i, (k, _) in enumerate(model) if k == key), None)
        if op == "get":
            got = lru.get(key)
            assert got == (model[old][1] if old is not None else None)
            if old is not None:
                model.append(model.pop(old))
        elif op == "put":
            lru.put(key, value)
            if old is not None:
                model_evicted.append(model.pop(old)[1])
            model.append((key, value))
            bound()
        elif op == "make":
            got = lru.get_or_make(key, lambda value=value: value)
            if old is not None:
                assert got == model[old][1]
                model.append(model.pop(old))
            else:
                assert got == value  # returned to its maker even when too heavy to keep
                model.append((key, value))
                before = len(model_evicted)
                bound()
                if any(k == key for k, _ in model) is False and len(model_evicted) > before:
                    model_evicted.pop()  # the maker's own value is not evicted under it
        else:
            lru.remove_if(lambda k, key=key: k == key)
            if old is not None:
                model_evicted.append(model.pop(old)[1])
        assert [k for k, _ in model] == [k for k in model_keys(lru)]
        assert lru.weight == sum(v for _, v in model)
        assert sorted(evicted) == sorted(model_evicted)


def model_keys(lru: Lru[int, int]) -> list[int]:
    return list(lru._items)


def test_racing_makers_keep_one_value_and_evict_the_other() -> None:
    """Two threads missing one key both make a value; one is kept and returned to both later
    callers, the other is handed to `on_evict` (text index parts: its directory is removed)."""
    evicted: list[object] = []
    lru: Lru[str, object] = Lru(max_entries=4, on_evict=evicted.append)
    start = threading.Barrier(2)
    made: list[object] = []

    def make() -> object:
        v = object()
        made.append(v)
        start.wait()  # both are inside make() before either inserts
        return v

    threads = [threading.Thread(target=lambda: lru.get_or_make("k", make)) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    kept = lru.get("k")
    assert kept in made and len(made) == 2
    assert evicted == [v for v in made if v is not kept]
