#!/usr/bin/env bash
# Runs the clustered stack (docker-compose.yml + docker-compose.cluster.yml:
# a 3-node R3 hub, a ckf-wanproxy on each DC link) with the trace
# replayer's load running, injects hub and WAN faults, and prints a fault
# table: fault, time to converge, live under/over during the fault, settled
# under/over, unavailable queries. Fails (exit 1) unless every phase settles
# with 0 under / 0 over.
#
#   scripts/chaos.sh [--faults LIST] [--no-build] [--file COMPOSE_FILE]...
#
# Faults (default: all, in this order):
#   lanes-leader   kill -9 the node leading CKF_LANES and keep it down until
#                  the pass has verified, then start it again
#   lease-leader   kill -9 the leader of KV_ckf-leases and dc-a's active relay
#                  at once (the standby takes over), restart both after 12 s
#   partition      cut the CKF_LANES leader off the network for PARTITION_SECONDS (30)
#   rolling        restart nats-hub-1, -2, -3 one after the other, each back
#                  and every stream current again before the next
#   wan-latency    dc-b's link at 150 ms RTT (75 ms ± 10 ms each way)
#   wan-bandwidth  dc-b's link capped at WAN_CAP_BPS bytes/s each way
#                  (default 1250000: 10 Mbit/s)
#   wan-reset      every connection of dc-b's link reset (RST), twice
#   wan-stall      dc-b's link stalled (black hole) for 15 s, then healed
#   wan-cut        dc-b's link cut (connections closed, refused) for 15 s
#   stats          not a fault (and not in the default list): CPU and RSS of
#                  every container (docker stats) idle, then during a
#                  full-speed pass of STATS_REQUESTS (4096) requests, per
#                  role (relay, leaf, indexer, hub, proxy); that pass's
#                  verification samples 512 of its requests
#
# Each phase runs its own replayer pass: 512 requests of the Mooncake trace
# (about 1,000 acknowledged events over both DCs) in a fresh hash space,
# split over the models of deploy/pools.yaml (every relay runs a pool per
# model), paced to span the fault; the replayer then waits until the
# pipeline settles and checks every one of those requests (its sample is
# the whole pass) against its model's exact ground truth: no answer under
# the truth (false negative), none over it once settled. The table sums
# the models' counts; a phase passes only if every model verified.
#
# --no-build reuses ckfrelay:local and ckfrelay-nats:local as they are.
# --file replaces the compose files (default docker-compose.yml and
# docker-compose.cluster.yml), e.g. one written by scripts/gen-compose-dcs.sh:
# the DCs are its nats-dc-<x> services, each with wan-dc-<x>, relay-<x>1
# (and relay-<x>2); dc-a needs a standby, dc-b is the WAN
# faults' link.
# Skips (one line, exit 0) when no Docker engine answers. Needs curl and
# python3 (scripts/lib/jsz.py reads the monitoring endpoints). Uses the
# host ports 4222, 8080, 8222-8224, 8474-8475 and 9091-9094. CHAOS_LIMIT
# (default 1500 s) bounds the whole run; the stack is torn down on any exit.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_FAULTS=lanes-leader,lease-leader,partition,rolling,wan-latency,wan-bandwidth,wan-reset,wan-stall,wan-cut
FAULTS=$ALL_FAULTS
BUILD=1
FILES=()
while [ $# -gt 0 ]; do
  case $1 in
    --file) FILES+=(-f "${2:?--file needs a path}"); shift ;;
    --faults) FAULTS=${2:?--faults needs a list}; shift ;;
    --faults=*) FAULTS=${1#--faults=} ;;
    --no-build) BUILD=0 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "chaos: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for f in ${FAULTS//,/ }; do
  case ",$ALL_FAULTS,stats," in
    *",$f,"*) ;;
    *) echo "chaos: unknown fault $f (want some of $ALL_FAULTS)" >&2; exit 2 ;;
  esac
done

# shellcheck source=scripts/lib/compose.sh
. scripts/lib/compose.sh
NAME=chaos
compose_detect "$NAME"
for tool in curl python3; do
  command -v $tool >/dev/null || { echo "chaos: needs $tool" >&2; exit 2; }
done

