"""`explain()`: the operator tree of a nested query, in the spirit of spec/002's execution plan.

Leaves are table scans (one per level, with key seeks and pushed filters); above them sit the
sort-merge joins on shared key prefixes (broadcast = ancestor joined to a deeper level; a *zip*
when both sides have the same row domain), filters that could not be pushed, regroup/rekey,
reductions and windows, and finally the output.
"""

from __future__ import annotations

from typing import Any

from conch.nested import nodes as N
from conch.nested.nodes import AnyDomain, Domain, Node, RekeyDomain


def _keys(level: str) -> str:
    parts = level.split(".") if level else []
    return ", ".join(".".join(parts[: i + 1]) for i in range(len(parts))) or "<root>"


def _scan_line(d: Domain, cols: dict[str, set[str]]) -> str:
    from conch.nested.exec import pushable

    pushed = [N.render(f) for f in d.filters if pushable(f, d.level) is not None]
    extra = []
    if d.pins:
        extra.append(f"seek prefix {tuple(d.pins)!r}")
    if d.keys is not None:
        extra.append(f"seek {d.keys.num_rows} key prefixes")
    if pushed and len(pushed) == len(d.filters):
        extra.append("filter " + " & ".join(pushed) + " pushed into scan")
    columns = sorted(cols.get(d.level, set())) or ["<keys>"]
    return f"Scan({d.name}) [{', '.join(columns)}]" + (f" {'; '.join(extra)}" if extra else "")


def _domain(d: AnyDomain, cols: dict[str, set[str]]) -> tuple[str, list[Any]]:
    from conch.nested.exec import pushable

    if isinstance(d, RekeyDomain):
        regroup = (
            f"Regroup(key={N.render(d.key)}) monotone per {d.target.level.rpartition('.')[0] or '<root>'}",
            [_domain(d.source, cols), *[_node(k, d.source, cols) for k in _broadcasts(d.key, d.source)]],
        )
        return f"Rekey(target={d.target.name})", [regroup]
    node: tuple[str, list[Any]] = (_scan_line(d, cols), [])
    if d.parent is not None and d.parent.restricted:
        node = (f"SemiJoin on ({_keys(d.parent.level)}) with filtered {d.parent.name}", [node, _domain(d.parent, cols)])
    if d.filters and any(pushable(f, d.level) is None for f in d.filters):
        for f in d.filters:
            node = (f"Filter({N.render(f)})", [node, *[_node(x, d, cols) for x in _broadcasts(f, d)]])
    return node


def _broadcasts(n: Node, at: AnyDomain) -> list[Node]:
    """Sub-expressions computed on another domain than `at` (joined in)."""
    d = N.node_domain(n)
    if d is not None:
        return [] if d is at else [n]
    if isinstance(n, N.Agg | N.Window):
        return [n]
    out: list[Node] = []
    for c in N.children(n):
        out.extend(_broadcasts(c, at))
    return out


def _node(n: Node, at: AnyDomain, cols: dict[str, set[str]]) -> tuple[str, list[Any]]:
    from conch.nested.exec import agg_target, home

    if isinstance(n, N.Agg):
        tgt = agg_target(n)
        src = home(n.operand)
        inner: list[Any] = []
        if src is not None:
            inner = [_domain(src, cols), *[_node(x, src, cols) for x in _broadcasts(n.operand, src)]]
        red = (f"Reduce(agg={n.func}) {N.render(n.operand)} → {tgt.name}", inner)
        if tgt.level != at.level:
            return (f"Join on ({_keys(tgt.level)}) [broadcast {tgt.name} → {N.level_name(at.level)}]", [red])
        return red
    if isinstance(n, N.Window):
        w = home(n.operand)
        inner = [_domain(w, cols)] if w is not None else []
        win = (f"Window(agg={n.func}, frame=({n.lo}, {n.hi})) within {N.level_name(N.parent_level(n.level))}", inner)
        if n.level != at.level:
            return (f"Join on ({_keys(n.level)}) [broadcast → {N.level_name(at.level)}]", [win])
        return win
    d = N.node_domain(n)
    if d is not None:
        sub = _domain(d, cols)
        if d.level != at.level:
            return (f"Join on ({_keys(d.level)}) [broadcast {d.name} → {N.level_name(at.level)}]", [sub])
        return (f"Zip on ({_keys(d.level)})", [sub])
    kids = [_node(x, at, cols) for x in _broadcasts(n, at)]
    return (f"Compute({N.render(n)})", kids)


def _render(node: tuple[str, list[Any]], prefix: str, last: bool, top: bool, out: list[str]) -> None:
    label, kids = node
    out.append(label if top else prefix + ("└── " if last else "├── ") + label)
    child_prefix = "" if top else prefix + ("    " if last else "│   ")
    for i, k in enumerate(kids):
        _render(k, child_prefix, i == len(kids) - 1, False, out)


def plan_tree(d: Domain, outputs: dict[str, Any]) -> str:
    """The operator tree of `d.select(**outputs)`, one operator per line."""
    from conch.nested.exec import Executor

    ex = Executor(d.table)
    ex.collect_domain(d)
    flat: dict[str, Node] = {}

    def walk(spec: dict[str, Any], prefix: str) -> None:
        for k, v in spec.items():
            if isinstance(v, dict):
                walk(v, prefix + k + ".")
            else:
                flat[prefix + k] = v

    walk(outputs, "")
    for v in flat.values():
        ex.collect(v)
    cols = {lvl: {c.removeprefix(lvl + ".") if lvl else c for c in cs} for lvl, cs in ex.needed.items()}
    kids: list[Any] = [_domain(d, cols)]
    for name, v in flat.items():
        if N.node_domain(v) is d or isinstance(v, N.Lit):
            continue
        sub = _node(v, d, cols)
        kids.append((f"{name} ← {sub[0]}", sub[1]))
    out: list[str] = []
    _render((f"Output({', '.join(flat)}) @ {d.level or '<root>'}", kids), "", True, True, out)
    return "\n".join(out)
