"""The compiled per-record kernel (numba): record walk, fixed-field decode, BODYCRC, property scan, Java hashes.

Every function works on a uint8 array of segment bytes and int64 positions into it, one record (or one
run) per loop iteration, and returns numpy arrays; the format rules live in the callers' docstrings
(``storelib.formats.commitlog``, ``storelib.formats.javahash``, ``storelib.broker.dispatch``,
``storelib.formats.indexfile``). The IndexFile lookup's walks: storelib.formats.index_walks.

Compiled code is cached (``cache=True``) where storelib.formats.numba_cache says; imported from a zip
(``spark-submit --py-files``), the module runs from a copy of its source there.
"""

from __future__ import annotations

from pathlib import Path

from storelib.formats.numba_cache import CACHE, source_copy

if not Path(__file__).is_file() and __name__ == "storelib.formats.kernel":  # from a zip: run a copy of the source
    _copy = source_copy(__name__, __loader__)  # type: ignore[name-defined]  # the module's own loader
    globals().update({k: v for k, v in vars(_copy).items() if not k.startswith("_")})
else:
    import numba
    import numpy as np
    from numba import njit

    if CACHE is not None:
        numba.config.CACHE_DIR = str(CACHE)

    from storelib.constants import (
        BLANK_MAGIC_CODE,
        CRC32_POLYNOMIAL,
        DLEDGER_ENTRY_MAGIC,
        FLAG_BORNHOST_V6,
        FLAG_STOREHOST_V6,
        INT32_MAX,
        KEY_SEPARATOR,
        MESSAGE_MAGIC_CODE,
        MESSAGE_MAGIC_CODE_V2,
        NAME_VALUE_SEPARATOR,
        PROPERTY_SEPARATOR,
    )

    # numba reads module globals as compile-time constants: the separators as byte values
    PROPERTY_SEPARATOR_BYTE = ord(PROPERTY_SEPARATOR)
    NAME_VALUE_SEPARATOR_BYTE = ord(NAME_VALUE_SEPARATOR)
    KEY_SEPARATOR_BYTE = ord(KEY_SEPARATOR)
    REPLACEMENT = 0xFFFD  # U+FFFD, what an invalid UTF-8 sequence decodes to

    def _crc_table() -> np.ndarray:
        """Slicing-by-8 tables of the reflected CRC-32 polynomial 0xEDB88320 (zlib's crc32)."""
        t = np.zeros((8, 256), dtype=np.uint32)
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ CRC32_POLYNOMIAL if c & 1 else c >> 1
            t[0, i] = c
        for k in range(1, 8):
            for i in range(256):
                t[k, i] = (t[k - 1, i] >> 8) ^ t[0, t[k - 1, i] & 0xFF]
        return t

    CRC_TABLE = _crc_table()

    @njit(cache=True, inline="always")
    def _i32(a, p):  # big-endian int32 at a[p]
        v = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
        return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v

    @njit(cache=True, inline="always")
    def _i64(a, p):  # big-endian int64 at a[p]
        v = np.uint64(0)
        for k in range(8):
            v = (v << np.uint64(8)) | np.uint64(a[p + k])
        return np.int64(v)

    @njit(cache=True, inline="always")
    def _i16(a, p):  # big-endian int16 at a[p]
        v = (np.int64(a[p]) << 8) | np.int64(a[p + 1])
        return v - 65536 if v >= 32768 else v

    @njit(cache=True)
    def crc32(a, start, length):
        """zlib ``crc32`` of a[start:start+length], slicing by 8."""
        t = CRC_TABLE
        c = np.uint32(0xFFFFFFFF)
        p = start
        end = start + length
        while p + 8 <= end:
            lo = c ^ (np.uint32(a[p]) | (np.uint32(a[p + 1]) << 8) | (np.uint32(a[p + 2]) << 16))
            lo ^= np.uint32(a[p + 3]) << 24
            c = (
                t[7, lo & 0xFF]
                ^ t[6, (lo >> 8) & 0xFF]
                ^ t[5, (lo >> 16) & 0xFF]
                ^ t[4, lo >> 24]
                ^ t[3, a[p + 4]]
                ^ t[2, a[p + 5]]
                ^ t[1, a[p + 6]]
                ^ t[0, a[p + 7]]
            )
            p += 8
        while p < end:
            c = t[0, (c ^ np.uint32(a[p])) & 0xFF] ^ (c >> 8)
            p += 1
        return c ^ np.uint32(0xFFFFFFFF)

    @njit(cache=True)
    def walk(a, rel, stop, out, count, min_size, header, before, check_length):
        """Whole message records from ``rel``: append their positions to ``out`` until a record is not a
        message, is shorter than ``min_size``, ends past ``stop``, its header is not in ``a``, starts at or after
        ``before`` (a byte range's end: that record is the next range's), ``check_length`` and its fields do not
        add up to its TOTALSIZE (``layout``), or ``out`` is full.
        ``header`` > 0: each record is the body of a DLedger entry of that many header bytes (magic
        DLEDGER_ENTRY_MAGIC, then the entry size = header + TOTALSIZE), and the walk goes from entry to entry.
        Returns (count, rel of the first record, or entry, not taken)."""
        n = len(a)
        cap = len(out)
        while rel + header + 8 <= n and count < cap and rel < before:
            total = _i32(a, rel + header)
            magic = _i32(a, rel + header + 4)
            if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) or total < min_size:
                break
            if header and (_i32(a, rel) != DLEDGER_ENTRY_MAGIC or _i32(a, rel + 4) != header + total):
                break
            if rel + header + total > stop:
                break
            if check_length and layout(a, rel + header, total)[-1] != total:
                break
            out[count] = rel + header
            count += 1
            rel += header + total
        return count, rel

    @njit(cache=True)
    def find_record(a, rel, base, end, min_size):
        """The first position q >= ``rel`` in ``a`` where a message record starts that a walk would take, told by
        the record itself: a message magic, TOTALSIZE >= ``min_size`` and within ``end`` (the segment's end, as a
        position in ``a``), and PHYSICALOFFSET == ``base`` + q (``base``: the commitlog offset of a[0]); and the
        header after it, when ``a`` holds it, is a message record whose PHYSICALOFFSET agrees too, a BLANK of
        exactly the bytes left, or zeros. -1 when no position before len(a) - 36 qualifies."""
        n = len(a)
        q = rel
        while q + 36 <= n:
            if a[q + 4] != 0xDA or a[q + 5] != 0xA3 or a[q + 6] != 0x20:  # both message magics start so
                q += 1
                continue
            magic = _i32(a, q + 4)
            total = _i32(a, q)
            if (
                (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2)
                or total < min_size
                or q + total > end
                or _i64(a, q + 28) != base + q
            ):
                q += 1
                continue
            nxt = q + total
            if nxt + 8 > n or nxt + 8 > end:
                return q
            size2 = _i32(a, nxt)
            magic2 = _i32(a, nxt + 4)
            if magic2 == MESSAGE_MAGIC_CODE or magic2 == MESSAGE_MAGIC_CODE_V2:  # noqa: SIM109 - compiled
                if nxt + 36 > n or _i64(a, nxt + 28) == base + nxt:
                    return q
            elif magic2 == BLANK_MAGIC_CODE:
                if size2 == end - nxt:
                    return q
            elif size2 == 0 or magic2 == 0:
                return q
            q += 1
        return -1

    @njit(cache=True)
    def layout(a, p, size):
        """Where the fields of the record at ``p`` (TOTALSIZE ``size``) are, read as the broker's
        ``checkMessageAndReturnSize`` reads them: (STORETIMESTAMP, BODYLENGTH, BODYLENGTH's value, topic, its length,
        properties, their length, the TOTALSIZE the fields add up to). That sum is ``calMsgLength`` (the 4.8.0,
        4.9.7 and 5.5.0 jars alike): the hosts take 20 bytes where SYSFLAG says IPv6, the topic length is a signed
        byte (v1 magic) or short (v2). The sum is -1 where the broker's read fails (a negative topic length), where a
        field runs past the record (the sum then exceeds it), and where BODYLENGTH or PROPERTIESLENGTH is below 0:
        the jars count and read those as 0, unverified by a broker run, so such a record is never indexed."""
        end = p + size
        flags = _i32(a, p + 36) if p + 40 <= end else 0
        store_at = p + 48 + (20 if flags & FLAG_BORNHOST_V6 else 8)
        body_at = store_at + 8 + (20 if flags & FLAG_STOREHOST_V6 else 8) + 12
        if body_at + 4 > end:
            return store_at, body_at, 0, 0, 0, 0, 0, -1
        body_len = _i32(a, body_at)
        q = body_at + 4 + body_len
        width = 2 if _i32(a, p + 4) == MESSAGE_MAGIC_CODE_V2 else 1
        if body_len < 0 or q + width > end:
            return store_at, body_at, body_len, 0, 0, 0, 0, -1
        topic_len = _i16(a, q) if width == 2 else np.int8(a[q])
        topic_at = q + width
        q = topic_at + topic_len
        if topic_len < 0 or q + 2 > end:
            return store_at, body_at, body_len, topic_at, 0, 0, 0, -1
        props_len = _i16(a, q)
        implied = q + 2 + props_len - p if props_len >= 0 else -1
        return store_at, body_at, body_len, topic_at, topic_len, q + 2, props_len, implied

    #: what ``decode`` returns, in order: RecordBatch's field names, then the TOTALSIZE the fields add up to
    #: (``layout``) and the computed BODYCRC
    DECODED = (
        "total_size", "body_crc", "queue_id", "flag", "sys_flag", "reconsume_times", "body_length",
        "queue_offset", "stored_physical_offset", "born_timestamp", "store_timestamp", "prepared_transaction_offset",
        "topic_start", "topic_len", "props_start", "props_len", "implied_size", "computed_crc",
    )  # fmt: skip

    @njit(cache=True)
    def decode(a, pos, check_crc):
        """Every field of the records at ``pos``, one array per name of ``DECODED`` (the BODYCRC computed where the
        fields add up)."""
        n = len(pos)
        i32 = np.zeros((7, n), np.int32)
        total, crc, qid, flag, sys_flag, reconsume, body_len = i32[0], i32[1], i32[2], i32[3], i32[4], i32[5], i32[6]
        i64 = np.zeros((10, n), np.int64)
        qoff, phys, born_ts, store_ts, prepared = i64[0], i64[1], i64[2], i64[3], i64[4]
        topic_start, topic_len, props_start, props_len, computed = i64[5], i64[6], i64[7], i64[8], i64[9]
        implied = np.full(n, -1, np.int64)
        for i in range(n):
            p = pos[i]
            size = _i32(a, p)
            total[i], sys_flag[i] = size, _i32(a, p + 36)
            crc[i], qid[i], flag[i] = _i32(a, p + 8), _i32(a, p + 12), _i32(a, p + 16)
            qoff[i], phys[i], born_ts[i] = _i64(a, p + 20), _i64(a, p + 28), _i64(a, p + 40)
            store_at, body_at, body_len[i], topic_start[i], topic_len[i], props_start[i], props_len[i], implied[i] = (
                layout(a, p, size)
            )
            if body_at + 4 <= p + size:
                store_ts[i] = _i64(a, store_at)
                reconsume[i], prepared[i] = _i32(a, body_at - 12), _i64(a, body_at - 8)
            if check_crc and implied[i] == size:
                computed[i] = crc32(a, body_at + 4, body_len[i]) & INT32_MAX
        return (
            total, crc, qid, flag, sys_flag, reconsume, body_len, qoff, phys, born_ts, store_ts, prepared,
            topic_start, topic_len, props_start, props_len, implied, computed,
        )  # fmt: skip

    @njit(cache=True)
    def _fnv(a, start, length):
        h = np.uint64(0xCBF29CE484222325)
        for k in range(start, start + length):
            h = (h ^ np.uint64(a[k])) * np.uint64(0x100000001B3)
        return h

    @njit(cache=True, inline="always")
    def _same_bytes(a, at, b, bt, length):
        for c in range(length):  # noqa: SIM110 - numba compiles loops, not generators
            if a[at + c] != b[bt + c]:
                return False
        return True

    @njit(cache=True)
    def intern_runs(a, start, length):
        """A code per byte run, equal runs equal codes, codes in order of first appearance; and each code's
        first run. An open-addressing table over FNV-1a hashes, collisions settled by comparing bytes."""
        n = len(start)
        code = np.empty(n, np.int32)
        first = np.empty(n, np.int64)
        size = 64
        table = np.full(size, -1, np.int64)
        distinct = 0
        prev = -1
        for i in range(n):
            s, m = start[i], length[i]
            if prev >= 0 and length[first[prev]] == m and _same_bytes(a, start[first[prev]], a, s, m):
                code[i] = prev
                continue
            slot = np.int64(_fnv(a, s, m) & np.uint64(size - 1))
            while table[slot] >= 0:
                c = table[slot]
                if length[first[c]] == m and _same_bytes(a, start[first[c]], a, s, m):
                    break
                slot = (slot + 1) & (size - 1)
            if table[slot] < 0:
                table[slot] = distinct
                first[distinct] = i
                distinct += 1
                if 2 * distinct > size:  # grow and rehash
                    size *= 2
                    table = np.full(size, -1, np.int64)
                    for c in range(distinct):
                        r = np.int64(_fnv(a, start[first[c]], length[first[c]]) & np.uint64(size - 1))
                        while table[r] >= 0:
                            r = (r + 1) & (size - 1)
                        table[r] = c
                    prev = distinct - 1
                    code[i] = prev
                    continue
            prev = table[slot]
            code[i] = prev
        return code, first[:distinct].copy()

    @njit(cache=True)
    def find_properties(a, start, length, names, name_end, split_pairs):
        """(value start, value length) of each name (``names[name_end[j-1]:name_end[j]]``) per record, -1/0
        when absent: pieces split by 0x02, the first 0x01 ends the name, empty names and values skipped,
        a later duplicate wins. ``split_pairs``: a piece whose value holds another 0x01 before its last
        non-0x01 byte is no property, and trailing 0x01s are not part of the value (Java's ``split``)."""
        n = len(start)
        k = len(name_end)
        vs = np.full((k, n), -1, np.int64)
        vl = np.zeros((k, n), np.int64)
        for i in range(n):
            p = start[i]
            end = p + length[i]
            while p < end:  # one piece per turn
                piece = p
                while p < end and a[p] != NAME_VALUE_SEPARATOR_BYTE and a[p] != PROPERTY_SEPARATOR_BYTE:
                    p += 1
                if p == end or a[p] == PROPERTY_SEPARATOR_BYTE:  # no name/value separator: not a property
                    p += 1
                    continue
                eq = p
                p += 1
                inner = -1  # the last 0x01 of the value
                while p < end and a[p] != PROPERTY_SEPARATOR_BYTE:
                    if a[p] == NAME_VALUE_SEPARATOR_BYTE:
                        inner = p
                    p += 1
                value_end = p
                if split_pairs and inner >= 0:
                    while value_end > eq + 1 and a[value_end - 1] == NAME_VALUE_SEPARATOR_BYTE:
                        value_end -= 1
                    if value_end > eq + 1 and any_byte(a, eq + 1, value_end, NAME_VALUE_SEPARATOR_BYTE):
                        value_end = eq + 1  # three parts or more: Java's split gives no pair
                if eq > piece and value_end > eq + 1:
                    lo = 0
                    for j in range(k):
                        if name_end[j] - lo == eq - piece and _same_bytes(a, piece, names, lo, eq - piece):
                            vs[j, i] = eq + 1
                            vl[j, i] = value_end - eq - 1
                        lo = name_end[j]
                p += 1
        return vs, vl

    @njit(cache=True, inline="always")
    def any_byte(a, lo, hi, byte):
        for p in range(lo, hi):  # noqa: SIM110 - numba compiles no generator passed to any()
            if a[p] == byte:
                return True
        return False

    @njit(cache=True, inline="always")
    def _continuation(a, p, end, lo, hi):
        return p < end and lo <= a[p] <= hi

    @njit(cache=True)
    def _utf8_unit_hash(a, start, length, h):
        """Continue the hash ``h`` over the UTF-16 units of a[start:start+length] decoded as UTF-8, invalid
        sequences giving U+FFFD per maximal subpart (as Python's ``decode("utf-8", "replace")``).
        Returns (hash, units)."""
        p = start
        end = start + length
        units = 0
        while p < end:
            b = a[p]
            cp = REPLACEMENT
            if b < 0x80:
                cp = b
                p += 1
            elif 0xC2 <= b <= 0xDF:
                if _continuation(a, p + 1, end, 0x80, 0xBF):
                    cp = ((b & 0x1F) << 6) | (a[p + 1] & 0x3F)
                    p += 2
                else:
                    p += 1
            elif 0xE0 <= b <= 0xEF:
                lo = 0xA0 if b == 0xE0 else 0x80
                hi = 0x9F if b == 0xED else 0xBF
                if not _continuation(a, p + 1, end, lo, hi):
                    p += 1
                elif not _continuation(a, p + 2, end, 0x80, 0xBF):
                    p += 2
                else:
                    cp = ((b & 0x0F) << 12) | ((a[p + 1] & 0x3F) << 6) | (a[p + 2] & 0x3F)
                    p += 3
            elif 0xF0 <= b <= 0xF4:
                lo = 0x90 if b == 0xF0 else 0x80
                hi = 0x8F if b == 0xF4 else 0xBF
                if not _continuation(a, p + 1, end, lo, hi):
                    p += 1
                elif not _continuation(a, p + 2, end, 0x80, 0xBF):
                    p += 2
                elif not _continuation(a, p + 3, end, 0x80, 0xBF):
                    p += 3
                else:
                    cp = ((b & 0x07) << 18) | ((a[p + 1] & 0x3F) << 12) | ((a[p + 2] & 0x3F) << 6) | (a[p + 3] & 0x3F)
                    p += 4
            else:
                p += 1
            if cp >= 0x10000:
                cp -= 0x10000
                h = h * np.uint32(31) + np.uint32(0xD800 + (cp >> 10))
                h = h * np.uint32(31) + np.uint32(0xDC00 + (cp & 0x3FF))
                units += 2
            else:
                h = h * np.uint32(31) + np.uint32(cp)
                units += 1
        return h, units

    @njit(cache=True)
    def hash_utf8_runs(a, start, length):
        """Java ``String.hashCode`` (as int32) and UTF-16 length of each UTF-8 run."""
        n = len(start)
        hashes = np.empty(n, np.int32)
        units = np.empty(n, np.int64)
        for i in range(n):
            h, u = _utf8_unit_hash(a, start[i], length[i], np.uint32(0))
            hashes[i] = np.int32(h)
            units[i] = u
        return hashes, units

    @njit(cache=True)
    def hash_utf16_runs(units, length):
        """Java ``String.hashCode`` (as int32) of consecutive runs of UTF-16 code units."""
        out = np.empty(len(length), np.int32)
        p = 0
        for i in range(len(length)):
            h = np.uint32(0)
            for k in range(p, p + length[i]):
                h = h * np.uint32(31) + np.uint32(units[k])
            out[i] = np.int32(h)
            p += length[i]
        return out

    @njit(cache=True)
    def key_runs(a, uniq_start, uniq_len, keys_start, keys_len, to_index):
        """(record, start, length) of every index key in put order: per record the UNIQ_KEY, then each
        non-empty space-separated KEYS token."""
        n = len(to_index)
        count = 0
        for i in range(n):
            if to_index[i]:
                count += uniq_start[i] >= 0
                if keys_start[i] >= 0:
                    count += keys_len[i] // 2 + 1
        record = np.empty(count, np.int64)
        start = np.empty(count, np.int64)
        length = np.empty(count, np.int64)
        m = 0
        for i in range(n):
            if not to_index[i]:
                continue
            if uniq_start[i] >= 0:
                record[m], start[m], length[m] = i, uniq_start[i], uniq_len[i]
                m += 1
            if keys_start[i] < 0:
                continue
            tok = keys_start[i]
            end = tok + keys_len[i]
            for p in range(tok, end + 1):
                if p == end or a[p] == KEY_SEPARATOR_BYTE:
                    if p > tok:
                        record[m], start[m], length[m] = i, tok, p - tok
                        m += 1
                    tok = p + 1
        return record[:m], start[:m], length[:m]

    @njit(cache=True)
    def slot_chains(key_hash, slots):
        """``IndexFile.putKey`` over entries 1..n: prev[i] = table[slot]; table[slot] = i + 1, slot =
        keyHash % slots. Returns the slot table, each entry's prevIndex and the number of slots used."""
        table = np.zeros(slots, np.int32)
        prev = np.empty(len(key_hash), np.int32)
        used = 0
        for i in range(len(key_hash)):
            s = key_hash[i] % slots
            prev[i] = table[s]
            used += table[s] == 0
            table[s] = i + 1
        return table, prev, used

    @njit(cache=True, inline="always")
    def _put_i32(out, p, v):  # big-endian int32 at out[p]
        out[p] = (v >> 24) & 0xFF
        out[p + 1] = (v >> 16) & 0xFF
        out[p + 2] = (v >> 8) & 0xFF
        out[p + 3] = v & 0xFF

    @njit(cache=True, inline="always")
    def _put_i64(out, p, v):  # big-endian int64 at out[p]
        for k in range(8):
            out[p + k] = (v >> (56 - 8 * k)) & 0xFF

    @njit(cache=True)
    def index_head(key_hash, phy_offset, store_timestamp, inherited_timestamp, out, slots_at, slots, entries_at):
        """An IndexFile's slot table and entries 1..n, big-endian, into ``out`` (the file's first bytes): ``putKey``
        per entry in put order (prevIndex = the slot's value, then the slot = this entry; slot = keyHash % slots),
        timeDiff = (storeTimestamp - beginTimestamp) // 1000 clamped to [0, INT32_MAX], against the begin before the
        put (``inherited_timestamp`` for entry 1, then entry 1's), 0 when that begin is <= 0. The slot table at
        ``slots_at``, entry i at ``entries_at`` + 20 i. Returns the number of slots used.

        The chains first, then the entries: two passes, so that no store into ``out`` comes between the slot table's
        random reads."""
        table, prev, used = slot_chains(key_hash, slots)
        for i in range(len(key_hash)):
            begin = inherited_timestamp if i == 0 else np.int64(store_timestamp[0])
            diff = np.int64(0)
            if begin > 0:
                diff = (np.int64(store_timestamp[i]) - begin) // 1000
                diff = min(max(diff, np.int64(0)), np.int64(INT32_MAX))
            p = entries_at + 20 * (i + 1)
            _put_i32(out, p, np.int64(key_hash[i]))
            _put_i64(out, p + 4, np.int64(phy_offset[i]))
            _put_i32(out, p + 12, diff)
            _put_i32(out, p + 16, np.int64(prev[i]))
        for s in range(slots):
            if table[s]:
                _put_i32(out, slots_at + 4 * s, np.int64(table[s]))
        return used

    def as_int64(values: np.ndarray) -> np.ndarray:
        """Positions and lengths as the contiguous int64 arrays the kernel takes (no copy when they are)."""
        return np.ascontiguousarray(values, dtype=np.int64)

    def warm_up() -> None:
        """Compile (or load from the cache) every kernel function on tiny inputs of the scanner's types."""
        a = np.zeros(64, dtype=np.uint8)
        z = np.zeros(1, np.int64)
        walk(a, 0, 64, np.zeros(4, np.int64), 0, 1, 0, 64, True)
        find_record(a, 0, 0, 64, 1)
        decode(a, z, True)
        intern_runs(a, z, z)
        find_properties(a, z, z, np.frombuffer(b"\0", np.uint8), np.ones(1, np.int64), False)
        hash_utf8_runs(a, z, z)
        hash_utf16_runs(np.zeros(1, np.uint16), z)
        key_runs(a, z, z, z, z, np.zeros(1, np.bool_))
        slot_chains(np.zeros(1, np.int32), 7)
        entries = np.zeros(1, [("key_hash", "<i4"), ("commitlog_offset", "<i8"), ("store_timestamp", "<i8")])
        index_head(entries["key_hash"], entries["commitlog_offset"], entries["store_timestamp"], 0, a, 0, 1, 4)
