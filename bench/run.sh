#!/usr/bin/env bash
# Benchmarks uroce against the kernel sockets it runs on, on this machine:
# Debian's unmodified perftest over uroce (LD_LIBRARY_PATH=build/lib), by
# both of its paths between two processes of one host (the same-host path,
# the default, and UDP, UROCE_SHM=0), next to UDP and TCP over loopback and
# memcpy, measured by bench/netbase.  Prints markdown tables, with the date
# and the machine, on stdout; progress goes to stderr.
#
#   bench/run.sh [build directory, default build]
#
# With gnuplot (apt-get install gnuplot-nox) it also draws latency.png and
# bandwidth.png against message size, every path and floor, into
# $PLOTS (default bench/plots).
#
# It builds what it runs in that directory first (configuring it if it has
# never been).
#
# Every number is the median of REPEATS runs.  A latency run gives its
# median: perftest's t_typical over LAT_ITERS iterations, netbase's over as
# many round trips.  ib_write_lat and ib_send_lat report half the round trip,
# ib_read_lat the whole round trip (a READ is a request and its response), so
# each is set next to the same measure of the socket ping-pong.  A bandwidth
# run gives perftest's "BW average" or netbase's tcp-stream: the bytes of
# BW_ITERS[size] messages over the time from the first post/write to the
# last completion (or the receiver's acknowledgement), in MiB/s (perftest's
# "MB/sec" is 2^20 bytes per second).
#
# CPU per GB: user + system seconds of both processes (every thread: the
# engine's too) of a 1 MiB × CPU_ITERS bandwidth run, over its bytes.
#
# Everything runs one measurement at a time, on 127.0.0.1 only: two processes
# per measurement already need both cores of a small machine.  Every process
# runs under a timeout, so the whole run stays within a few minutes even if
# a test hangs; one that fails is reported in its cell and on stderr.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m -- "${1:-$root/build}")
cd "$root"

REPEATS=3
LAT_SIZES=(2 64 4096)
LAT_ITERS=5000
BW_SIZES=(4096 65536 1048576)
# 256 MiB of each size: shorter runs measured the first page faults and
# slow start more than the transfer (64 KiB over UDP: 1300 MiB/s at 64 MiB,
# 3000 and more from 200 MiB on)
declare -A BW_ITERS=([4096]=65536 [65536]=4096 [1048576]=256)
PINGPONG_S=2		# netbase's bound on a ping-pong (see -t in netbase.c)
MEMCPY_SIZE=$((32 << 20))	# the memcpy floor's buffer
RATE_SIZE=64		# message rate: ib_write_bw -q 4 against UDP datagrams
CPU_ITERS=2000		# 1 MiB messages of a CPU-per-GB run
# event-driven RPC (bench/evrpc): outstanding requests,size; how each side
# waits; requests per run
EV_PATTERNS=(1,64 8,65536)
EV_WAITS=(block epoll)
EV_REQUESTS=20000
# uroce's two paths between processes of one host, and their settings
PATHS=(shm udp)
declare -A PATH_ENV=([shm]=UROCE_SHM=1 [udp]=UROCE_SHM=0)
LIMIT=30		# seconds any one process may run
PORT=28700		# perftest's TCP ports: the first free ones from here, away
		# from the tests' (18600 and up) and the ephemeral range (32768 and up)

[ -f "$build/CMakeCache.txt" ] ||
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2 || exit 1
# Only what the benchmarks run: the library, perftest's provider stubs, netbase.
cmake --build "$build" -j "$(nproc)" --target ibverbs mlx5_stub efa_stub netbase evrpc >&2 ||
	exit 1
netbase=$build/bench/netbase
evrpc=$build/bench/evrpc
# perftest links against the system libibverbs; this makes it load uroce's.
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

