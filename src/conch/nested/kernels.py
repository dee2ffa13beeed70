"""Vectorised kernels over key-sorted Arrow data: runs, sort-merge lookups, run reductions, windows.

Every level's rows arrive sorted by full key, and a child's key extends its parent's, so rows of one
parent form a contiguous *run*. Broadcasting is "find each run's parent row, repeat it"; a reduction
is "reduce each run"; a window is "slide within a run". All of these are O(rows) NumPy/Arrow passes
over the runs; only the run *prefixes* (one per parent, not one per row) are matched, by binary
search on a single integer key or by Arrow's hash join on composite keys.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.model.keys import equal_adjacent
from conch.model.sets import distinct

EMPTY_DEFAULTS = {"count": 0, "any": False, "all": True}
SHIFTED_WINDOW_MAX = 16  # windows narrower than this sum shifted columns; wider ones prefix sums


def as_array(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        return a.combine_chunks() if a.num_chunks != 1 else a.chunk(0)
    return a


def run_starts(keys: list[pa.Array], n: int) -> np.ndarray:
    """Indices where the key prefix `keys` changes (row 0 always starts a run)."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        if n > 1:
            change[1:] |= ~equal_adjacent(k)
    return np.flatnonzero(change)


def lookup(
    target: list[pa.Array],
    n_target: int,
    probe: list[pa.Array],
    n_probe: int,
    t_starts: np.ndarray | None = None,
    p_starts: np.ndarray | None = None,
) -> np.ndarray:
    """For each probe key, the row of the equal key in `target` (sorted, unique), or -1.
    `t_starts` / `p_starts`: run starts of all but the last key column, when already known."""
    if not target:  # the key-less root: one record that everything hangs from
        return np.zeros(n_probe, dtype=np.int64) if n_target else np.full(n_probe, -1, dtype=np.int64)
    probe = [p if p.type == t.type else pc.cast(p, t.type) for p, t in zip(probe, target)]
    if n_probe == n_target and all(p.equals(t) for p, t in zip(probe, target)):
        return np.arange(n_probe, dtype=np.int64)  # a zip: identical key sets
    if len(target) == 1 and (pa.types.is_integer(target[0].type) or pa.types.is_floating(target[0].type)):
        tv = target[0].to_numpy(zero_copy_only=False)
        pv = probe[0].to_numpy(zero_copy_only=False)
        pos = np.searchsorted(tv, pv)
        pos_c = np.minimum(pos, max(len(tv) - 1, 0))
        ok = (pos < len(tv)) & (tv[pos_c] == pv) if len(tv) else np.zeros(len(pv), dtype=bool)
        return np.where(ok, pos, -1).astype(np.int64)
    if len(target) > 1 and pa.types.is_integer(target[-1].type) and n_target and n_probe:
        return _lookup_by_parent(target, n_target, probe, n_probe, t_starts, p_starts)
    return _hash_join(target, n_target, probe, n_probe)


def _hash_join(target: list[pa.Array], n_target: int, probe: list[pa.Array], n_probe: int) -> np.ndarray:
    """The general case of `lookup`: an Arrow hash join of probe keys onto target rows."""
    names = [f"k{i}" for i in range(len(target))]
    tt = pa.table([*target, pa.array(np.arange(n_target, dtype=np.int64))], names=[*names, "__t"])
    pt = pa.table([*probe, pa.array(np.arange(n_probe, dtype=np.int64))], names=[*names, "__p"])
    j = pt.join(tt, keys=names, join_type="inner", use_threads=True)
    out = np.full(n_probe, -1, dtype=np.int64)
    out[as_array(j["__p"]).to_numpy()] = as_array(j["__t"]).to_numpy()
    return out


def _lookup_by_parent(
    target: list[pa.Array],
    n_target: int,
    probe: list[pa.Array],
    n_probe: int,
    t_starts: np.ndarray | None = None,
    p_starts: np.ndarray | None = None,
) -> np.ndarray:
    """Composite keys ending in an integer: match the prefix runs first (few), then binary-search
    (parent ordinal, integer key) pairs — both sides are sorted by exactly that pair."""
    if t_starts is None:
        t_starts = run_starts(target[:-1], n_target)
    if p_starts is None:
        p_starts = run_starts(probe[:-1], n_probe)
    t_pref = [k.take(pa.array(t_starts)) for k in target[:-1]]
    p_pref = [k.take(pa.array(p_starts)) for k in probe[:-1]]
    p_ord = lookup(t_pref, len(t_starts), p_pref, len(p_starts))
    t_ord = np.repeat(np.arange(len(t_starts), dtype=np.int64), np.diff(np.r_[t_starts, n_target]))
    p_ord = np.repeat(p_ord, np.diff(np.r_[p_starts, n_probe]))
    tk = target[-1].to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    pk = probe[-1].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    span = int(max(tk.max(), pk.max(initial=0))) + 1
    if tk.min() < 0 or pk.min(initial=0) < 0 or span * (len(t_starts) + 1) >= 2**62:
        return _hash_join(target, n_target, probe, n_probe)  # keys too wide to pack
    tc = t_ord * span + tk
    pc_ = p_ord * span + pk
    pos = np.searchsorted(tc, pc_)
    ok = (p_ord >= 0) & (pos < n_target)
    ok[ok] &= tc[pos[ok]] == pc_[ok]
    if probe[-1].null_count:
        ok &= np.asarray(pc.is_valid(probe[-1]).to_numpy(zero_copy_only=False), dtype=bool)
    return np.where(ok, pos, -1).astype(np.int64)


