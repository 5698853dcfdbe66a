#!/usr/bin/env bash
# Stop the test cluster that tests/slurm/start.sh STATEDIR started.
#
# Usage: tests/slurm/stop.sh STATEDIR
#
# Cancels the jobs still queued or running on that cluster (so no job processes outlive it), then stops exactly
# the daemons recorded in STATEDIR/pids (slurmd, slurmctld, munged: only those start.sh launched), each by pid
# with SIGTERM, waits up to STOP_TIMEOUT_S seconds (default 15) and sends SIGKILL to what is left. A recorded
# pid whose process start time differs (the pid was reused) is left alone. Logs stay in STATEDIR.
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

die() { echo "stop.sh: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: stop.sh STATEDIR"
[ -d "$1" ] || die "no state folder $1"
statedir=$(cd "$1" && pwd)
pids_file="$statedir/pids"
registry=/run/medddpm-test-slurm.statedir
timeout_s=${STOP_TIMEOUT_S:-15}

if [ ! -s "$pids_file" ]; then
    echo "stop.sh: nothing recorded in $pids_file; nothing to stop"
    exit 0
fi

same_process() {  # same_process PID STARTTIME
    [ -r "/proc/$1/stat" ] && [ "$(awk '{print $22}' "/proc/$1/stat" 2>/dev/null)" = "$2" ]
}
# A daemon that has exited is stopped, reaped or not: the daemons were started in sessions of their own by start.sh,
# which has ended, so whatever adopted them reaps them (in some containers 2 s after they exit, which cost each of the
# three daemons those 2 s here when a zombie counted as running).
running() {  # running PID STARTTIME: that process, and not a zombie
    same_process "$1" "$2" && [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != "Z" ]
}

# Jobs first, while slurmctld still answers (only when it is ours and alive).
ctld=$(awk '$1 == "slurmctld" {print $2, $3}' "$pids_file")
if [ -n "$ctld" ] && same_process $ctld; then
    timeout 10 scancel --state=PENDING >/dev/null 2>&1 || true
    timeout 10 scancel --state=RUNNING >/dev/null 2>&1 || true
    deadline=$((SECONDS + timeout_s))
    while [ $SECONDS -lt $deadline ] && \
        [ -n "$(timeout 10 squeue -h -t PENDING,RUNNING,COMPLETING -o %i 2>/dev/null)" ]; do
        sleep 1
    done
fi

# Daemons: compute nodes first, then the controller, then munge (slurm needs munge to shut down cleanly).
status=0
for name in slurmd slurmctld munged; do
    while read -r n pid start; do
        [ "$n" = "$name" ] || continue
        if ! running "$pid" "$start"; then
            echo "stop.sh: $name (pid $pid) already gone"
            continue
        fi
        kill -TERM "$pid" 2>/dev/null
        deadline=$((SECONDS + timeout_s))
        while running "$pid" "$start" && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
        if running "$pid" "$start"; then
            echo "stop.sh: $name (pid $pid) still running after ${timeout_s}s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.5
            if running "$pid" "$start"; then
                echo "stop.sh: $name (pid $pid) survived SIGKILL" >&2
                status=1
            fi
        else
            echo "stop.sh: stopped $name (pid $pid)"
        fi
    done <"$pids_file"
done

if [ $status -eq 0 ]; then
    : >"$pids_file"
    [ "$(cat "$registry" 2>/dev/null)" = "$statedir" ] && rm -f "$registry"
    # The configuration start.sh wrote goes too: with it and no slurmctld, every `scontrol show config` (the SLURM
    # executor plugin runs one whenever Snakemake starts) waits 9 s for a controller that is gone.
    for conf in /etc/slurm/slurm.conf /etc/slurm/gres.conf; do
        [ -f "$conf" ] && [[ "$(head -n 1 "$conf")" == "# medddpm-test-slurm"* ]] && rm -f "$conf"
    done
fi
exit $status