[ ${#FILES[@]} -gt 0 ] || FILES=(-f docker-compose.yml -f docker-compose.cluster.yml)
PROJ=${CHAOS_PROJECT:-ckfchaos$$}
DC=("${COMPOSE[@]}" -p "$PROJ" "${FILES[@]}")
START=$(date +%s)
LOGDIR=$(mktemp -d)
JSZ=scripts/lib/jsz.py
HUBS=(nats-hub-1 nats-hub-2 nats-hub-3)
ASSETS=(CKF_LANES KV_ckf-leases OBJ_ckf-snapshots)
# The stack's long-running services, its DCs (letters) and one-shots.
SERVICES=() DCS=() INITS=() RELAYS=()
for s in $("${DC[@]}" config --services); do
  case $s in
    replayer | nats-hub | jaeger | prometheus | grafana | nats-exporter) ;;
    init-*) INITS+=("$s") ;;
    *)
      SERVICES+=("$s")
      case $s in
        nats-dc-*) DCS+=("${s#nats-dc-}") ;;
        relay-*) RELAYS+=("$s") ;;
      esac
      ;;
  esac
done
# wan_port X: the control API port of dc-X's proxy (8474 for dc-a, 8475 dc-b …).
wan_port() { echo $((8474 + $(printf '%d' "'$1") - 97)); }
WAN_B=127.0.0.1:$(wan_port b) # the WAN faults' link
WAN_CAP_BPS=${WAN_CAP_BPS:-1250000}
PARTITION_SECONDS=${PARTITION_SECONDS:-30}
LOAD_REQUESTS=512    # the replayer verifies up to 512 requests: all of them
TRACE_SECONDS=171    # trace time of the first 512 requests (speed 1)
VERIFY_TIMEOUT=${VERIFY_TIMEOUT:-150s}
SPACE=100            # hash spaces: one per phase, above compose-smoke's
FAILED=0
LOAD_PID=
STATS_OUT=

ports=(4222 8080 8222 8223 8224)
for x in "${DCS[@]}"; do ports+=("$(wan_port "$x")"); done
for r in "${RELAYS[@]}"; do ports+=("$(relay_port "$r")"); done
ports_free "${ports[@]}"

# shellcheck source=scripts/lib/watchdog.sh
. scripts/lib/watchdog.sh
watchdog_start chaos "${CHAOS_LIMIT:-1500}"

teardown() {
  local rc=$?
  watchdog_stop
  if [ -n "$LOAD_PID" ]; then
    kill "$LOAD_PID" 2>/dev/null || true
  fi
  if [ $rc -ne 0 ]; then
    echo "chaos: FAILED (exit $rc); last logs:" >&2
    "${DC[@]}" logs --no-color --tail=20 2>/dev/null | tail -120 >&2 || true
  fi
  "${DC[@]}" down -v --remove-orphans -t 3 >/dev/null 2>&1 || true
  rm -rf "$LOGDIR"
  exit $rc
}
trap teardown EXIT
trap 'exit 130' INT TERM

r3_ok() { "$JSZ" status "${ASSETS[@]}" >/dev/null; }
leader() { "$JSZ" leader "$1"; }
leader_not() { # STREAM NODE: a leader other than NODE answers for STREAM
  local l
  l=$(leader "$1") && [ -n "$l" ] && [ "$l" != "$2" ]
}
wan() { curl -sf -X POST "$WAN_B/v1/$1" -d "${2:-}" >/dev/null; }
epoch_b() { relay_epoch "$(active_of b)" || echo "?"; }
# sleep_until T: sleeps until the moment T (a now).
sleep_until() {
  local d
  d=$(awk -v t="$1" -v n="$(now)" 'BEGIN { d = t - n; printf "%.2f", (d > 0 ? d : 0) }')
  sleep "$d"
}
later() { awk -v a="$1" -v b="$2" 'BEGIN { print (a > b ? a : b) }'; }
plus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a + b }'; }

