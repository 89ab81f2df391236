"""The compiled walks of the IndexFile lookup (numba), over a file's slots and prevIndex chains: which entries a
lookup of their own keyHash finds (storelib.formats.indexfile, the audit's ``index-keys-not-found``). Cached as
storelib.formats.numba_cache says; imported from a zip, the module runs from a copy of its source there.
"""

from __future__ import annotations

from pathlib import Path

from storelib.formats.numba_cache import CACHE, source_copy

if not Path(__file__).is_file() and __name__ == "storelib.formats.index_walks":  # from a zip: a copy of the source
    _copy = source_copy(__name__, __loader__)  # type: ignore[name-defined]  # the module's own loader
    globals().update({k: v for k, v in vars(_copy).items() if not k.startswith("_")})
else:
    import numba
    import numpy as np
    from numba import njit

    if CACHE is not None:
        numba.config.CACHE_DIR = str(CACHE)

    @njit(cache=True)
    def slot_walks(slots, prev, bad_time, key_hash, n):
        """``IndexFile.selectPhyOffset`` from every slot's entry over entries 0..n-1: which entries a lookup of
        their own keyHash (slot keyHash % slots) returns. Exact unless ``met``: a walk came to an entry some walk
        had passed (chains merged, or a cycle: damage only; see walk_reaches). Each entry is passed once."""
        seen = np.zeros(n, np.bool_)
        reach = np.zeros(n, np.bool_)
        m = len(slots)
        for s in range(m):
            at = slots[s]
            if at <= 0 or at >= n:
                continue
            while not bad_time[at]:
                if seen[at]:
                    return reach, True
                seen[at] = True
                reach[at] = key_hash[at] >= 0 and key_hash[at] % m == s
                nxt = prev[at]
                if nxt <= 0 or nxt >= n or nxt == at:
                    break
                at = nxt
        return reach, False

    @njit(cache=True)
    def walk_next(prev, bad_time, n):
        """The entry a lookup's walk reads after each entry, 0 where it stops (a bad time, a prevIndex out of
        1..n-1 or the entry itself, or a next entry with a bad time)."""
        nxt = np.zeros(n, np.int32)
        for a in range(1, n):
            p = prev[a]
            if not bad_time[a] and 0 < p < n and p != a and not bad_time[p]:
                nxt[a] = p
        return nxt

    @njit(cache=True)
    def walk_ends(nxt, bad_time, n):
        """Where each entry's walk ends: its last entry, or the first entry found of the cycle it comes to (the
        same for every entry that comes to that cycle); and which entries lie on a cycle."""
        end = np.full(n, -1, np.int32)  # -2: on the path being followed
        on_cycle = np.zeros(n, np.bool_)
        path = np.empty(n, np.int32)
        for a in range(1, n):
            if bad_time[a] or end[a] >= 0:
                continue
            k, at = 0, a
            while end[at] == -1:
                end[at] = -2
                path[k] = at
                k += 1
                if nxt[at] == 0:
                    break
                at = nxt[at]
            if end[at] >= 0:
                last = end[at]
            elif nxt[at] == 0 and path[k - 1] == at:
                last = at
            else:  # back at an entry of this path: path[j .. k-1] is a cycle
                last = at
                j = k - 1
                while path[j] != at:
                    on_cycle[path[j]] = True
                    j -= 1
                on_cycle[at] = True
            for j in range(k):
                end[path[j]] = last
        return end, on_cycle

    @njit(cache=True)
    def tree_intervals(nxt, on_cycle, bad_time, n):
        """Depth-first enter and leave numbers of the entries in the forest of reversed walks (roots: walk ends
        and cycle entries): a walk from y passes tree entry e exactly when enter[e] <= enter[y] < leave[e]."""
        first = np.zeros(n + 1, np.int32)  # entries whose walk reads v next: child[first[v]:first[v + 1]]
        for a in range(1, n):
            if nxt[a] and not on_cycle[a]:
                first[nxt[a] + 1] += 1
        for v in range(n):
            first[v + 1] += first[v]
        fill = first[:n].copy()
        child = np.empty(max(1, first[n]), np.int32)
        for a in range(1, n):
            if nxt[a] and not on_cycle[a]:
                child[fill[nxt[a]]] = a
                fill[nxt[a]] += 1
        enter = np.zeros(n, np.int32)
        leave = np.zeros(n, np.int32)
        stack = np.empty(n, np.int32)
        t = 0
        for r in range(1, n):
            if bad_time[r] or (nxt[r] and not on_cycle[r]):
                continue
            fill[r], enter[r], stack[0], sp = first[r], t, r, 0
            t += 1
            while sp >= 0:
                v = stack[sp]
                if fill[v] < first[v + 1]:
                    c = child[fill[v]]
                    fill[v] += 1
                    fill[c], enter[c] = first[c], t
                    t += 1
                    sp += 1
                    stack[sp] = c
                else:
                    leave[v] = t
                    sp -= 1
        return enter, leave

    @njit(cache=True)
    def walk_reaches(slots, prev, bad_time, key_hash, n):
        """slot_walks' answer however walks merge, in linear time: entry e is returned when the walk from its
        slot's entry y ends where e's does and passes e (e on the cycle both come to, or y in e's tree)."""
        nxt = walk_next(prev, bad_time, n)
        end, on_cycle = walk_ends(nxt, bad_time, n)
        enter, leave = tree_intervals(nxt, on_cycle, bad_time, n)
        reach = np.zeros(n, np.bool_)
        m = len(slots)
        for e in range(1, n):
            if bad_time[e] or key_hash[e] < 0:
                continue
            y = slots[key_hash[e] % m]
            if y <= 0 or y >= n or bad_time[y] or end[e] != end[y]:
                continue
            reach[e] = on_cycle[e] or (enter[e] <= enter[y] and enter[y] < leave[e])
        return reach
