#!/usr/bin/env python3
"""The two checks of scripts/observability-check.sh, against the running
observability profile. Each exits 1 when its check fails.

  obscheck.py trace JAEGER_URL OUT.json
      Finds, through Jaeger's HTTP query API (/api/traces), one trace that
      carries one event across the NATS hop: a relay-producer span
      ckf.relay.apply_events (the relay applying one input message), its
      child ckf.relay.publish_delta (the delta that message went into),
      and a global-indexer span ckf.indexer.lane_apply whose parent is that
      publish span, for the same DC and lane sequence. Writes the trace,
      trimmed to those spans, to OUT.json and prints the chain.

  obscheck.py promql PROMETHEUS_URL DASHBOARD.json OUT.txt
      Evaluates every PromQL expression of the Grafana dashboard with
      /api/v1/query. An expression fails on an API error, on an empty
      result or when no sample is a finite number (a quantile over no
      observations is NaN). Writes one line per expression to OUT.txt.
"""
import json
import math
import sys
import urllib.parse
import urllib.request

RELAY, INDEXER = "relay-producer", "global-indexer"
APPLY, PUBLISH, LANE_APPLY = "ckf.relay.apply_events", "ckf.relay.publish_delta", "ckf.indexer.lane_apply"


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def tags(span):
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def parent(span):
    for ref in span.get("references") or []:
        if ref.get("refType") == "CHILD_OF":
            return ref["spanID"]
    return None


def chains(trace):
    """Every (apply, publish, lane_apply) chain of one Jaeger trace."""
    service = {pid: p["serviceName"] for pid, p in trace["processes"].items()}
    by_id = {s["spanID"]: s for s in trace["spans"]}
    for lane in trace["spans"]:
        if lane["operationName"] != LANE_APPLY or service[lane["processID"]] != INDEXER:
            continue
        pub = by_id.get(parent(lane))
        if not pub or pub["operationName"] != PUBLISH or service[pub["processID"]] != RELAY:
            continue
        app = by_id.get(parent(pub))
        if not app or app["operationName"] != APPLY or service[app["processID"]] != RELAY:
            continue
        lt, pt, at = tags(lane), tags(pub), tags(app)
        # The same event: the indexer applied the lane sequence the relay
        # published, for the DC whose input message the relay applied.
        if lt.get("sequence") != pt.get("ckf.sequence") or not (lt.get("dc") == pt.get("ckf.dc") == at.get("ckf.dc")):
            continue
        yield app, pub, lane, service


def instance(trace, span):
    proc = trace["processes"].get(span["processID"], {})
    return tags(proc).get("service.instance.id", "")


def trim(trace, span, service):
    keep = {"ckf.dc", "ckf.lane", "ckf.worker_id", "ckf.events", "ckf.input_sequence", "ckf.epoch", "ckf.sequence",
            "ckf.images", "ckf.coalesced_messages", "dc", "lane", "sequence", "images",
            "messaging.destination.name", "messaging.operation.type", "span.kind"}
    return {
        "spanID": span["spanID"],
        "parentSpanID": parent(span),
        "operationName": span["operationName"],
        "service": service[span["processID"]],
        "instance": instance(trace, span),
        "startTime": span["startTime"],
        "duration_us": span["duration"],
        "tags": {k: v for k, v in sorted(tags(span).items()) if k in keep},
    }


def check_trace(base, out):
    base = base.rstrip("/")
    services = get(base + "/api/services").get("data") or []
    print("jaeger services:", ", ".join(sorted(services)))
    for need in (RELAY, INDEXER):
        if need not in services:
            print(f"FAIL: Jaeger has no trace of service {need}", file=sys.stderr)
            return 1
    q = urllib.parse.urlencode({"service": INDEXER, "operation": LANE_APPLY, "lookback": "1h", "limit": "200"})
    traces = get(base + "/api/traces?" + q, timeout=30).get("data") or []
    print(f"jaeger traces with an indexer lane apply: {len(traces)}")
    for tr in traces:
        for app, pub, lane, service in chains(tr):
            spans = [trim(tr, s, service) for s in (app, pub, lane)]
            # Every indexer replica applying the same delta is a child too.
            replicas = sum(1 for s in tr["spans"] if s["operationName"] == LANE_APPLY and parent(s) == pub["spanID"])
            doc = {"traceID": tr["traceID"], "spans_in_trace": len(tr["spans"]),
                   "services": sorted(set(service.values())), "indexer_applies_of_this_delta": replicas, "chain": spans}
            with open(out, "w") as f:
                json.dump(doc, f, indent=1)
                f.write("\n")
            print(f"trace {tr['traceID']}: {len(tr['spans'])} spans, services {', '.join(doc['services'])}")
            for s in spans:
                print(f"  {s['service']:15} {s['instance'][:20]:20} {s['operationName']:24} span {s['spanID']} parent {s['parentSpanID']} {json.dumps(s['tags'], sort_keys=True)}")
            return 0
    print("FAIL: no trace links a relay's apply and publish spans to an indexer's lane apply of the same delta", file=sys.stderr)
    return 1


def dashboard_exprs(path):
    with open(path) as f:
        d = json.load(f)
    panels = list(d.get("panels", []))
    for p in list(panels):  # rows may nest panels
        panels.extend(p.get("panels", []))
    for p in panels:
        for t in p.get("targets", []):
            if t.get("expr"):
                yield p.get("title", "?"), t.get("refId", "?"), t["expr"]


def check_promql(base, dashboard, out):
    base = base.rstrip("/")
    failed = 0
    lines = []
    exprs = list(dashboard_exprs(dashboard))
    if not exprs:
        print(f"FAIL: no PromQL expression in {dashboard}", file=sys.stderr)
        return 1
    for title, ref, expr in exprs:
        try:
            r = get(base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        except Exception as e:  # an HTTP 400 carries the parse error
            body = getattr(e, "read", lambda: b"")()
            r = {"status": "error", "error": (body.decode(errors="replace") or str(e))[:300]}
        if r.get("status") != "success":
            verdict, detail = "ERROR", r.get("error", "?")
        else:
            result = r["data"]["result"]
            if r["data"]["resultType"] == "scalar":
                result = [{"metric": {}, "value": result}]
            finite = [s for s in result if not math.isnan(float(s["value"][1])) and not math.isinf(float(s["value"][1]))]
            if not result:
                verdict, detail = "EMPTY", "no series"
            elif not finite:
                verdict, detail = "NAN", f"{len(result)} series, none finite"
            else:
                verdict = "ok"
                show = []
                for s in finite[:3]:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items()))
                    show.append(f"{{{labels}}} {float(s['value'][1]):.6g}")
                detail = f"{len(result)} series: " + "; ".join(show) + (" …" if len(finite) > 3 else "")
        if verdict != "ok":
            failed += 1
        lines.append(f"{verdict:5} [{title} / {ref}] {expr}\n      {detail}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"promql: {len(exprs) - failed} of {len(exprs)} dashboard expressions returned data")
    return 1 if failed else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "trace":
        return check_trace(argv[2], argv[3])
    if len(argv) == 5 and argv[1] == "promql":
        return check_promql(argv[2], argv[3], argv[4])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
