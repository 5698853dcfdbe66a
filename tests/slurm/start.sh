#!/usr/bin/env bash
# Start a single-host SLURM cluster with fake GPUs for the tests.
#
# Usage: tests/slurm/start.sh STATEDIR
#
# Writes /etc/slurm/slurm.conf and /etc/slurm/gres.conf from the templates next to this script, starts munged
# (unless one already answers), slurmctld and slurmd, records the pids of what it started in STATEDIR/pids
# ("name pid starttime" per line, for stop.sh), keeps their logs, spool and state in STATEDIR, and waits until
# the node is idle. Stop with: tests/slurm/stop.sh STATEDIR
#
# Environment (all optional):
#   FAKE_GPU_TYPES       space-separated labels, one node feature each    [v100 a100 h100 h200]
#   FAKE_GPUS_PER_TYPE   fake GPUs of each label (1..8)                   [1]
#   FAKE_NODE_MIN_CPUS   declare at least this many CPUs on the node      [0: what slurmd -C reports]
#   FAKE_NODE_MIN_MEM_MB declare at least this much memory on the node    [0: what slurmd -C reports]
#   START_TIMEOUT_S      how long to wait for the node to become idle     [60]
# The two minima let a GPU profile's cpus_per_gpu / mem_mb requests be scheduled on a small VM; nothing is
# enforced (no cgroups), so the jobs simply share the machine's real cores.
#
# Calling it again while its cluster runs reuses that cluster (exit 0). Daemons that this script did not
# start are never touched: if a slurmctld/slurmd runs that is not ours, it fails with one line.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
started_any=0
die() {
    echo "start.sh: $*" >&2
    # Leave nothing half-started behind: stop exactly what this call launched.
    [ "$started_any" -eq 0 ] || "$here/stop.sh" "$statedir" >/dev/null 2>&1 || true
    exit 1
}

[ $# -eq 1 ] || die "usage: start.sh STATEDIR"
[ "$EUID" -eq 0 ] || die "must run as root (slurmd and munged need it)"
for cmd in slurmctld slurmd sinfo scontrol munged; do
    command -v "$cmd" >/dev/null 2>&1 || die "$cmd not found; run tests/slurm/install.sh first"
done

mkdir -p "$1"
statedir=$(cd "$1" && pwd)
registry=/run/medddpm-test-slurm.statedir   # which STATEDIR holds the running test cluster
marker="# medddpm-test-slurm"                 # first line of the slurm.conf we write
timeout_s=${START_TIMEOUT_S:-60}

alive() {  # alive NAME: the process recorded under NAME in $statedir/pids is still that process
    local name=$1 pid start
    read -r pid start < <(awk -v n="$name" '$1 == n {print $2, $3}' "$statedir/pids" 2>/dev/null) || return 1
    [ -n "${pid:-}" ] && [ -r "/proc/$pid/stat" ] || return 1
    [ "$(awk '{print $22}' "/proc/$pid/stat" 2>/dev/null)" = "$start" ]
}
record() {  # record NAME PID
    started_any=1
    echo "$1 $2 $(awk '{print $22}' "/proc/$2/stat")" >>"$statedir/pids"
}
node_state() { sinfo -h -n "$node" -o '%T' 2>/dev/null | head -n 1 || true; }
wait_idle() {
    local deadline=$((SECONDS + timeout_s)) state=""
    while [ $SECONDS -lt $deadline ]; do
        state=$(node_state)
        case "$state" in
            idle|mixed|allocated|completing) return 0 ;;
            down*|drain*|fail*|unknown*)
                scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
        esac
        if grep -q '^slurmd ' "$statedir/pids" 2>/dev/null && ! alive slurmd; then
            die "slurmd exited at start; see $statedir/slurmd.log"
        fi
        sleep 0.2
    done
    die "node $node not idle after ${timeout_s}s (state: '${state:-no answer}'); logs in $statedir"
}

node=$(hostname -s)

# --- a cluster already running? --------------------------------------------------------------------------
if [ -e "$registry" ]; then
    other=$(cat "$registry")
    if [ "$other" = "$statedir" ] && alive slurmctld && alive slurmd; then
        echo "start.sh: test cluster already running from $statedir; reusing it"
        wait_idle
        exit 0
    fi
    if [ "$other" != "$statedir" ] && [ -f "$other/pids" ] && \
        statedir=$other alive slurmctld 2>/dev/null; then
        die "a test cluster started from $other is running; stop it first: tests/slurm/stop.sh $other"
    fi
    rm -f "$registry"   # stale: its daemons are gone