def take_or_null(arr: pa.Array, idx: np.ndarray) -> pa.Array:
    """`arr[idx]` with -1 → null."""
    if len(idx) and idx.min() < 0:
        return arr.take(pa.array(idx, mask=idx < 0))
    return arr.take(pa.array(idx))


def reduce_runs(func: str, values: pa.Array, starts: np.ndarray) -> pa.Array:
    """One value per run of `values` (runs start at `starts`, the last ends at len(values)).

    The result type depends only on `func` and the value type (`_result_type`), never on which
    kernel ran or on nulls, so the chunks of a streamed query agree on their schema."""
    out = _reduce_runs(func, values, starts)
    want = _result_type(func, values.type)
    return out if out.type == want else out.cast(want)


def _reduce_runs(func: str, values: pa.Array, starts: np.ndarray) -> pa.Array:
    n = len(values)
    k = len(starts)
    if k == 0:
        return pa.array([], type=_result_type(func, values.type))
    ends = np.r_[starts[1:], n]
    if func == "list":
        return pa.ListArray.from_arrays(pa.array(np.r_[starts, n].astype(np.int32)), values)
    if func in ("first", "last"):
        # first/last of the run's rows, nulls included (positional, like Polars' first/last).
        return values.take(pa.array(starts if func == "first" else ends - 1))
    numeric = pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
    if func == "count":
        valid = np.ones(n, dtype=np.int64) if values.null_count == 0 else _valid(values).astype(np.int64)
        return pa.array(np.add.reduceat(valid, starts), pa.int64())
    if numeric and func in ("sum", "mean", "min", "max"):
        # One NumPy kernel whether or not there are nulls (nulls become the operation's identity,
        # runs without a valid value become null): a run's result depends only on its values,
        # never on which other runs share the batch, so streamed chunks agree with one pass.
        floating = pa.types.is_floating(values.type)
        nulls = values.null_count > 0
        cnt = np.add.reduceat(_valid(values).astype(np.int64), starts) if nulls else ends - starts
        empty = cnt == 0 if nulls else None
        if func in ("sum", "mean"):
            acc = np.float64 if floating or func == "mean" else np.int64
            v = values.fill_null(0).to_numpy() if nulls else values.to_numpy(zero_copy_only=False)
            tot = np.add.reduceat(v.astype(acc, copy=False), starts)
            if func == "mean":
                with np.errstate(invalid="ignore", divide="ignore"):
                    tot = tot / np.where(cnt == 0, 1, cnt)
            return pa.array(tot, mask=empty)
        red = np.minimum if func == "min" else np.maximum
        if not nulls:
            return pa.array(red.reduceat(values.to_numpy(), starts), values.type)
        dt = values.type.to_pandas_dtype()
        if floating:
            ident = np.inf if func == "min" else -np.inf
        else:
            ident = np.iinfo(dt).max if func == "min" else np.iinfo(dt).min
        v = values.fill_null(pa.scalar(ident, values.type)).to_numpy()
        return pa.array(red.reduceat(v, starts), values.type, mask=empty)
    # Nulls or non-numeric values: Arrow's hash aggregation over the run ids, in run order.
    gid = np.repeat(np.arange(k, dtype=np.int64), ends - starts)
    t = pa.table({"g": gid, "v": values})
    res = t.group_by("g", use_threads=False).aggregate([("v", func)])
    return as_array(res.column(f"v_{func}"))


def _valid(values: pa.Array) -> np.ndarray:
    return np.asarray(pc.is_valid(values).to_numpy(zero_copy_only=False), dtype=bool)


def _result_type(func: str, t: pa.DataType) -> pa.DataType:
    if func == "count":
        return pa.int64()
    if func == "sum" and pa.types.is_floating(t):
        return pa.float64()
    if func == "sum" and pa.types.is_unsigned_integer(t):
        return pa.uint64()
    if func == "sum" and (pa.types.is_integer(t) or pa.types.is_boolean(t)):
        return pa.int64()
    if func == "mean":
        return pa.float64()
    if func == "list":
        return pa.list_(t)
    if func in ("any", "all"):
        return pa.bool_()
    return t