tmp=$(mktemp -d)
# Every measurement runs in the background and the shell waits for it with
# the wait builtin, which, unlike a foreground command, a signal interrupts:
# ^C stops the run at once, and the trap kills what is still running.
pids=()
cleanup() {
	[ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null
	wait
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
failures=0

# start <output file> <command...>: starts <command> under timeout, which
# passes a kill on to it; the CPU seconds it used go to <output file>.cpu.
start() {
	local out=$1
	shift
	timeout -k 5 $LIMIT bash -c '"$@"; s=$?; times >"$0"; exit $s' \
		"$out.cpu" "$@" >"$out" 2>&1 &
	pids+=($!)
}

# cpu_seconds <file>...: user + system seconds of the children, summed over
# the files (bash's times: the second line).
cpu_seconds() {
	awk 'FNR == 2 { for (i = 1; i <= 2; i++) {
				split($i, t, "m"); sub("s", "", t[2]); c += t[1] * 60 + t[2] } }
	     END { printf "%.3f\n", c }' "$@"
}

# listening <port>: whether a TCP socket listens on <port>, from the kernel's
# socket tables (connecting would use up the perftest server's one accept).
listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 }
			  END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

# fail <what> <log>: reports a measurement that produced no number.
fail() {
	echo "FAILED: $1" >&2
	tail -n 5 "$2" | sed 's/^/    /' >&2
	failures=$((failures + 1))
	result=failed
}

# perftest <path> <tool> <size> <iters> <column> [options...]: runs <tool>
# (with the options) as server and client on 127.0.0.1 over uroce's <path>;
# sets result to <column> of the client's result row, or to CPU seconds per
# GB moved when <column> is "cpu".
perftest() {
	local path=$1 tool=$2 size=$3 iters=$4 col=$5 port args status
	shift 5
	while listening $PORT; do PORT=$((PORT + 1)); done
	port=$PORT
	PORT=$((PORT + 1))
	args=(-x 0 -p $port -s "$size" -n "$iters" "$@")
	echo "  ${PATH_ENV[$path]} $tool ${args[*]}" >&2

	start "$tmp/server" env "${PATH_ENV[$path]}" "$tool" "${args[@]}"
	for ((i = 0; i < 100; i++)); do
		listening $port && break
		kill -0 "${pids[0]}" 2>/dev/null || break
		sleep 0.05
	done
	start "$tmp/client" env "${PATH_ENV[$path]}" "$tool" "${args[@]}" 127.0.0.1
	wait "${pids[1]}"
	status=$?
	# a server whose client failed would wait for it until the timeout
	[ $status -eq 0 ] || kill "${pids[0]}" 2>/dev/null
	wait "${pids[0]}" || status=$((status ? status : $?))
	pids=()
	if [ $status -eq 0 ] && [ "$col" = cpu ]; then
		result=$(awk -v c="$(cpu_seconds "$tmp/server.cpu" "$tmp/client.cpu")" \
			     -v b=$((size * iters)) 'BEGIN { printf "%.3f\n", c / (b / 1e9) }')
		return
	fi
	if [ $status -eq 0 ] &&
	   result=$(awk -v s="$size" -v c="$col" '$1 == s && NF >= c { print $c; n++ }
						 END { exit n != 1 }' "$tmp/client"); then
		return
	fi
	cat "$tmp/server" >>"$tmp/client"
	fail "$tool ${args[*]} 127.0.0.1 (exit status $status)" "$tmp/client"
}

# netbase <field> <mode> <args...>: sets result to <field> of netbase's
# line, or with field "cpu:<bytes>" to its CPU seconds per GB of <bytes>.
netbase() {
	local field=$1 status
	shift
	echo "  netbase $*" >&2
	start "$tmp/netbase" "$netbase" "$@"
	wait "${pids[0]}"
	status=$?
	pids=()
	if [ $status -eq 0 ] && [ "${field%%:*}" = cpu ]; then
		result=$(awk -v c="$(cpu_seconds "$tmp/netbase.cpu")" -v b="${field#cpu:}" \
			     'BEGIN { printf "%.3f\n", c / (b / 1e9) }')
		return
	fi
	if [ $status -eq 0 ] &&
	   result=$(tr ' ' '\n' <"$tmp/netbase" | sed -n "s/^$field=//p" | grep .); then
		return
	fi
	fail "netbase $* (exit status $status)" "$tmp/netbase"
}

# evrpc <key> <env> <args...>: runs bench/evrpc (env: a setting, or -) and
# adds each field of its line (median_us, p99_us, rps, cpu_us_per_req) to
# runs[<key>:<field>], or "failed" to each.
EV_FIELDS=(median_us p99_us rps cpu_us_per_req)
evrpc() {
	local key=$1 env=$2 status f v
	shift 2
	[ "$env" = - ] && env=UROCE_UNUSED=
	echo "  $env evrpc $*" >&2
	start "$tmp/evrpc" env "$env" "$evrpc" "$@"
	wait "${pids[0]}"
	status=$?
	pids=()
	[ $status -eq 0 ] || fail "evrpc $* (exit status $status)" "$tmp/evrpc"
	for f in "${EV_FIELDS[@]}"; do
		v=failed
		[ $status -eq 0 ] &&
			v=$(tr ' ' '\n' <"$tmp/evrpc" | sed -n "s/^$f=//p" | grep .) ||
			v=failed
		runs[$key:$f]+="$v "
	done
}

# measure <key> <perftest|netbase> <args...>: adds one result to runs[key].
declare -A runs
measure() {
	local key=$1
	shift
	"$@"
	runs[$key]+="$result "
}

# med <key>: the median of runs[key], or "failed" if that is not a number.
med() {
	printf '%s\n' ${runs[$1]} | sort -g | awk '{ v[NR] = $1 }
		END { m = v[int((NR + 1) / 2)]; print (m ~ /^[0-9.]+$/) ? m : "failed" }'
}

# half <number>: for the one-way latency of a round trip.
half() {
	awk -v a="$1" 'BEGIN { if (a ~ /^[0-9.]+$/) printf "%.2f\n", a / 2; else print a }'
}

# ratio <a> <b>: a / b, or a dash if either is missing.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f\n", a / b
		else print "-" }'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
