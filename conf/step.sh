#!/usr/bin/env bash
# One quiet setup step of the Makefile:  conf/step.sh LOG WHAT COMMAND [ARG...]
# Prints WHAT and, when COMMAND is done, how long it took, on one line; COMMAND's whole output goes to LOG.
# When COMMAND fails, LOG is shown (its last 80 lines) with its path, and the step fails with COMMAND's exit code.
set -uo pipefail
log=$1 what=$2
shift 2
mkdir -p "$(dirname "$log")"
printf '%-58s' "$what"
start=$(date +%s%N)
"$@" >"$log" 2>&1
code=$?
took=$(awk -v ns=$(($(date +%s%N) - start)) 'BEGIN { printf "%.1f s", ns / 1e9 }')
if [ "$code" = 0 ]; then
	echo " $took"
	exit 0
fi
echo " FAILED after $took (exit $code); the end of $log:"
tail -n 80 "$log" | sed 's/^/  | /'
exit "$code"