def scatter(func: str, run_values: pa.Array, run_rows: np.ndarray, n_rows: int, value_type: pa.DataType) -> pa.Array:
    """Place run results at their target rows; rows with no run get the empty-group value
    (count 0, any false, all true, list [], else null)."""
    pos = np.full(n_rows, -1, dtype=np.int64)
    ok = run_rows >= 0
    pos[run_rows[ok]] = np.flatnonzero(ok)
    if func == "list":
        return _scatter_lists(run_values, pos, value_type)
    out = take_or_null(run_values, pos) if len(run_values) else pa.nulls(n_rows, _result_type(func, value_type))
    if func in EMPTY_DEFAULTS and out.null_count:
        out = pc.fill_null(out, pa.scalar(EMPTY_DEFAULTS[func], out.type))
    return as_array(out)


def _scatter_lists(lists: pa.Array, pos: np.ndarray, value_type: pa.DataType) -> pa.Array:
    if len(lists) == 0:
        return pa.ListArray.from_arrays(pa.array(np.zeros(len(pos) + 1, np.int32)), pa.array([], value_type))
    lens = np.where(pos >= 0, np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False))[pos], 0)
    offsets = np.r_[0, np.cumsum(lens)].astype(np.int32)
    src_off = np.asarray(lists.offsets.to_numpy())
    starts = np.where(pos >= 0, src_off[np.maximum(pos, 0)], 0)
    idx = np.repeat(starts - offsets[:-1], lens) + np.arange(offsets[-1])
    values = lists.values.take(pa.array(idx)) if len(idx) else lists.values.slice(0, 0)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


def _run_cumsum(v: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Inclusive prefix sums restarted at each run, each summed in row order from its run's
    start (runs are padded into a matrix per power-of-two length bucket: ≤ 2× the rows)."""
    out = np.empty(len(v), dtype=np.float64)
    lens = ends - starts
    bucket = np.ceil(np.log2(np.maximum(lens, 1))).astype(np.int64)
    for k in distinct(bucket):
        sel = np.flatnonzero(bucket == k)
        width = int(lens[sel].max())
        ln = lens[sel]
        rows = np.repeat(np.arange(len(sel)), ln)
        cols = np.arange(int(ln.sum())) - np.repeat(np.cumsum(ln) - ln, ln)
        pos = starts[sel][rows] + cols
        mat = np.zeros((len(sel), width), dtype=np.float64)
        mat[rows, cols] = v[pos]
        out[pos] = np.cumsum(mat, axis=1)[rows, cols]
    return out


def window(func: str, values: pa.Array, starts: np.ndarray, lo: int, hi: int) -> pa.Array:
    """For each row i, reduce rows i+lo .. i+hi (inclusive) of its own run."""
    out = _window(func, values, starts, lo, hi)
    want = _result_type(func, values.type)
    return out if out.type == want else out.cast(want)


def _window(func: str, values: pa.Array, starts: np.ndarray, lo: int, hi: int) -> pa.Array:
    n = len(values)
    if n == 0:
        return pa.array([], type=_result_type(func, values.type))
    ends = np.r_[starts[1:], n]
    run_start = np.repeat(starts, ends - starts)
    run_end = np.repeat(ends, ends - starts)  # exclusive
    i = np.arange(n)
    a = np.clip(i + lo, run_start, run_end)  # window [a, b) clipped to the run
    b = np.clip(i + hi + 1, run_start, run_end)
    b = np.maximum(a, b)
    numeric = pa.types.is_integer(values.type) or pa.types.is_floating(values.type)
    if func in ("sum", "mean", "count") and (numeric or func == "count"):
        valid = _valid(values) if values.null_count else np.ones(n, dtype=bool)
        cnt = np.r_[0, np.cumsum(valid)]
        c = cnt[b] - cnt[a]
        if func == "count":
            return pa.array(c, pa.int64())
        v = np.where(valid, values.to_numpy(zero_copy_only=False), 0).astype(np.float64)
        if hi - lo < SHIFTED_WINDOW_MAX:
            # Narrow windows: add the shifted columns in row order (exact, position-independent:
            # a streamed chunk gives the bits of one pass). Wide windows use prefix sums.
            s = np.zeros(n, dtype=np.float64)
            for k in range(lo, hi + 1):
                j = i + k
                inside = (j >= a) & (j < b)
                s += np.where(inside, v[np.clip(j, 0, n - 1)], 0.0)
        else:
            cs = _run_cumsum(v, starts, ends)  # restarts at every run: position-independent
            s = np.where(b > a, cs[np.maximum(b - 1, 0)], 0.0) - np.where(a > run_start, cs[np.maximum(a - 1, 0)], 0.0)
        if func == "sum":
            return pa.array(s if pa.types.is_floating(values.type) else s.astype(np.int64), mask=c == 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return pa.array(s / np.where(c == 0, 1, c), mask=c == 0)
    # General case: materialise the windows as lists (one take), then reduce them as runs.
    lens = b - a
    offsets = np.r_[0, np.cumsum(lens)]
    idx = np.repeat(a - offsets[:-1], lens) + np.arange(offsets[-1])
    taken = values.take(pa.array(idx))
    if func == "list":
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), taken)
    nonempty = lens > 0
    res = reduce_runs(func, taken, offsets[:-1][nonempty])
    return scatter(func, res, np.flatnonzero(nonempty), n, values.type)