# load NAME WINDOW: a replayer pass of LOAD_REQUESTS requests paced over
# about WINDOW seconds (0: as fast as it goes), in the background; every line it prints is
# stamped with the time it arrived ($LOGDIR/NAME), its exit code goes to
# $LOGDIR/NAME.rc.
load() {
  local name=$1 speed
  SPACE=$((SPACE + 1))
  speed=$(awk -v w="$2" -v n=$TRACE_SECONDS 'BEGIN { printf "%.3f", (w > 0 ? n / w : 0) }')
  (
    set +e
    "${DC[@]}" run --rm -T --no-deps replayer --repeat=false --hash-space "$SPACE" \
      --status-interval 2s --verify-timeout "$VERIFY_TIMEOUT" --speed "$speed" --max-requests $LOAD_REQUESTS 2>&1 |
      while IFS= read -r line; do printf '%s %s\n' "$(now)" "$line"; done >"$LOGDIR/$name"
    echo "${PIPESTATUS[0]}" >"$LOGDIR/$name.rc"
  ) &
  LOAD_PID=$!
}
load_wait() {
  wait "$LOAD_PID" || true
  LOAD_PID=
}

ROWS=()
# row FAULT NAME FAULT_END NOTE: one table row from the pass NAME, its
# counts summed over the models (deploy/pools.yaml), each model verified on
# its own. converge = from the later of the fault's end and the pass's last
# event until the last model's settled verification passed.
row() {
  local fault=$1 name=$2 fend=$3 note=$4 rc m out last vline lu=0 lo=0 unav=0 conv=- su=0 so=0 verdict
  local tlast=0 tver=0 all=1 below missing
  rc=$(cat "$LOGDIR/$name.rc" 2>/dev/null || echo "?")
  for m in "${MODELS[@]}"; do
    out=$(model_out "$name" "$m")
    last=$(grep ' t=' <<<"$out" | tail -1 || true)
    lu=$(add "$lu" "$(grep -o 'under(lag)=[0-9]*' <<<"$last" | cut -d= -f2 || true)")
    lo=$(add "$lo" "$(grep -o ' over=[0-9]*' <<<"$last" | cut -d= -f2 || true)")
    unav=$(add "$unav" "$(grep -o 'unavailable=[0-9]*' <<<"$last" | cut -d= -f2 || true)")
    [ -z "$last" ] || tlast=$(later "$tlast" "${last%% *}")
    vline=$(grep 'verify:' <<<"$out" | tail -1 || true)
    if grep -q 'no false negative' <<<"$vline"; then
      so=$(add "$so" "$(grep -o 'over=[0-9]*' <<<"$vline" | cut -d= -f2)")
      tver=$(later "$tver" "${vline%% *}")
    else
      all=0
      below=$(sed -n 's/.*: \([0-9]*\) lane answers below.*, \([0-9]*\) lanes missing.*/\1/p' <<<"$vline")
      missing=$(sed -n 's/.*: \([0-9]*\) lane answers below.*, \([0-9]*\) lanes missing.*/\2/p' <<<"$vline")
      su=$(add "$su" "$(add "$below" "$missing")")
      so=$(add "$so" "$(grep -o 'over=[0-9]*' <<<"$vline" | cut -d= -f2 || true)")
    fi
  done
  if [ "$all" = 1 ]; then
    conv=$(between "$(later "$fend" "$tlast")" "$tver")
    if [[ $conv == -* ]]; then
      # The pass verified before the fault was over (a slow rolling
      # restart outlasting its pass): nothing was left to converge.
      note="$note; verified ${conv#-}s before the fault's end"
      conv=0.0
    fi
  fi
  verdict=ok
  if [ "$rc" != 0 ] || [ "$su" != 0 ] || [ "$so" != 0 ]; then
    verdict=FAIL
    FAILED=1
    echo "chaos: $fault: replayer exit $rc, settled under $su over $so; its output:" >&2
    cut -d' ' -f2- "$LOGDIR/$name" | tail -8 >&2
  fi
  ROWS+=("$(printf '%-52s %8s %14s %14s %7s  %-4s %s' "$fault" "$conv" "$lu / $lo" "$su / $so" "$unav" "$verdict" "$note")")
  log "$fault: $verdict (converge ${conv}s, live $lu/$lo, settled $su/$so)"
}

# wait_r3 WHAT: every asset back at R3 with two current followers.
wait_r3() { wait_for 120 "$1: every stream R3 and current" r3_ok; }

