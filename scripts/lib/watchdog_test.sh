#!/usr/bin/env bash
# Checks scripts/lib/watchdog.sh: a script that ends before its limit
# returns at once even with its output captured, and leaves no watchdog
# process or FIFO behind (checked over 100 runs: the stop can land at any
# point of the watchdog's start-up); a script that outlives its limit is
# ended with 124 and the message. About 4 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/quick.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
. scripts/lib/watchdog.sh
trap watchdog_stop EXIT
watchdog_start quick 47
echo "done $WATCHDOG_PID ${WATCHDOG_DIR:-/nonexistent}"
SH
cat >"$tmp/slow.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
. scripts/lib/watchdog.sh
trap watchdog_stop EXIT
watchdog_start slow 1
# As the scripts do: short foreground steps (the trap runs between them).
for _ in $(seq 20); do sleep 0.5; done
echo "not reached"
SH
fail() { echo "watchdog_test: $*" >&2; exit 1; }
start=$(date +%s%N)
out=$(bash "$tmp/quick.sh")
quick=$((($(date +%s%N) - start) / 1000000))
[ "$quick" -lt 2000 ] || fail "a captured script that ended at once returned after ${quick} ms"
grep -q '^done ' <<<"$out" || fail "quick script output: $out"
runs=("$out")
for _ in $(seq 99); do runs+=("$(bash "$tmp/quick.sh")"); done
sleep 0.2
for run in "${runs[@]}"; do
  read -r _ pid dir <<<"$run"
  if kill -0 "$pid" 2>/dev/null && grep -q quick.sh "/proc/$pid/cmdline" 2>/dev/null; then
    fail "a quick script's watchdog (pid $pid) outlived it"
  fi
  [ ! -e "$dir" ] || fail "a quick script left its watchdog's FIFO directory $dir"
done
# Nor any child of one (an earlier watchdog waited on a sleep that could
# outlive it).
if pgrep -f "sleep 47$" >/dev/null; then
  fail "a quick script's watchdog left a sleep: $(pgrep -af 'sleep 47$')"
fi
start=$(date +%s%N)
rc=0
err=$(bash "$tmp/slow.sh" 2>&1 >/dev/null) || rc=$?
took=$((($(date +%s%N) - start) / 1000000))
[ "$rc" = 124 ] || fail "a script over its limit exited $rc, want 124"
[ "$err" = "slow: over 1s, aborting" ] || fail "a script over its limit said: $err"
[ "$took" -lt 5000 ] || fail "a script over a 1 s limit ended after ${took} ms"
echo "watchdog_test: OK (a captured script with a 47 s limit returned after ${quick} ms; 100 such left no watchdog behind; one over its 1 s limit ended after ${took} ms with 124)"