load=$(cut -d ' ' -f 1-3 /proc/loadavg)
start=$(date +%s)

# Rounds of every measurement rather than repeats of each in a row: a burst
# of other work on the machine then spoils one result of several
# measurements, which their medians drop, not all results of one.
for ((round = 1; round <= REPEATS; round++)); do
	echo "round $round of $REPEATS" >&2
	for s in "${LAT_SIZES[@]}"; do
		pp=(-s $s -n $LAT_ITERS -t $PINGPONG_S)
		measure udp,$s netbase rtt_median_us udp-pingpong "${pp[@]}"
		measure udp-busy,$s netbase rtt_median_us udp-pingpong "${pp[@]}" -b
		measure tcp,$s netbase rtt_median_us tcp-pingpong "${pp[@]}"
		for verb in write read send; do
			# column 5 of perftest's latency row: t_typical, the median
			for p in "${PATHS[@]}"; do
				measure $p:${verb}_lat,$s perftest $p ib_${verb}_lat $s $LAT_ITERS 5
			done
		done
	done
	for s in "${BW_SIZES[@]}"; do
		measure stream,$s netbase mib_s tcp-stream -s $s -n ${BW_ITERS[$s]}
		for verb in write read send; do
			# column 4 of perftest's bandwidth row: BW average
			for p in "${PATHS[@]}"; do
				measure $p:${verb}_bw,$s perftest $p ib_${verb}_bw $s ${BW_ITERS[$s]} 4
			done
		done
	done
	# event-driven RPC: both sides sleep until their message arrives;
	# the floor of two processes that sleep: shared memory and eventfds
	measure ev:floor netbase rtt_median_us shm-pingpong -s 64 -n $EV_REQUESTS
	for qs in "${EV_PATTERNS[@]}"; do
		q=${qs%,*} s=${qs#*,}
		evrpc ev:tcp,$qs - tcp -q $q -s $s -n $EV_REQUESTS
		for p in "${PATHS[@]}"; do
			for w in "${EV_WAITS[@]}"; do
				evrpc ev:$p:$w,$qs "${PATH_ENV[$p]}" verbs -q $q -s $s \
					-n $EV_REQUESTS -c $w -S $w
			done
		done
	done
	measure memcpy netbase mib_s memcpy -s $MEMCPY_SIZE -n 20
	measure udp_rate netbase dgrams_per_s udp-rate -s $RATE_SIZE -n 500000
	measure cpu:stream netbase cpu:$((CPU_ITERS << 20)) tcp-stream -s 1048576 -n $CPU_ITERS
	for p in "${PATHS[@]}"; do
		# message rate: column 5, MsgRate in Mpps, over four QPs
		measure $p:write_rate perftest $p ib_write_bw $RATE_SIZE 50000 5 -q 4
		# many QPs: as many 64 KiB WRITEs (64,000) on 16 and on 1,000
		# QPs.  Each QP has its own buffers, whose pages are touched
		# for the first time by the run (uroce pins nothing), so
		# fewer messages would measure page faults.
		measure $p:qps,16 perftest $p ib_write_bw 65536 4000 4 -q 16
		measure $p:qps,1000 perftest $p ib_write_bw 65536 64 4 -q 1000
		for verb in write read send; do
			measure $p:cpu:$verb perftest $p ib_${verb}_bw 1048576 $CPU_ITERS cpu
		done
	done
done

# ---- report ----------------------------------------------------------------

settings=$(env | grep '^UROCE_' | sort | tr '\n' ' ')
echo "## uroce vs kernel sockets, loopback"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), run time $(($(date +%s) - start)) s"
echo "- machine: $(nproc) CPUs ($cpu), Linux $(uname -r)," \
     "load average $load before the run"