fault_lanes_leader() {
  local victim t_kill elect t_back rejoin
  victim=$(leader CKF_LANES)
  load lanes-leader 20
  sleep 3
  t_kill=$(now)
  docker kill -s KILL "$(cid "$victim")" >/dev/null
  wait_for 60 "a new CKF_LANES leader" leader_not CKF_LANES "$victim"
  elect=$(since "$t_kill")
  # The node stays down until the pass has verified, as after a real
  # crash: every lane answer must reach the exact depth on the two nodes
  # left. (A restart 10 s in once hid lanes whose consumer the dead node
  # held: the node's return revived them before the verification.)
  load_wait
  docker start "$(cid "$victim")" >/dev/null
  t_back=$(now)
  wait_r3 "$victim restarted"
  rejoin=$(since "$t_back")
  row "kill -9 $victim (CKF_LANES leader), down until verified" lanes-leader "$t_kill" \
    "leader $(leader CKF_LANES) after ${elect}s; $victim current ${rejoin}s after its start"
}

fault_lease_leader() {
  local victim relay standby epoch t_kill takeover= elect= t_back rejoin deadline
  victim=$(leader KV_ckf-leases)
  relay=$(active_of a)
  standby=relay-a1
  [ "$relay" = relay-a1 ] && standby=relay-a2
  epoch=$(relay_epoch "$relay")
  load lease-leader 25
  sleep 3
  t_kill=$(now)
  docker kill -s KILL "$(cid "$victim")" "$(cid "$relay")" >/dev/null
  # Both clocks at once: the standby's takeover and the bucket's election.
  deadline=$(($(date +%s) + 90))
  while [ -z "$takeover" ] || [ -z "$elect" ]; do
    if [ -z "$takeover" ] && relay_active "$standby"; then takeover=$(since "$t_kill"); fi
    if [ -z "$elect" ] && leader_not KV_ckf-leases "$victim"; then elect=$(since "$t_kill"); fi
    if [ "$(date +%s)" -ge $deadline ]; then
      echo "chaos: lease-leader: standby ${takeover:-not active}, KV leader ${elect:-not elected} within 90s" >&2
      return 1
    fi
    sleep 0.25
  done
  sleep_until "$(plus "$t_kill" 12)"
  docker start "$(cid "$victim")" "$(cid "$relay")" >/dev/null
  t_back=$(now)
  wait_r3 "$victim restarted"
  rejoin=$(since "$t_back")
  load_wait
  row "kill -9 $victim (lease KV leader) + $relay (active)" lease-leader "$t_back" \
    "KV leader $(leader KV_ckf-leases) after ${elect}s; $standby active after ${takeover}s, epoch $epoch→$(relay_epoch "$standby"); $victim current ${rejoin}s after its start"
}

fault_partition() {
  local victim net node t_cut elect t_heal rejoin
  victim=$(leader CKF_LANES)
  node=$(cid "$victim")
  net="${PROJ}_wan"
  docker network inspect "$net" >/dev/null 2>&1 || net=$(docker network ls --format '{{.Name}}' | grep "^${PROJ}.wan$")
  load partition $((PARTITION_SECONDS + 12))
  sleep 3
  docker network disconnect "$net" "$node"
  t_cut=$(now)
  wait_for 60 "a CKF_LANES leader on the majority side" leader_not CKF_LANES "$victim"
  elect=$(since "$t_cut")
  sleep_until "$(plus "$t_cut" "$PARTITION_SECONDS")"
  docker network connect --alias "$victim" "$net" "$node"
  t_heal=$(now)
  wait_r3 "$victim healed"
  rejoin=$(since "$t_heal")
  load_wait
  row "partition $victim (CKF_LANES leader) for ${PARTITION_SECONDS}s" partition "$t_heal" \
    "majority leader $(leader CKF_LANES) after ${elect}s; $victim current ${rejoin}s after the heal"
}

fault_rolling() {
  local n t took=()
  load rolling 45
  sleep 3
  for n in "${HUBS[@]}"; do
    t=$(now)
    docker restart -t 5 "$(cid "$n")" >/dev/null
    wait_for 90 "$n healthy" healthy "$n"
    wait_r3 "$n restarted"
    took+=("$n $(since "$t")s")
  done
  t=$(now)
  load_wait
  row "rolling restart ${HUBS[*]}" rolling "$t" "each back and current after: $(IFS=,; echo "${took[*]}" | sed 's/,/, /g')"
}

