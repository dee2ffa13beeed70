"""Time travel across compactions (DESIGN §6): a `since` bound inside a compacted run's window.

A compacted run holds the fresh cells of a window of commit times `[min_time, time]` and takes
the place of its newest input in the time order; per-cell times are not stored
(`conch.maintain.compaction.rewrite`). `asof` needs nothing more: a state that holds a compacted run is at
or after the compaction, so every `asof` on it is after the window. A `since` bound in
`(min_time, time]` is the one case the run cannot answer (it no longer tells which of its cells
are older than `since`), so the scan reads the retained originals instead: the run and every
other output of the same compaction are replaced by that compaction's inputs, taken from the
state just before it, repeatedly (an input may itself be a compacted run) until no run
straddles `since`. Originals are retained until `expire` moves the horizon past the compaction;
then this raises `TimeTravelError` naming the horizon.

(A top-level module, not in `conch.maintain.compaction`: the table log applies it, and the compaction
package sits above the table log.)
"""

from __future__ import annotations

from collections.abc import Callable

from conch.errors import TimeTravelError
from conch.files.manifest import TableState

# seq -> (the state just before that commit, ids of the key spaces and of the fragments it
# removed, its commit time)
Provenance = Callable[[int], tuple[TableState, set[str], set[str], int]]


def straddles(min_time: int, time: int, since: int) -> bool:
    """Whether a run of window `[min_time, time]` holds cells on both sides of `since`."""
    return 0 < min_time < since <= time


def since_view(state: TableState, since: int | None, provenance: Provenance, horizon: int = 0) -> TableState:
    """`state` with every compaction whose window straddles `since` undone (see the module doc);
    `TimeTravelError` when the originals needed were expired (the compaction committed at or
    before `horizon`)."""
    if since is None:
        return state
    kss, frs = dict(state.key_spaces), dict(state.fragments)
    undone = False
    while True:
        seqs = [k.seq for k in kss.values() if k.kind == "data" and straddles(k.min_time, k.time, since)]
        if not seqs:
            break
        seq = max(seqs)
        before, removed_ks, removed_fr, commit_time = provenance(seq)
        if commit_time <= horizon:
            raise TimeTravelError(
                f"since={since} falls inside the window of a compaction whose originals were expired: the table "
                f"keeps exact history from its horizon {horizon} on; use a since outside the compacted window "
                "(see `maintenance_plan()`), or a time at or after the horizon"
            )
        kss = {i: k for i, k in kss.items() if k.seq != seq}
        frs = {i: f for i, f in frs.items() if f.seq != seq}
        kss.update({i: before.key_spaces[i] for i in removed_ks if i in before.key_spaces})
        frs.update({i: before.fragments[i] for i in removed_fr if i in before.fragments})
        undone = True
    if not undone:
        return state
    return TableState(state.schema, state.seq, state.time, kss, frs)
