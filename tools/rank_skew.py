#!/usr/bin/env python3
"""How long each rank's collectives waited for a late peer, from a job's traces.

    tools/rank_skew.py trace.json                     `overlap run --trace trace.json`
    tools/rank_skew.py t.json.rank0 t.json.rank1 ...  `overlap worker --trace t.json`, per host
    tools/rank_skew.py trace.json --top 10            and the ten most skewed collectives

A collective cannot finish before its last rank has started it. For every collective that
every rank's trace holds (matched by kind, stream and sequence number: "allgather #12
(stream 0, ...)"), the rank that started it last made the others wait for the difference
between their starts and its start (at most each one's run time). The report gives each
rank's total of such waiting and how often it was the late one, and the share of all
collective time that was waiting for a peer rather than moving bytes: what a simulator that
steps every rank in lock step, as overlap's does, does not see (docs/runtime.md, "Ranks out
of step").

The start of a collective is when it left its rank's queue to run (the trace's `ts`), so a
rank whose own earlier collectives ran long is late too. The times are compared across
ranks as they are: ranks on one machine share its clock; across hosts the figures are only
as good as the hosts' clock synchronization (NTP's milliseconds swamp the skew; PTP does
not). A trace cut short (a killed worker's last line) is read up to the cut. Exit status 2
on a trace it cannot read, a collective a rank's traces hold twice, or no collective on two
ranks (argparse's own usage errors exit 2 too).
"""

import argparse
import json
import re
import sys

# "allgather #1724 (stream 0, 2359296 bytes, rank 0 of 2)" (runtime/comm's Work::what()).
COLLECTIVE = re.compile(r"^(\w+) #(\d+) \(stream (\d+), (\d+) bytes, rank (\d+) of (\d+)\)$")


def read_events(path):
    """The trace's complete events: a whole trace (an object with traceEvents, or a list) or
    a worker's part (events one per line, comma-separated)."""
    with open(path) as f:
        text = f.read()
    stripped = text.strip()
    try:
        whole = json.loads(stripped)
        events = whole["traceEvents"] if isinstance(whole, dict) else whole
    except (ValueError, KeyError, TypeError):
        try:
            events = json.loads("[" + stripped.rstrip(",") + "]")
        except ValueError as e:
            # A worker killed mid-write leaves a part line; Chrome's format also allows a
            # trace without its closing "]}": keep the whole lines before the tear.
            events = []
            for line in stripped.splitlines():
                line = line.strip().rstrip(",")
                try:
                    events.append(json.loads(line))
                except ValueError:
                    continue
            if not events:
                raise ValueError(f"{path}: not a trace ({e})") from None
    if not isinstance(events, list):
        raise ValueError(f"{path}: not a trace (no list of events)")
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def collectives(paths):
    """{(kind, stream, seq): {rank: (start_us, dur_us, bytes)}} and the world size."""
    by_key = {}
    world = 0
    for path in paths:
        for e in read_events(path):
            m = COLLECTIVE.match(str(e.get("name", "")))
            if not m or "ts" not in e or "dur" not in e:
                continue
            kind, seq, stream, nbytes, rank, size = m.groups()
            try:
                start, dur = float(e["ts"]), float(e["dur"])
            except (TypeError, ValueError):
                raise ValueError(f"{path}: {e['name']}: ts and dur must be numbers") from None
            world = max(world, int(size))
            key = (kind, int(stream), int(seq))
            ranks = by_key.setdefault(key, {})
            if int(rank) in ranks:
                raise ValueError(f"{path}: {e['name']} appears twice (the same part given "
                                 "twice, or parts of two runs?)")
            ranks[int(rank)] = (start, dur, int(nbytes))
    return by_key, world


def analyse(by_key, world):
    """Per-rank totals and the collectives' skews (largest first)."""
    waited = [0.0] * world    # us each rank waited for a later peer
    late = [0] * world        # collectives each rank started last (by more than 100 us)
    busy = [0.0] * world      # us of collective run time per rank
    skews = []                # (skew_us, key, late rank, bytes)
    complete = 0
    for key, ranks in sorted(by_key.items()):
        if len(ranks) != world:
            continue  # a collective some rank's trace lacks (a cut trace): not comparable
        complete += 1
        last_rank = max(ranks, key=lambda r: ranks[r][0])
        last = ranks[last_rank][0]
        first = min(start for start, _, _ in ranks.values())
        for r, (start, dur, _) in ranks.items():
            busy[r] += dur
            waited[r] += min(max(0.0, last - start), dur)
        if last - first > 100:
            late[last_rank] += 1
        skews.append((last - first, key, last_rank, ranks[last_rank][2]))
    skews.sort(reverse=True)
    return complete, waited, late, busy, skews


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+", help="a trace of `overlap run`, or each rank's part")
    ap.add_argument("--top", type=int, default=5, help="the most skewed collectives to list")
    args = ap.parse_args(argv)
    try:
        by_key, world = collectives(args.traces)
    except (OSError, ValueError) as e:
        print(f"rank_skew: {e}", file=sys.stderr)
        return 2
    if world < 2:
        print("rank_skew: no collectives of two or more ranks in the traces", file=sys.stderr)
        return 2
    complete, waited, late, busy, skews = analyse(by_key, world)
    if complete == 0:
        print(f"rank_skew: no collective appears on all {world} ranks (give every rank's trace)",
              file=sys.stderr)
        return 2
    total_busy = sum(busy)
    print(f"{complete} collectives on {world} ranks; "
          f"{sum(waited) / 1e3:.1f} ms of {total_busy / 1e3:.1f} ms of collective time "
          f"({100 * sum(waited) / total_busy if total_busy else 0:.1f}%) was waiting for a "
          "later rank")
    print(f"{'rank':>4} {'waited for peers':>17} {'collective time':>16} {'started last':>13}")
    for r in range(world):
        print(f"{r:>4} {waited[r] / 1e3:>14.1f} ms {busy[r] / 1e3:>13.1f} ms {late[r]:>13}")
    if args.top > 0 and skews:
        print(f"the {min(args.top, len(skews))} most skewed (last start minus first):")
        for skew, (kind, stream, seq), r, nbytes in skews[:args.top]:
            print(f"  {kind} #{seq} (stream {stream}, {nbytes} bytes): {skew / 1e3:.2f} ms, "
                  f"rank {r} last")
    return 0


if __name__ == "__main__":
    sys.exit(main())
