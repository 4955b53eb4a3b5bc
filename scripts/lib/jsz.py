#!/usr/bin/env python3
"""Reads the hub cluster's JetStream state from the NATS monitoring endpoints
(/jsz?streams=true&config=true), for scripts/chaos.sh.

  jsz.py leader STREAM        the node leading STREAM (its raft leader)
  jsz.py status STREAM...     one line per stream: replicas, leader, current
                              followers; exit 1 unless every one is R3 with a
                              leader and two current followers (the leader's
                              own view, the only authoritative one)
  jsz.py meta                 the meta (API) leader

HUB_MONITOR is the nodes' monitoring URLs, name=url,… (default nats-hub-1 on
localhost:8222, nats-hub-2 on :8223, nats-hub-3 on :8224). A node that does
not answer (killed, partitioned) is skipped.
"""
import json
import os
import sys
import urllib.request

DEFAULT = "nats-hub-1=http://127.0.0.1:8222,nats-hub-2=http://127.0.0.1:8223,nats-hub-3=http://127.0.0.1:8224"


def nodes():
    out = {}
    for kv in os.environ.get("HUB_MONITOR", DEFAULT).split(","):
        name, url = kv.split("=", 1)
        out[name] = url
    return out


def jsz(url):
    try:
        with urllib.request.urlopen(url + "/jsz?streams=true&config=true", timeout=2) as r:
            return json.load(r)
    except (OSError, ValueError):
        return None


def streams(d):
    for acc in (d or {}).get("account_details") or []:
        for s in acc.get("stream_detail") or []:
            yield s


def views():
    """Every answering node's jsz, by node name."""
    return {name: d for name, url in nodes().items() if (d := jsz(url)) is not None}


def leader_of(vs, stream):
    """The leader as the leader itself reports it, else the majority view."""
    seen = {}
    for name, d in vs.items():
        for s in streams(d):
            if s["name"] == stream:
                ld = (s.get("cluster") or {}).get("leader")
                if ld == name:
                    return ld
                if ld:
                    seen[ld] = seen.get(ld, 0) + 1
    return max(seen, key=seen.get) if seen else None


def status(vs, stream):
    ld = leader_of(vs, stream)
    if ld is None or ld not in vs:
        return False, f"{stream}: no leader answering"
    for s in streams(vs[ld]):
        if s["name"] != stream:
            continue
        n = (s.get("config") or {}).get("num_replicas")
        reps = (s.get("cluster") or {}).get("replicas") or []
        cur = sorted(r["name"] for r in reps if r.get("current"))
        lag = sorted(r["name"] for r in reps if not r.get("current"))
        msgs = (s.get("state") or {}).get("messages")
        ok = n == 3 and len(cur) == 2
        line = f"{stream}: R{n} leader {ld}, current {' '.join(cur) or '-'}"
        if lag:
            line += f", behind {' '.join(lag)}"
        return ok, line + f" ({msgs} msgs)"
    return False, f"{stream}: not on its leader {ld}"


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    vs = views()
    cmd = argv[1]
    if cmd == "leader" and len(argv) == 3:
        ld = leader_of(vs, argv[2])
        if not ld:
            return 1
        print(ld)
        return 0
    if cmd == "meta":
        for d in vs.values():
            ld = (d.get("meta_cluster") or {}).get("leader")
            if ld:
                print(ld)
                return 0
        return 1
    if cmd == "status" and len(argv) > 2:
        rc = 0
        for st in argv[2:]:
            ok, line = status(vs, st)
            print(line)
            rc |= 0 if ok else 1
        return rc
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
