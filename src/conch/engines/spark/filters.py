"""The `where` read option: a Conch filter fixed when the DataFrame is created.

Why an option and not Spark's filter pushdown: PySpark 4.3 (classic) caches a Python source's
planned reader — with its pushed filters and partitions — on the JVM object behind the
DataFrame (`PythonDataSourceV2.readInfo`) and serves it to every later query of that DataFrame
whose filters do not trigger a new pushdown, and to every scan of the same DataFrame within one
query (the last pushdown wins). A reader that used pushed filters therefore answered
`df.filter("x > 1").count()` and then `df.count()` with the same number, and a self-join of two
filtered uses read one filter for both sides. No per-query information reaches a Python reader
at read time, so the only filters a reader can safely apply are those that are part of the
DataFrame itself: its options. Spark's own filters stay in Spark's plan (correct, not pruned).

A `where` expression (Python syntax, `conch.expr.syntax.parse`) goes whole to the scan's `where=`,
as any filter does: the scan's analysis (`conch.scan.filter`) cuts it into terms on key columns
only (evaluated on keys, never on values; where they bound the first key column, a key range
that prunes key spaces, fragments and read partitions) and the other terms (evaluated on fresh
records, never on stale cells, DESIGN §2, with stats pruning and in-file pushdown where legal),
terms mixing key and value columns (`id < 3 or x > 1`) included.
"""
