"""The inspector's pages: tables, a table (schema, LSM tree, history), manifests, scan, blobs.

Read-only: every route only reads (scans, states, history). Time travel is the `asof` query
parameter (a commit time in µs) on every table page; the history timeline links to it.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import conch
from conch.apps.ui import lsm, neighbours
from conch.apps.ui.folding import fold_rows
from conch.apps.ui.values import render
from conch.errors import ConchError, TableNotFoundError, TimeTravelError
from conch.expr.syntax import parse
from conch.files.manifest import TableState
from conch.model.deps import optional_import
from conch.model.key_text import key_text, parse_key
from conch.model.keys import KeyPrefix, decode_key, encode_key
from conch.model.progress import human_bytes

SCAN_LIMIT = 20
NAME_SHOWN = 200  # characters of a column name a page carries
KIND_CLASS = {"write": "c-write", "delete": "c-delete"}


def _when(us: int | None) -> str:
    if not us:
        return "N/A"
    return datetime.fromtimestamp(us / 1e6, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def _column_head(name: str) -> str:
    """A column's header: a long name is cut to one ellipsized line (CSS), whole in its tooltip;
    a name past `NAME_SHOWN` characters is cut here too, so a 5,000-character name costs no more."""
    shown = name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN] + "…"
    return f'<th><span class="colname" title="{escape(shown)}">{escape(shown)}</span></th>'


def _cut_long_names(text: str) -> str:
    """`text` with every run of more than `NAME_SHOWN` non-blank characters (a 5,000-character
    column name in `explain()`) cut to its first `NAME_SHOWN` and `…`."""
    return re.sub(rf"\S{{{NAME_SHOWN + 1},}}", lambda m: m.group(0)[:NAME_SHOWN] + "…", text)


def _q(**params: Any) -> str:
    clean = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(clean) if clean else ""


class Inspector:
    """The pages of one warehouse."""

    def __init__(self, warehouse: str) -> None:
        self.warehouse = warehouse
        self.catalog = conch.connect(warehouse)

    # ----- layout -------------------------------------------------------------------------
    def page(self, title: str, body: str, table: str | None = None, asof: int | None = None, tab: str = "") -> str:
        nav = ""
        if table is not None:
            links = [("overview", f"/t/{table}"), ("manifests", f"/t/{table}/manifests"), ("scan", f"/t/{table}/scan")]
            nav = '<nav class="tabs">' + "".join(
                f'<a class="{"on" if name == tab else ""}" href="{href}{_q(asof=asof)}">{name}</a>'
                for name, href in links
            )
            if asof is not None:
                nav += f'<span class="asof">as of {_when(asof)} · <a href="/t/{table}{"/" + tab if tab != "overview" else ""}">latest</a></span>'
            nav += "</nav>"
        tables = "".join(
            f'<li><a class="{"on" if n == table else ""}" href="/t/{escape(n)}">{escape(n)}</a></li>'
            for n in self.catalog.list_tables()
        )
        return (
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{escape(title)} · Conch</title>"
            '<link rel="stylesheet" href="/static/style.css"><script defer src="/static/app.js"></script></head><body>'
            f'<header><a class="brand" href="/">Conch</a><span class="wh">{escape(self.warehouse)}</span></header>'
            f'<div class="main"><aside><h3>Tables</h3><ul>{tables}</ul></aside><section>'
            f"<h1>{escape(title)}</h1>{nav}{body}</section></div></body></html>"
        )

    def table_and_state(self, name: str, asof: int | None) -> tuple[conch.Table, TableState]:
        t = self.catalog.table(name)
        return t, t.state_at(asof)

    # ----- pages --------------------------------------------------------------------------
    def tables(self) -> str:
        rows = []
        for name in self.catalog.list_tables():
            t = self.catalog.table(name)
            st = t.state()
            s = lsm.summary(st)
            keys = ", ".join(f"{f.name}: {f.type}" for f in st.schema.key_schema) or "(none)"
            rows.append(
                f'<tr><td><a href="/t/{escape(name)}">{escape(name)}</a></td><td>{escape(keys)}</td>'
                f"<td>{st.seq}</td><td>{s['key_spaces']}</td><td>{s['fragments']}</td><td>{human_bytes(s['bytes'])}</td>"
                f"<td>{_when(st.time)}</td></tr>"
            )
        body = (
            '<table class="grid" id="tables"><tr><th>table</th><th>key</th><th>commits</th><th>key spaces</th>'
            f"<th>fragments</th><th>size</th><th>last commit</th></tr>{''.join(rows)}</table>"
            if rows
            else f'<p class="muted">no tables in {escape(self.warehouse)} yet: <code>conch create</code> or <code>conch write</code> one</p>'
        )
        return self.page("Tables", body)

    def overview(self, name: str, asof: int | None) -> str:
        t, st = self.table_and_state(name, asof)
        s = lsm.summary(st)
        lsm_levels = ", ".join(f"L{k}: {v}" for k, v in sorted(s["by_lsm"].items())) or "empty"
        stats = (
            f'<div class="cards"><div><b>{st.seq}</b>commits</div><div><b>{s["key_spaces"]}</b>key spaces ({lsm_levels})</div>'
            f"<div><b>{s['fragments']}</b>fragments</div><div><b>{human_bytes(s['bytes'])}</b>on disk</div></div>"
        )
        drawings = "".join(
            f"<h3>LSM tree of level <code>{escape(lvl or '(root)')}</code></h3>{lsm.level_svg(st, lvl)}"
            for lvl in st.schema.levels
        )
        body = (
            stats
            + "<h2>History</h2>"
            + self.timeline(t, asof)
            + "<h2>Tags and branches</h2>"
            + self.tags_and_branches(t)
            + '<div class="cols"><div><h2>Schema</h2>'
            + self.schema_tree(st)
            + "</div></div><h2>LSM tree</h2>"
            + drawings
        )
        return self.page(name, body, name, asof, "overview")

    def timeline(self, t: conch.Table, asof: int | None) -> str:
        """The commits as dots (a link each to the table as of it) and a table of the last 50.
        Commits before the time-travel horizon (`Table.expire`) are drawn hollow, left of a
        dashed line, and link nowhere: reading as of them is an error."""
        commits = t.history()
        if not commits:
            return '<p class="muted">no commits yet</p>'
        horizon = t.log.horizon()
        first_kept = next((c for c in commits if c.time >= horizon), None) if horizon else None
        width, step = 900, 900 / max(len(commits), 1)
        current = max((c.seq for c in commits if asof is None or c.time <= asof), default=0)
        dots = []
        for i, c in enumerate(commits):
            cx = step * i + step / 2
            on = " on" if c.seq == current else ""
            tip = f"#{c.seq} {escape(c.kind)} at {_when(c.time)}: {escape(c.summary)}"
            if c.time < horizon:
                dots.append(
                    f'<g class="commit expired" data-seq="{c.seq}"><title>{tip} (expired: before the time-travel '
                    f'horizon)</title><circle cx="{cx:.1f}" cy="22" r="6"/>'
                    f'<text x="{cx:.1f}" y="48" text-anchor="middle">#{c.seq}</text></g>'
                )
                continue
            dots.append(
                f'<a href="/t/{escape(t.name)}{_q(asof=c.time)}" class="commit {KIND_CLASS.get(c.kind, "c-other")}{on}" '
                f'data-seq="{c.seq}"><title>{tip}</title>'
                f'<circle cx="{cx:.1f}" cy="22" r="{9 if on else 7}"/>'
                f'<text x="{cx:.1f}" y="48" text-anchor="middle">#{c.seq}</text></a>'
            )
        marker, note = "", ""
        if first_kept is not None and first_kept is not commits[0]:
            hx = step * commits.index(first_kept)
            marker = (
                f'<line class="horizon" x1="{hx:.1f}" y1="4" x2="{hx:.1f}" y2="40"/>'
                f'<text class="horizon" x="{hx + 4:.1f}" y="10">horizon</text>'
            )
            note = (
                f'<p class="horizon-note">Time travel reaches back to the expire horizon: version #{first_kept.seq} '
                f"at {_when(horizon)}. The {commits.index(first_kept)} older commits are listed but cannot be read "
                "(<code>Table.expire</code>).</p>"
            )
        svg = (
            f'<svg class="timeline" viewBox="0 0 {width} 56" width="{width}" height="56" xmlns="http://www.w3.org/2000/svg">'
            f'<line x1="{step / 2:.1f}" y1="22" x2="{width - step / 2:.1f}" y2="22"/>{marker}{"".join(dots)}</svg>'
        )

        def row(c: Any) -> str:
            link = (
                '<span class="muted">expired</span>'
                if c.time < horizon
                else f'<a class="asof-link" href="/t/{escape(t.name)}{_q(asof=c.time)}">view as of</a>'
            )
            cls = "on" if c.seq == current else ("expired" if c.time < horizon else "")
            return (
                f'<tr class="{cls}"><td>#{c.seq}</td><td>{_when(c.time)}</td><td>{escape(c.kind)}</td>'
                f"<td>{escape(c.summary)}</td><td>{link}</td></tr>"
            )

        rows = "".join(row(c) for c in reversed(commits[-50:]))
        return (
            f'{svg}{note}<details class="history"><summary>{len(commits)} commits</summary>'
            f'<div class="scroll"><table class="grid">{rows}</table></div></details>'
        )

    def tags_and_branches(self, t: conch.Table) -> str:
        """The table's tags (each a link to the table as of its version) and branches (each a
        link to the branch's own pages, `/t/<table>@<branch>`); on a branch, what it branched from."""
        out = []
        info = t.log.branch
        if info is not None:
            out.append(
                f'<p class="branch-of">branch <b>{escape(info.name)}</b> of table '
                f'<a href="/t/{escape(info.table)}">{escape(info.table)}</a> from its version #{info.base_seq} '
                f"({_when(info.base_time)})</p>"
            )
        times = {c.seq: c.time for c in t.history()}
        tags = sorted(t.tags().items(), key=lambda kv: (kv[1], kv[0]))
        rows = "".join(
            f'<tr><td class="tag">{escape(n)}</td><td>#{v}</td><td>{_when(times.get(v))}</td>'
            f'<td><a class="asof-link" href="/t/{escape(t.name)}{_q(asof=times.get(v))}">view as of</a></td></tr>'
            for n, v in tags
        )
        out.append(
            f'<table class="grid" id="tags"><tr><th>tag</th><th>version</th><th>committed at</th><th></th></tr>{rows}</table>'
            if tags
            else '<p class="muted" id="tags">no tags (<code>conch tag</code>)</p>'
        )
        if info is None:
            branches = t.branches()
            rows = "".join(
                f'<tr><td class="branch"><a href="/t/{escape(t.name)}@{escape(b.name)}">{escape(b.name)}</a></td>'
                f"<td>#{b.base_version} ({_when(b.base_time)})</td><td>#{b.head_version}</td></tr>"
                for b in branches
            )
            out.append(
                '<table class="grid" id="branches"><tr><th>branch</th><th>from version</th><th>head (its own versions)'
                f"</th></tr>{rows}</table>"
                if branches
                else '<p class="muted" id="branches">no branches (<code>conch branch</code>)</p>'
            )
        return "".join(out)

    def schema_tree(self, st: TableState) -> str:
        schema = st.schema

        def level_html(lvl: str) -> str:
            keys = ", ".join(f"{f.name}: {f.type}" for f in schema.key_fields(lvl))
            groups = []
            for g in schema.groups(lvl):
                cols = "".join(
                    f"<li><code>{escape(c.name)}</code> <span class=type>{escape(str(c.type))}</span></li>"
                    for c in schema.columns_of(lvl, g)
                )
                groups.append(f'<li class="group">group <b>{escape(g or "(root)")}</b><ul>{cols}</ul></li>')
            children = "".join(level_html(c.path) for c in schema.children(lvl))
            return (
                f'<li class="level">level <b>{escape(lvl or "(root)")}</b> <span class=type>key ({escape(keys)})</span>'
                f"<ul>{''.join(groups)}{children}</ul></li>"
            )

        return f'<ul class="tree">{level_html("")}</ul>'

    def manifests(self, name: str, asof: int | None) -> str:
        _t, st = self.table_and_state(name, asof)
        schema = st.schema
        out = []
        ks_rows = []
        for k in sorted(st.key_spaces.values(), key=lambda k: k.seq):
            f = schema.key_fields(k.level)
            span = f"{key_text(decode_key(bytes.fromhex(k.min_key), f))} .. {key_text(decode_key(bytes.fromhex(k.max_key), f))}"
            ks_rows.append(
                (
                    k.id + (" (deletions)" if k.kind == "tombstone" else ""),
                    k.level or "(root)",
                    human_bytes(k.bytes),
                    span,
                    k.rows,
                    k.lsm,
                    k.time,
                    k.compacted_at,
                )
            )
        out.append(self.manifest_table("Key space manifest", ks_rows, "Keys"))
        for lvl in schema.levels:
            for g in schema.groups(lvl):
                rows = []
                for fr in sorted(
                    (x for x in st.fragments.values() if x.level == lvl and x.group == g),
                    key=lambda x: (x.seq, x.start),
                ):
                    size = f"{human_bytes(fr.bytes)} ({human_bytes(len(fr.stats))})"
                    rows.append(
                        (
                            fr.id,
                            lvl or "(root)",
                            size,
                            f"rows {fr.start}..{fr.start + fr.rows} of {fr.key_space}",
                            fr.rows,
                            fr.lsm,
                            fr.time,
                            fr.compacted_at,
                        )
                    )
                title = "Column group manifest for " + ".".join(p for p in (name, lvl, g) if p)
                out.append(self.manifest_table(title, rows, "Rows"))
        return self.page(f"{name}: manifests", "".join(out), name, asof, "manifests")

    @staticmethod
    def manifest_table(title: str, rows: list[tuple[Any, ...]], count: str) -> str:
        head = f"<tr><th>ID</th><th>level</th><th>size (metadata)</th><th>key span</th><th>{count}</th><th>LSM</th><th>committed at</th><th>compacted at</th></tr>"
        body = "".join(
            f"<tr><td><code>{escape(str(r[0]))}</code></td><td>{escape(str(r[1]))}</td><td>{r[2]}</td><td>{escape(str(r[3]))}</td>"
            f"<td>{r[4]}</td><td>L{r[5]}</td><td>{_when(r[6])}</td><td>{_when(r[7])}</td></tr>"
            for r in rows
        )
        return f'<h2>{escape(title)} <span class="muted">({len(rows)})</span></h2><div class="scroll"><table class="grid manifest">{head}{body}</table></div>'

    def scan(self, name: str, p: dict[str, str]) -> str:
        asof = int(p["asof"]) if p.get("asof") else None
        t, st = self.table_and_state(name, asof)
        schema = st.schema
        level = p.get("level", "")
        fields = schema.key_fields(level)
        limit = int(p.get("limit") or SCAN_LIMIT)
        form = self.scan_form(name, schema, p)
        keys: Any = None
        crumb = ""
        if p.get("key"):
            keys = [parse_key(p["key"], fields)]
        elif p.get("prefix"):
            prefix = decode_key(bytes.fromhex(p["prefix"]), fields)
            keys = KeyPrefix(prefix)
            crumb = self.breadcrumb(name, schema, level, prefix, asof)
        cols = [c.strip() for c in p.get("columns", "").split(",") if c.strip()]
        where = parse(p["where"]) if p.get("where") else None
        s = t.scan(*cols, where=where, keys=keys, asof=asof, level=level or None, limit=limit)
        result = s.to_arrow()
        children = schema.children(level)
        near = [i for i in st.indexes.values() if i.kind == "vector" and i.level == level]
        head = "".join(_column_head(n) for n in result.column_names) + "".join(_column_head(c.name) for c in children)
        head += _column_head("neighbours") if near else ""
        rows = []
        key_names = [f.name for f in fields]
        recs, sizes = fold_rows(result)  # strings and blobs cut in Arrow: the page never holds whole cells
        keys_of = result.select(key_names).to_pylist()  # whole: a folded string key would link elsewhere
        for rec, rec_sizes, key_rec in zip(recs, sizes, keys_of, strict=True):
            key = tuple(key_rec[k] for k in key_names)
            khex = encode_key(key, fields).hex()
            cells = []

            def blob_url(path: str, khex: str = khex) -> str:
                return f"/t/{name}/blob{_q(level=level, key=khex, col=path, asof=asof)}"

            for col, value in rec.items():
                cells.append(f"<td>{render(value, blob_url, col, rec_sizes[col])}</td>")
            for c in children:
                href = f"/t/{name}/scan{_q(level=c.path, prefix=khex, asof=asof)}"
                cells.append(f'<td><a class="child" href="{escape(href)}">{escape(c.name)} →</a></td>')
            if near:
                href = f"/t/{name}/neighbours{_q(level=level, key=khex, column=near[0].name, asof=asof)}"
                cells.append(f'<td><a class="near" href="{escape(href)}">nearest →</a></td>')
            rows.append(f"<tr>{''.join(cells)}</tr>")
        table = (
            f'<div class="scroll"><table class="grid scan" id="results"><tr>{head}</tr>{"".join(rows)}</table></div>'
        )
        m = s.metrics()
        metrics = "".join(
            f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>"
            for k, v in dataclasses.asdict(m).items()
            if k != "groups"
        ) + "".join(
            f"<tr><th>group {escape(g or '(root)')}</th><td>{escape(str(dataclasses.asdict(gm)))}</td></tr>"
            for g, gm in m.groups.items()
        )
        body = (
            form
            + crumb
            + f'<p class="muted">{result.num_rows} records (limit {limit}) at level {escape(level or "(root)")}</p>'
            + table
            + f'<div class="cols"><div><h2>explain()</h2><pre class="explain">{escape(_cut_long_names(s.explain()))}</pre></div>'
            + f'<div><h2>metrics()</h2><table class="grid metrics">{metrics}</table></div></div>'
        )
        return self.page(f"{name}: scan", body, name, asof, "scan")

    def neighbours(self, name: str, p: dict[str, str]) -> str:
        asof = int(p["asof"]) if p.get("asof") else None
        t = self.catalog.table(name)
        return self.page(f"{name}: nearest neighbours", neighbours.neighbours_body(t, name, p), name, asof, "scan")

    def scan_form(self, name: str, schema: Any, p: dict[str, str]) -> str:
        levels = "".join(
            f'<option value="{escape(lvl)}" {"selected" if lvl == p.get("level", "") else ""}>{escape(lvl or "(root)")}</option>'
            for lvl in schema.levels
        )
        hidden = f'<input type="hidden" name="asof" value="{escape(p["asof"])}">' if p.get("asof") else ""

        def field(n: str, label: str, ph: str, size: int = 24) -> str:
            return f'<label>{label}<input name="{n}" size="{size}" placeholder="{escape(ph)}" value="{escape(p.get(n, ""))}"></label>'

        return (
            f'<form class="scanform" method="get" action="/t/{escape(name)}/scan">'
            f'<label>level<select name="level">{levels}</select></label>'
            + field("columns", "columns", "a, b.c, group")
            + field("where", "where", "x > 1 and name like 'a%'", 36)
            + field("key", "key", "3  or  a,2", 12)
            + field("limit", "limit", str(SCAN_LIMIT), 4)
            + f'{hidden}<button type="submit" id="run">scan</button></form>'
        )

    def breadcrumb(self, name: str, schema: Any, level: str, prefix: tuple[Any, ...], asof: int | None) -> str:
        chain = schema.ancestry(level)
        parts = [f'<a href="/t/{escape(name)}/scan{_q(asof=asof)}">(root)</a>']
        for depth, lvl in enumerate(chain[1:], start=1):
            fields = schema.key_fields(lvl.path)
            upto = prefix[: len(schema.key_fields(chain[depth - 1].path))]
            href = f"/t/{name}/scan{_q(level=lvl.path, prefix=encode_key(upto, fields).hex() if upto else None, asof=asof)}"
            parts.append(f'<a href="{escape(href)}">{escape(key_text(upto))} › {escape(lvl.name)}</a>')
        return f'<p class="crumb">{" / ".join(parts)}</p>'

    def blob(self, name: str, p: dict[str, str]) -> tuple[bytes, str]:
        from conch.apps.previews import sniff

        asof = int(p["asof"]) if p.get("asof") else None
        t, st = self.table_and_state(name, asof)
        level = p.get("level", "")
        fields = st.schema.key_fields(level)
        key = decode_key(bytes.fromhex(p["key"]), fields)
        col = p["col"]
        rows = t.scan(col, keys=[key], asof=asof, level=level or None).to_pylist()
        if not rows:
            raise ConchError(f"no key {key_text(key)} in {name!r}")
        value: Any = rows[0]
        for part in col.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not isinstance(value, bytes):
            raise ConchError(f"column {col!r} of key {key_text(key)} is not a blob")
        return value, sniff(value).mime