echo "- uroce: $(git describe --always --dirty 2>/dev/null || echo unknown)${settings:+, $settings}"
echo "- command: bench/run.sh${*:+ $*}"
echo
echo "Latency in µs: medians of $REPEATS runs of $LAT_ITERS round trips each" \
     "(of each run's median; a socket ping-pong stops early after" \
     "$PINGPONG_S s).  WRITE and SEND: one way (round trip / 2, as" \
     "perftest reports them); READ: the whole round trip.  UDP and TCP:" \
     "ping-pong of the same size; UDP busy-poll spins on non-blocking" \
     "receives, as perftest and uroce do."
echo
echo "| test | size (B) | uroce same-host | uroce UDP | UDP | UDP busy-poll | TCP | same-host / UDP busy-poll | uroce UDP / UDP busy-poll | uroce UDP / UDP |"
echo "|------|---------:|----------------:|----------:|----:|--------------:|----:|--------------------------:|--------------------------:|--------------------:|"
for verb in write read send; do
	for s in "${LAT_SIZES[@]}"; do
		l=$(med shm:${verb}_lat,$s) lu=$(med udp:${verb}_lat,$s)
		u=$(med udp,$s) ub=$(med udp-busy,$s) t=$(med tcp,$s)
		if [ $verb != read ]; then
			u=$(half "$u") ub=$(half "$ub") t=$(half "$t")
		fi
		echo "| ib_${verb}_lat | $s | $l | $lu | $u | $ub | $t |" \
		     "$(ratio "$l" "$ub") | $(ratio "$lu" "$ub") | $(ratio "$lu" "$u") |"
	done
done
echo
echo "Bandwidth in MiB/s: medians of $REPEATS runs of" \
     "$(for s in "${BW_SIZES[@]}"; do printf '%s × %s B, ' "${BW_ITERS[$s]}" "$s"; done |
	sed 's/, $//') each.  TCP stream: as many writes of the same size."
echo
echo "| test | size (B) | uroce same-host | uroce UDP | TCP stream | same-host / TCP | UDP / TCP |"
echo "|------|---------:|----------------:|----------:|-----------:|----------------:|----------:|"
for verb in write read send; do
	for s in "${BW_SIZES[@]}"; do
		b=$(med shm:${verb}_bw,$s) bu=$(med udp:${verb}_bw,$s) t=$(med stream,$s)
		echo "| ib_${verb}_bw | $s | $b | $bu | $t | $(ratio "$b" "$t") | $(ratio "$bu" "$t") |"
	done
done

echo
m=$(med memcpy)
echo "Same-host copy floor: memcpy of $((MEMCPY_SIZE >> 20)) MiB, $m MiB/s;" \
     "same-host ib_write_bw 1 MiB / memcpy $(ratio "$(med shm:write_bw,1048576)" "$m")," \
     "ib_read_bw 1 MiB / memcpy $(ratio "$(med shm:read_bw,1048576)" "$m")."
