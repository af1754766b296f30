# Run inside `nbdsh -u URI -c "exec(open(SCRIPT).read())"` (h is the connected handle).
# MODE=load: rounds of 4 KiB writes at pseudo-random blocks, each block holding
#   (block, round) repeated; FLUSH every 4 rounds; progress lines go to $STATE
#   ("start R" before round R, "flushed R" once a flush after round R completed).
# MODE=verify: every block written by a round <= $FLUSHED must hold that round's
#   content or a later round's (<= $STARTED) that also wrote it.
# MODE=prefix: the volume is a prefix of the write stream (rounds in order,
#   each round's writes in order): some round K and a first part of its writes
#   are in, nothing later; prints "prefix K+P/48" (P of K's writes in).
import os, random, struct, sys

BS = 4096
NB = h.get_size() // BS
PER_ROUND = 48


def blocks(r):
    return random.Random(r).sample(range(NB), PER_ROUND)


def content(b, r):
    return struct.pack("<QQ", b, r) * (BS // 16)


if os.environ["MODE"] == "load":
    f = open(os.environ["STATE"], "a")
    r = 0
    while True:
        r += 1
        f.write("start %d\n" % r)
        f.flush()
        for b in blocks(r):
            h.pwrite(content(b, r), b * BS)
        if r % 4 == 0:
            h.flush()
            f.write("flushed %d\n" % r)
            f.flush()
elif os.environ["MODE"] == "prefix":
    started = int(os.environ["STARTED"])
    order = {r: blocks(r) for r in range(1, started + 1)}
    touched = sorted(set(b for r in order for b in order[r]))
    seen = {}
    bad = 0
    for b in touched:
        d = h.pread(BS, b * BS)
        if d == bytes(BS):
            seen[b] = 0
            continue
        hb, hr = struct.unpack_from("<QQ", d)
        if not (hb == b and 1 <= hr <= started and b in order[hr] and d == content(hb, hr)):
            bad += 1
            print("block %d holds something never written there" % b)
            seen[b] = -1
        else:
            seen[b] = hr
    k = max([0] + list(seen.values()))
    # the writes of round k that are in must be its first ones
    inn = [b for b in order.get(k, []) if seen[b] == k]
    p = len(inn)
    if inn != order.get(k, [])[:p]:
        bad += 1
        print("round %d: its writes in are not its first %d" % (k, p))
    last = {}
    for r in range(1, k):
        for b in order[r]:
            last[b] = r
    for b in order.get(k, [])[:p]:
        last[b] = k
    for b in touched:
        if seen[b] != last.get(b, 0):
            bad += 1
            if bad <= 10:
                print("block %d: round %d, a prefix ending in round %d has %d" % (b, seen[b], k, last.get(b, 0)))
    print("prefix %d+%d/%d: %d bad" % (k, p, PER_ROUND, bad))
    sys.exit(1 if bad else 0)
else:
    flushed = int(os.environ["FLUSHED"])
    started = int(os.environ["STARTED"])
    sets = {r: set(blocks(r)) for r in range(1, started + 1)}
    expect = {}
    for r in range(1, flushed + 1):
        for b in sets[r]:
            expect[b] = r
    bad = 0
    for b, m in sorted(expect.items()):
        d = h.pread(BS, b * BS)
        hb, hr = struct.unpack_from("<QQ", d)
        ok = hb == b and m <= hr <= started and b in sets[hr] and d == content(hb, hr)
        if not ok:
            bad += 1
            if bad <= 10:
                print("block %d: want round >= %d, found (%d, %d)" % (b, m, hb, hr))
    print("verified %d blocks flushed by round %d (last started %d): %d bad" % (len(expect), flushed, started, bad))
    sys.exit(1 if bad else 0)