def create_app(warehouse: str) -> Any:
    """The Starlette app of the inspector of `warehouse` (serve it with uvicorn, or `conch ui`)."""
    optional_import("starlette")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    ins = Inspector(warehouse)
    static = resources.files("conch.apps.ui") / "static"

    def html(fn: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            params = dict(request.query_params)
            name = request.path_params.get("name")
            try:
                return HTMLResponse(fn(name, params) if name is not None else fn(params))
            except TableNotFoundError as e:
                return HTMLResponse(ins.page("Not found", f'<p class="error">{escape(str(e))}</p>'), 404)
            except (ConchError, ValueError) as e:
                more = ""
                if isinstance(e, TimeTravelError) and name is not None:  # before the expire horizon: where to go
                    h = ins.catalog.table(name).log.horizon()
                    more = f'<p><a href="/t/{escape(name)}{_q(asof=h)}">view as of the horizon</a></p>'
                return HTMLResponse(ins.page("Error", f'<p class="error">error: {escape(str(e))}</p>{more}', name), 400)

        return endpoint

    def asof(p: dict[str, str]) -> int | None:
        return int(p["asof"]) if p.get("asof") else None

    async def blob(request: Request) -> Response:
        try:
            data, mime = ins.blob(request.path_params["name"], dict(request.query_params))
        except (ConchError, ValueError, KeyError) as e:
            return Response(f"error: {e}", 400, media_type="text/plain")
        return Response(data, media_type=mime)

    async def search(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            return JSONResponse(neighbours.search_json(ins.catalog.table(name), dict(request.query_params)))
        except TableNotFoundError as e:
            return JSONResponse({"error": type(e).__name__, "message": str(e)}, 404)
        except (ConchError, ValueError) as e:
            return JSONResponse({"error": type(e).__name__, "message": str(e)}, 400)

    async def static_file(request: Request) -> Response:
        fname = request.path_params["file"]
        types = {"css": "text/css", "js": "text/javascript"}
        ext = fname.rpartition(".")[2]
        if "/" in fname or ext not in types:
            return Response("not found", 404)
        return Response((static / fname).read_bytes(), media_type=types[ext])

    routes = [
        Route("/", html(lambda p: ins.tables())),
        Route("/t/{name}", html(lambda n, p: ins.overview(n, asof(p)))),
        Route("/t/{name}/manifests", html(lambda n, p: ins.manifests(n, asof(p)))),
        Route("/t/{name}/scan", html(ins.scan)),
        Route("/t/{name}/blob", blob),
        Route("/t/{name}/neighbours", html(ins.neighbours)),
        Route("/t/{name}/search", search),
        Route("/static/{file}", static_file),
    ]
    return Starlette(routes=routes)