echo
ur=$(med udp_rate)
ur_m=$(awk -v a="$ur" 'BEGIN { if (a ~ /^[0-9.]+$/) printf "%.3f\n", a / 1e6; else print a }')
ws=$(med shm:write_rate) wu=$(med udp:write_rate)
echo "| message rate, $RATE_SIZE B | Mpps | / UDP datagrams |"
echo "|---|---:|---:|"
echo "| ib_write_bw -q 4, same-host | $ws | $(ratio "$ws" "$ur_m") |"
echo "| ib_write_bw -q 4, UDP | $wu | $(ratio "$wu" "$ur_m") |"
echo "| UDP datagrams one socket receives (sendmmsg blaster) | $ur_m | 1 |"
echo
echo "| ib_write_bw 64 KiB | same-host MiB/s | UDP MiB/s |"
echo "|---|---:|---:|"
echo "| -q 16 | $(med shm:qps,16) | $(med udp:qps,16) |"
echo "| -q 1000 | $(med shm:qps,1000) | $(med udp:qps,1000) |"
echo "| 1000 / 16 | $(ratio "$(med shm:qps,1000)" "$(med shm:qps,16)") | $(ratio "$(med udp:qps,1000)" "$(med udp:qps,16)") |"
echo
echo "CPU seconds per GB moved (both processes, all threads; 1 MiB messages," \
     "$CPU_ITERS of them; lower is better):"
echo
echo "| test | same-host | UDP | TCP stream |"
echo "|---|---:|---:|---:|"
for verb in write read send; do
	echo "| ib_${verb}_bw | $(med shm:cpu:$verb) | $(med udp:cpu:$verb) | $(med cpu:stream) |"
done

echo
echo "Event-driven RPC (bench/evrpc): one RC QP, SEND requests answered by" \
     "SENDs, both sides asleep until their message arrives (block:" \
     "ibv_get_cq_event; epoll: the channel's fd, non-blocking, in" \
     "epoll_wait), against the same RPC over TCP with blocking reads" \
     "(TCP_NODELAY).  Medians of $REPEATS runs of $EV_REQUESTS requests;" \
     "round trip in µs from post to the answer's completion; CPU: both" \
     "processes, every thread."
