#!/usr/bin/env bash
# Runs a stock verbs tool (ibverbs-utils, perftest) over uroce and checks it,
# through tests/cm/run_cm_pair.sh, which does the running and checking for
# every suite.
#
#   run_pair.sh [options] -- COMMAND [ARGS...]
#
# With --port, COMMAND ARGS runs as the server, and once the server listens
# on that TCP port, COMMAND ARGS 127.0.0.1 runs as the client, once.
# Without --port, COMMAND ARGS runs once, alone.  Every process runs under
# timeout.  The check passes if every process exits with status 0 and its
# output matches each expected pattern.
#
#   --port P         server's TCP port (the tool's own -p P must be in ARGS)
#   --timeout S      seconds each process may run (default 60)
#   --expect RE      extended regex that the client's (or the single
#                    process's) output must match; repeatable
#   --expect-both RE the same, for the server's output too; repeatable
#
# The environment (LD_LIBRARY_PATH=<build>/lib) comes from ctest.
set -u

port=
opts=()
while [ $# -gt 0 ]; do
	case $1 in
	--port) port=$2; shift 2 ;;
	--timeout | --expect | --expect-both) opts+=("$1" "$2"); shift 2 ;;
	--) shift; break ;;
	*) echo "run_pair.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
if [ $# -eq 0 ]; then
	echo "run_pair.sh: no command" >&2
	exit 2
fi

run_cm_pair=$(dirname "$0")/../cm/run_cm_pair.sh
if [ -z "$port" ]; then
	exec "$run_cm_pair" "${opts[@]}" --single "$@"
fi
# these tools exchange QP numbers over their TCP port: a client is never
# run again
exec "$run_cm_pair" "${opts[@]}" --tcp-port "$port" --retry 1 \
	--server "$@" --client "$@" 127.0.0.1
