#!/usr/bin/env bash
# Mutation testing of the pure packages with gremlins (issue 10). Too slow for
# every submission, so it is not part of .ci/run. Usage:
#
#   ./scripts/mutation.sh                          # pkg/ckf pkg/wire pkg/consumer pkg/producer pkg/lease
#   ./scripts/mutation.sh pkg/consumer pkg/wire    # the issue's done-when check
#
# Each package runs on its own (one gremlins run per package, --workers 1 by
# default: every mutant runs that package's test suite). The tool is
# installed pinned into a tool directory, never into go.mod. Per-package logs
# and gremlins' JSON land in $MUTATION_OUT. Environment:
#
#   GREMLINS_DIR       tool directory (default: $XDG_CACHE_HOME/ckfrelay-tools or ~/.cache/ckfrelay-tools)
#   MUTATION_OUT       output directory (default: ./mutation-out)
#   MUTATION_WORKERS   gremlins --workers (default 1)
#   MUTATION_TIMEOUT   gremlins --timeout-coefficient (default 3)
#
# Efficacy is killed / (killed + lived); mutator coverage is (killed + lived) /
# all mutants. Equivalent mutants, which no test can kill, are listed with
# their reasons in docs/mutation.md; gremlins still counts them as lived.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin

readonly GREMLINS_VERSION=v0.6.0
tooldir=${GREMLINS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ckfrelay-tools}
out=${MUTATION_OUT:-mutation-out}
workers=${MUTATION_WORKERS:-1}
coefficient=${MUTATION_TIMEOUT:-3}
gremlins=$tooldir/gremlins-$GREMLINS_VERSION

if [[ ! -x $gremlins ]]; then
	mkdir -p "$tooldir"
	# Installed from outside the module so go.mod and go.sum stay untouched.
	(cd / && GOBIN=$tooldir GOFLAGS= go install "github.com/go-gremlins/gremlins/cmd/gremlins@$GREMLINS_VERSION")
	mv "$tooldir/gremlins" "$gremlins"
fi

if (($# == 0)); then
	set -- pkg/ckf pkg/wire pkg/consumer pkg/producer pkg/lease
fi
mkdir -p "$out"

rows=()
status=0
for pkg in "$@"; do
	pkg=${pkg#./}
	pkg=${pkg%/}
	if [[ ! -d $pkg ]]; then
		echo "mutation.sh: no package directory $pkg" >&2
		exit 2
	fi
	name=${pkg//\//_}
	echo "== $pkg (log: $out/$name.log)"
	start=$SECONDS
	if ! "$gremlins" unleash --workers "$workers" --timeout-coefficient "$coefficient" \
		-o "$out/$name.json" "./$pkg" >"$out/$name.log" 2>&1; then
		echo "gremlins failed on $pkg; see $out/$name.log" >&2
		status=1
		rows+=("$(printf '%-14s %s' "$pkg" 'gremlins failed')")
		continue
	fi
	sed -i $'s/\x1b\\[[0-9;]*m//g' "$out/$name.log" # colour codes, if any
	grep -E '^ *(LIVED|TIMED OUT|NOT VIABLE)' "$out/$name.log" || true
	field() { sed -nE "s/^$1: *([0-9.]+)%.*/\1/p" "$out/$name.log" | tail -1; }
	counts() { sed -nE "s/.*$1: *([0-9]+).*/\1/p" "$out/$name.log" | tail -1; }
	rows+=("$(printf '%-14s %8s %8s %7s %7s %12s %10s %6ss' "$pkg" \
		"$(counts Killed)" "$(counts Lived)" "$(counts 'Not covered')" "$(counts 'Timed out')" \
		"$(field 'Test efficacy')%" "$(field 'Mutator coverage')%" $((SECONDS - start)))")
done

echo
printf '%-14s %8s %8s %7s %7s %12s %10s %7s\n' package killed lived uncov timeout efficacy coverage time
for r in "${rows[@]}"; do
	echo "$r"
done
exit $status