echo
echo "| requests | path | median µs | p99 µs | requests/s | CPU µs/request | median / TCP |"
echo "|---|---|---:|---:|---:|---:|---:|"
for qs in "${EV_PATTERNS[@]}"; do
	q=${qs%,*} s=${qs#*,}
	t=$(med ev:tcp,$qs:median_us)
	what="$q × $s B"
	echo "| $what | TCP | $t | $(med ev:tcp,$qs:p99_us) | $(med ev:tcp,$qs:rps) |" \
	     "$(med ev:tcp,$qs:cpu_us_per_req) | 1 |"
	if [ "$qs" = 1,64 ]; then
		echo "| $what | shared memory + eventfd (netbase shm-pingpong) |" \
		     "$(med ev:floor) | | | | $(ratio "$(med ev:floor)" "$t") |"
	fi
	for p in "${PATHS[@]}"; do
		for w in "${EV_WAITS[@]}"; do
			k=ev:$p:$w,$qs
			name=$([ $p = shm ] && echo same-host || echo UDP)
			echo "| $what | uroce $name, $w | $(med $k:median_us) |" \
			     "$(med $k:p99_us) | $(med $k:rps) | $(med $k:cpu_us_per_req) |" \
			     "$(ratio "$(med $k:median_us)" "$t") |"
		done
	done
done

# ---- plots -----------------------------------------------------------------

PLOTS=${PLOTS:-$root/bench/plots}
if command -v gnuplot >/dev/null; then
	mkdir -p "$PLOTS"
	for s in "${LAT_SIZES[@]}"; do
		echo "$s $(med shm:write_lat,$s) $(med shm:send_lat,$s)" \
		     "$(half "$(med shm:read_lat,$s)") $(half "$(med udp,$s)")" \
		     "$(half "$(med udp-busy,$s)") $(half "$(med tcp,$s)")" \
		     "$(med udp:write_lat,$s) $(med udp:send_lat,$s)" \
		     "$(half "$(med udp:read_lat,$s)")"
	done >"$tmp/lat.dat"
	for s in "${BW_SIZES[@]}"; do
		echo "$s $(med shm:write_bw,$s) $(med shm:read_bw,$s) $(med shm:send_bw,$s)" \
		     "$(med stream,$s) $(med memcpy)" \
		     "$(med udp:write_bw,$s) $(med udp:read_bw,$s) $(med udp:send_bw,$s)"
	done >"$tmp/bw.dat"
	for qs in "${EV_PATTERNS[@]}"; do
		printf '"%s" %s' "${qs%,*} × ${qs#*,} B" "$(med ev:tcp,$qs:median_us)"
		for p in "${PATHS[@]}"; do
			for w in "${EV_WAITS[@]}"; do
				printf ' %s' "$(med ev:$p:$w,$qs:median_us)"
			done
		done
		echo
	done >"$tmp/ev.dat"
	title="uroce $(git describe --always --dirty 2>/dev/null), $(date -u '+%Y-%m-%d'), $(nproc) CPUs, loopback"
	# tics at the sizes measured: "2" 2, "4 KiB" 4096, ...
	tics() {
		local s l sep=
		printf '('
		for s in "$@"; do
			if [ $s -ge 1048576 ]; then l="$((s >> 20)) MiB"
			elif [ $s -ge 1024 ]; then l="$((s >> 10)) KiB"
			else l="$s B"; fi
			printf '%s"%s" %s' "$sep" "$l" "$s"
			sep=', '
		done
		printf ')'
	}
	gnuplot <<-EOF 2>"$tmp/gnuplot.err" || { echo "gnuplot failed:" >&2; cat "$tmp/gnuplot.err" >&2; }
		set terminal pngcairo noenhanced size 900,560 font ",10"
		set logscale x 2
		set grid
		set key outside right
		set datafile missing "failed"
		set xlabel "message size (bytes)"
		set xtics $(tics "${LAT_SIZES[@]}")
		set output "$PLOTS/latency.png"
		set title "one-way latency (µs, lower is better): $title"
		set logscale y
		plot "$tmp/lat.dat" using 1:2 with linespoints title "ib_write_lat same-host", \
		     "" using 1:3 with linespoints title "ib_send_lat same-host", \
		     "" using 1:4 with linespoints title "ib_read_lat / 2 same-host", \
		     "" using 1:8 with linespoints title "ib_write_lat UDP", \
		     "" using 1:9 with linespoints title "ib_send_lat UDP", \
		     "" using 1:10 with linespoints title "ib_read_lat / 2 UDP", \
		     "" using 1:5 with linespoints dt 2 title "UDP ping-pong", \
		     "" using 1:6 with linespoints dt 2 title "UDP busy-poll", \
		     "" using 1:7 with linespoints dt 2 title "TCP ping-pong"
		set xtics $(tics "${BW_SIZES[@]}")
		set output "$PLOTS/bandwidth.png"
		set title "bandwidth (MiB/s, higher is better): $title"
		plot "$tmp/bw.dat" using 1:2 with linespoints title "ib_write_bw same-host", \
		     "" using 1:3 with linespoints title "ib_read_bw same-host", \
		     "" using 1:4 with linespoints title "ib_send_bw same-host", \
		     "" using 1:7 with linespoints title "ib_write_bw UDP", \
		     "" using 1:8 with linespoints title "ib_read_bw UDP", \
		     "" using 1:9 with linespoints title "ib_send_bw UDP", \
		     "" using 1:5 with linespoints dt 2 title "TCP stream", \
		     "" using 1:6 with lines lw 2 dt 3 lc rgb "black" title "memcpy (32 MiB)"
		unset logscale x
		set xtics auto
		set xlabel "outstanding requests × size"
		set output "$PLOTS/event.png"
		set title "event-driven RPC round trip (µs, median, lower is better): $title"
		set style data histograms
		set style histogram clustered
		set style fill solid 0.8
		plot "$tmp/ev.dat" using 2:xtic(1) title "TCP", \
		     "" using 3 title "same-host, block", "" using 4 title "same-host, epoll", \
		     "" using 5 title "UDP, block", "" using 6 title "UDP, epoll"
	EOF
	echo
	echo "Plots: $PLOTS/latency.png, $PLOTS/bandwidth.png, $PLOTS/event.png"
else
	echo "no plots: gnuplot is not installed (apt-get install gnuplot-nox)" >&2
fi

if [ $failures -ne 0 ]; then
	echo "$failures measurement(s) failed; see above" >&2
	exit 1
fi
