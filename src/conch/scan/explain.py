"""`Scan.explain()`: the plan as text, step by step, in the order the general path runs it.

The text is stable for a given table state (tests compare it with golden files in
`tests/golden/`; regenerate them with `CONCH_UPDATE_GOLDEN=1 pytest tests/scan/test_explain_golden.py`).
"""

from __future__ import annotations

from conch.expr.tree import columns
from conch.model.schema import join_path
from conch.scan.metrics import ScanMetrics
from conch.scan.plan import ScanPlan
from conch.scan.pushdown import schema_vortex_expr


def render(table_name: str, p: ScanPlan, metrics: ScanMetrics | None = None) -> str:
    """The plan of a scan of `table_name`, then what its last run read (if it ran)."""
    schema = p.schema
    lines = [f"Scan {table_name} level={p.level or '<root>'}"]
    if p.asof is not None or p.since is not None:
        lines.append(f"  time filter: since={p.since} asof={p.asof}")
    if p.key_predicate is not None:
        lines.append(f"  key filter: {p.key_predicate}")
    if p.limit is not None:
        lines.append(f"  limit: {p.limit}")
    l1 = sum(1 for k in p.key_spaces if k.lsm >= 1)
    lines.append(
        f"  1. merge key spaces: {len(p.key_spaces)} considered (LSM: {len(p.key_spaces) - l1} L0 runs, {l1} L1 runs;"
        f" pruned: {p.pruned.get('key_spaces_time', 0)} by time, {p.pruned.get('key_spaces_span', 0)} by key span),"
        f" {len(p.tombstones)} tombstone sets"
    )
    lines.append("  2. locate fresh cells: per read unit, through the fragments' key masks")
    step = 3
    if p.filter is not None:
        groups = sorted({c.group for c in p.filter_columns})
        n_frs = sum(len(p.fragments.get(g, [])) for g in groups)
        names = ", ".join(join_path(p.level, g) or "<root>" for g in groups)
        on = [f"fresh cells of {names}: {n_frs} fragments"] if groups else []
        if p.filter_keys:
            on.append(f"keys {p.filter_keys}")
        lines.append(
            f"  {step}. row mask: filter {p.filter!r} on {'; '.join(on)};"
            " stats pruning, then pushed into the Vortex scan where typed (→ ordinals), else on fresh records"
        )
        lines.append("     " + where_terms_run(p))
        step += 1
    for g in sorted({c.group for c in p.columns}):
        cols = [c.path for c in p.columns if c.group == g]
        frs = p.fragments.get(g, [])
        masked = sum(1 for f in frs if f.mask)
        lines.append(
            f"  {step}. take {join_path(p.level, g) or '<root>'} {cols}: {len(frs)} fragments"
            + (f" ({masked} sparse or masked: file rows by mask file)" if masked else "")
            + ", rows by key mask"
        )
        step += 1
    lines.append(
        f"  {step}. assemble: {', '.join(schema.key_names(p.level) + [c.path for c in p.columns])} (sorted by key)"
    )
    if metrics is not None:
        lines.append("  last run:")
        lines += [f"    {line}" for line in metrics.render()]
    return "\n".join(lines)


def where_terms_run(p: ScanPlan) -> str:
    """Which terms of the filter run inside the Vortex scan and which on assembled fresh records
    in Arrow (key columns, several column groups, literals or operators Vortex cannot take
    exactly). The streamed path takes a filter only when every term is in-file, in one group."""
    in_file: list[str] = []
    in_arrow: list[str] = []
    for term in p.terms:
        groups = {p.schema.column(c).group for c in columns(term) if p.schema.has_column(c)}
        frs = p.fragments.get(next(iter(groups)), []) if len(groups) == 1 else []
        pushed = len(groups) == 1 and schema_vortex_expr(p.schema, term, frs) is not None
        (in_file if pushed else in_arrow).append(repr(term))
    return f"in the Vortex scan: {' & '.join(in_file) or '-'}; in Arrow: {' & '.join(in_arrow) or '-'}"