wan_note() { # the link's counters
  curl -sf "$WAN_B/v1/link" | python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print("link: %d accepted, %d refused, %d reset, %d open" % (s["accepted"], s["refused"], s["resets"], s["open_conns"]))'
}

fault_wan_latency() {
  local e
  e=$(epoch_b)
  wan latency '{"delay":"75ms","jitter":"10ms"}'
  load wan-latency 20
  load_wait
  wan clear
  row "dc-b link: 150 ms RTT (75±10 ms each way)" wan-latency 0 "whole pass and its verification at 150 ms RTT; dc-b epoch $e→$(epoch_b)"
}

fault_wan_bandwidth() {
  local e
  e=$(epoch_b)
  wan bandwidth "{\"bytes_per_second\":$WAN_CAP_BPS}"
  load wan-bandwidth 20
  load_wait
  wan clear
  row "dc-b link: capped at $(awk -v b="$WAN_CAP_BPS" 'BEGIN { printf "%g", b * 8 / 1e6 }') Mbit/s each way" wan-bandwidth 0 "whole pass and its verification capped; dc-b epoch $e→$(epoch_b)"
}

fault_wan_reset() {
  local e t
  e=$(epoch_b)
  load wan-reset 15
  sleep 3
  wan reset
  sleep 5
  wan reset
  t=$(now)
  load_wait
  row "dc-b link: reset all connections (RST), twice" wan-reset "$t" "$(wan_note); dc-b epoch $e→$(epoch_b)"
}

fault_wan_timed() { # stall|cut
  local kind=$1 e t
  e=$(epoch_b)
  load "wan-$kind" 22
  sleep 3
  wan "$kind"
  sleep 15
  wan heal
  t=$(now)
  wait_for 60 "a dc-b relay active after the $kind" active_of b
  load_wait
  case $kind in
    stall) row "dc-b link: stalled 15s (black hole), healed" wan-stall "$t" "$(wan_note); dc-b epoch $e→$(epoch_b)" ;;
    cut) row "dc-b link: cut 15s (closed, refused), healed" wan-cut "$t" "$(wan_note); dc-b epoch $e→$(epoch_b)" ;;
  esac
}

# stats_sample FILE: one docker stats line per container of the project
# ("name cpu% rss") appended to FILE.
stats_sample() {
  docker stats --no-stream --format '{{.Name}} {{.CPUPerc}} {{.MemUsage}}' \
    $(docker ps -q --filter "label=com.docker.compose.project=$PROJ" --filter "label=com.docker.compose.oneoff=False") |
    sed 's| / .*||' >>"$1"
}
# stats_table FILE: per role, the mean and max CPU % and RSS of its samples.
stats_table() {
  python3 - "$1" <<'PY'
import re, sys
units = {"B": 1 / 2**20, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}
roles = {}
for line in open(sys.argv[1]):
    name, cpu, mem = line.split()
    svc = re.sub(r"^[^_]*_(.*)_\d+$", r"\1", name)
    role = next((r for p, r in (("relay-", "relay"), ("nats-dc-", "leaf"), ("indexer-", "indexer"),
                                ("nats-hub-", "hub node"), ("wan-dc-", "WAN proxy")) if svc.startswith(p)), svc)
    m = re.match(r"([\d.]+)([KMG]?i?B)", mem)
    roles.setdefault(role, []).append((float(cpu.rstrip("%")), float(m.group(1)) * units[m.group(2)], svc))
for role, xs in sorted(roles.items()):
    n = len({s for _, _, s in xs})
    cpu = [c for c, _, _ in xs]
    rss = [r for _, r, _ in xs]
    print(f"  {role:10} ×{n:<3} CPU mean {sum(cpu) / len(cpu):5.1f}% max {max(cpu):5.1f}%   RSS mean {sum(rss) / len(rss):6.1f} MiB max {max(rss):6.1f} MiB")
PY
}