fi
for d in slurmctld slurmd; do
    for pid in $(pgrep -x "$d"); do
        # A daemon that has exited but is not yet reaped (stop.sh does not wait for that) runs no more.
        [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" = "Z" ] && continue
        [ -r "/proc/$pid/stat" ] || continue
        die "a $d not started by this script is running (pid $pid); stop it or use that cluster"
    done
done
if [ -f /etc/slurm/slurm.conf ] && [[ "$(head -n 1 /etc/slurm/slurm.conf)" != "$marker"* ]]; then
    die "/etc/slurm/slurm.conf exists and was not written by this script; move it away first"
fi

# --- configuration -----------------------------------------------------------------------------------------
rm -f "$statedir/pids"
mkdir -p "$statedir/slurmctld-state" "$statedir/slurmd-spool" /etc/slurm
hw=$(slurmd -C | head -n 1)
cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$hw")
mem=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$hw")
[ -n "$cpus" ] && [ -n "$mem" ] || die "cannot read CPUs/RealMemory from 'slurmd -C': $hw"
[ "$cpus" -ge "${FAKE_NODE_MIN_CPUS:-0}" ] || cpus=$FAKE_NODE_MIN_CPUS
[ "$mem" -ge "${FAKE_NODE_MIN_MEM_MB:-0}" ] || mem=$FAKE_NODE_MIN_MEM_MB

# One device file per fake GPU (slurmd refuses two GPUs with the same file): character devices with
# /dev/null's numbers, made in STATEDIR/dev, so nothing outside the state folder is involved.
types=${FAKE_GPU_TYPES:-v100 a100 h100 h200}
per_type=${FAKE_GPUS_PER_TYPE:-1}
[[ "$per_type" =~ ^[1-8]$ ]] || die "FAKE_GPUS_PER_TYPE must be 1..8, not '$per_type'"
mkdir -p "$statedir/dev"
gres="" features="" gres_lines=""
for t in $types; do
    [[ "$t" =~ ^[a-z0-9_]+$ ]] || die "bad GPU label '$t' in FAKE_GPU_TYPES"
    gres+="${gres:+,}gpu:$t:$per_type"
    features+="${features:+,}$t"
    for ((k = 0; k < per_type; k++)); do
        dev="$statedir/dev/fakegpu-$t-$k"
        [ -c "$dev" ] || mknod -m 0666 "$dev" c 1 3 || die "cannot create device node $dev"
    done
    gres_lines+="NodeName=$node Name=gpu Type=$t File=$statedir/dev/fakegpu-$t-[0-$((per_type - 1))]"$'\n'
done
[ -n "$gres" ] || die "FAKE_GPU_TYPES is empty"

{
    echo "$marker (state in $statedir)"
    sed -e "s|@NODE@|$node|g" -e "s|@CPUS@|$cpus|g" -e "s|@MEM_MB@|$mem|g" \
        -e "s|@STATEDIR@|$statedir|g" -e "s|@GRES@|$gres|g" -e "s|@FEATURES@|$features|g" \
        "$here/slurm.conf.in"
} >/etc/slurm/slurm.conf
{
    echo "$marker (state in $statedir)"
    while IFS= read -r line; do
        if [ "$line" = "@GRES_LINES@" ]; then printf '%s' "$gres_lines"; else echo "$line"; fi
    done <"$here/gres.conf.in"
} >/etc/slurm/gres.conf
echo "$statedir" >"$registry"

# --- munge -------------------------------------------------------------------------------------------------
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey >/dev/null 2>&1; then mungekey --create --keyfile=/etc/munge/munge.key >/dev/null
    else create-munge-key -f >/dev/null; fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    echo "start.sh: munged already answers on /run/munge; using it (not ours, stop.sh leaves it alone)"
else
    setsid setpriv --reuid=munge --regid=munge --init-groups munged -F \
        </dev/null >>"$statedir/munged.out" 2>&1 &
    record munged $!
    deadline=$((SECONDS + 15))
    until munge -n 2>/dev/null | unmunge >/dev/null 2>&1; do
        alive munged || die "munged exited at start; see $statedir/munged.out and /var/log/munge/munged.log"
        [ $SECONDS -lt $deadline ] || die "munged does not answer after 15s; see $statedir/munged.out"
        sleep 0.5
    done
fi

# --- slurmctld, slurmd (foreground mode in their own session, so $! is the daemon's pid) -------------------
setsid slurmctld -D </dev/null >>"$statedir/slurmctld.out" 2>&1 &
record slurmctld $!
deadline=$((SECONDS + timeout_s))
until scontrol ping 2>/dev/null | grep -q UP; do
    alive slurmctld || die "slurmctld exited at start; see $statedir/slurmctld.log"
    [ $SECONDS -lt $deadline ] || die "slurmctld does not answer after ${timeout_s}s; see $statedir/slurmctld.log"
    sleep 0.2
done
setsid slurmd -D </dev/null >>"$statedir/slurmd.out" 2>&1 &
record slurmd $!

wait_idle  # polls every 0.2 s, and stops with one line if slurmd has exited
echo "start.sh: cluster up: node $node CPUs=$cpus RealMemory=$mem Gres=$gres; state in $statedir"
