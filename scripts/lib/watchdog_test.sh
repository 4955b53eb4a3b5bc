#!/usr/bin/env bash
# Checks scripts/lib/watchdog.sh: a script that ends before its limit
# returns at once even with its output captured, and leaves no watchdog or
# sleep behind; a script that outlives its limit is ended with 124 and the
# message. About 3 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/quick.sh" <<'SH'
#!/usr/bin/env bash
set -euo pipefail
. scripts/lib/watchdog.sh
trap watchdog_stop EXIT
watchdog_start quick 30
echo done
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
grep -q '^done$' <<<"$out" || fail "quick script output: $out"
sleep 0.2
if pgrep -f "sleep 30$" >/dev/null; then
  fail "the quick script's watchdog sleep outlived it: $(pgrep -af 'sleep 30$')"
fi
start=$(date +%s%N)
rc=0
err=$(bash "$tmp/slow.sh" 2>&1 >/dev/null) || rc=$?
took=$((($(date +%s%N) - start) / 1000000))
[ "$rc" = 124 ] || fail "a script over its limit exited $rc, want 124"
[ "$err" = "slow: over 1s, aborting" ] || fail "a script over its limit said: $err"
[ "$took" -lt 5000 ] || fail "a script over a 1 s limit ended after ${took} ms"
echo "watchdog_test: OK (a captured script with a 30 s limit returned after ${quick} ms and left no sleep; one over its 1 s limit ended after ${took} ms with 124)"