fault_stats() {
  local i n=${STATS_REQUESTS:-4096}
  sleep 10 # settled after the baseline
  for i in 1 2 3; do stats_sample "$LOGDIR/stats-idle"; done
  SPACE=$((SPACE + 1))
  (
    set +e
    "${DC[@]}" run --rm -T --no-deps replayer --repeat=false --hash-space "$SPACE" --status-interval 2s \
      --verify-timeout "$VERIFY_TIMEOUT" --speed 0 --max-requests "$n" 2>&1 |
      while IFS= read -r line; do printf '%s %s\n' "$(now)" "$line"; done >"$LOGDIR/stats"
    echo "${PIPESTATUS[0]}" >"$LOGDIR/stats.rc"
  ) &
  LOAD_PID=$!
  sleep 8
  for i in 1 2 3; do
    grep -q 'verify:' "$LOGDIR/stats" 2>/dev/null && break
    stats_sample "$LOGDIR/stats-busy"
  done
  load_wait
  row "none: $n requests at full speed (stats)" stats 0 "verification samples 512 of the $n requests"
  STATS_OUT=$(printf 'idle (3 samples):\n%s\nduring the full-speed pass (%s):\n%s' \
    "$(stats_table "$LOGDIR/stats-idle")" "$(grep -c . "$LOGDIR/stats-busy") container samples" "$(stats_table "$LOGDIR/stats-busy")")
  log "docker stats:"
  echo "$STATS_OUT"
}

if [ "$BUILD" = 1 ]; then
  log "building the offline images (static binaries, FROM scratch)"
  scripts/build-images.sh
fi
log "starting the clustered stack (project $PROJ)"
"${DC[@]}" up -d --no-build "${SERVICES[@]}" "${INITS[@]}" >"$LOGDIR/up" 2>&1 \
  || { cat "$LOGDIR/up" >&2; exit 1; }
t=$(now)
wait_for 300 "every service healthy" healthy "${SERVICES[@]}"
wait_for 180 "${#DCS[@]} lanes of every model active at the indexer" lanes_active ${#DCS[@]}
for x in "${DCS[@]}"; do
  wait_for 60 "a dc-$x active relay for every model" active_of "$x"
done
wait_r3 "start"
log "stack up (${#DCS[@]} DCs, ${#RELAYS[@]} relays, models ${MODELS[*]}), every lane active, every stream R3 after $(since "$t")s:"
"$JSZ" status "${ASSETS[@]}" | sed 's/^/          /'

# Baseline: one pass as fast as the replayer goes.
t=$(now)
load baseline 0
load_wait
row "none (baseline, $LOAD_REQUESTS requests at full speed)" baseline "$t" "replay + verify"

for f in ${FAULTS//,/ }; do
  case $f in
    lanes-leader) fault_lanes_leader ;;
    lease-leader) fault_lease_leader ;;
    partition) fault_partition ;;
    rolling) fault_rolling ;;
    wan-latency) fault_wan_latency ;;
    wan-bandwidth) fault_wan_bandwidth ;;
    wan-reset) fault_wan_reset ;;
    wan-stall) fault_wan_timed stall ;;
    wan-cut) fault_wan_timed cut ;;
    stats) fault_stats ;;
  esac
  # Every fault ends with the cluster whole again.
  wait_r3 "after $f"
done
log "after the faults:"
# Shown, not checked: wait_r3 above already required every asset current,
# and a follower may be a renewal behind at this instant (seen at 16 DCs).
"$JSZ" status "${ASSETS[@]}" | sed 's/^/          /' || true

echo
printf '%-52s %8s %14s %14s %7s  %-4s %s\n' "fault" "converge" "live under" "settled under" "unavail" "" "note"
printf '%-52s %8s %14s %14s %7s  %-4s %s\n' "" "(s)" "/ over" "/ over" "queries" "" ""
for r in "${ROWS[@]}"; do echo "$r"; done
echo
if [ -n "${STATS_OUT:-}" ]; then
  echo "docker stats per role (${#DCS[@]} DCs):"
  echo "$STATS_OUT"
  echo
fi
if [ "$FAILED" != 0 ]; then
  echo "chaos: FAILED in $(($(date +%s) - START))s: a phase did not settle at 0 under / 0 over (see above)" >&2
  exit 1
fi
echo "chaos: OK in $(($(date +%s) - START))s (converge: from the later of the fault's end and the pass's last event until all $LOAD_REQUESTS requests' answers were at the exact depth; live: answers below / above the truth while the pass ran; settled: the same $LOAD_REQUESTS requests × ${#DCS[@]} DCs once settled; counts summed over the models ${MODELS[*]})"
