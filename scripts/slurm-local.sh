#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, from Debian's packages, for the
# tests of abbench/campaign/slurm.py and for trying campaigns on one machine.
#
#   scripts/slurm-local.sh up       install slurm-wlm + munge if missing (apt), write the
#                                   munge key and slurm.conf, start munged, slurmctld and
#                                   slurmd; wait until the node is idle. Twice is fine
#                                   (fast: it only checks that all three answer).
#   scripts/slurm-local.sh down     cancel this cluster's jobs, stop the three daemons it
#                                   started (by the pids in their pid files)
#   scripts/slurm-local.sh status   exit 0 when all three daemons run and the node answers,
#                                   3 otherwise; sinfo/squeue on stderr
#
# stdout: `up` and a successful `status` print one line, SLURM_CONF=<path>, and nothing
# else; callers run `eval "$(bash scripts/slurm-local.sh up)"; export SLURM_CONF`.
# Everything else (progress, logs on failure) goes to stderr.
#
# Layout: all state lives in $ABBENCH_SLURM_DIR (default $ABBENCH_CACHE/slurm, i.e.
# ~/.cache/abbench/slurm): slurm.conf, munge.key, munge socket, pid files, logs
# (*.log), slurmctld's StateSaveLocation (ctld/), slurmd's spool (d/), jobcomp.log.
# Nothing is written under /etc: a Slurm configured on this machine stays untouched.
#
# The cluster: ClusterName=abbench, SlurmctldHost=localhost, one node NodeName=localhost
# with the CPUs and RealMemory that `slurmd -C` finds now, one partition `debug`
# (Default=YES), select/cons_tres with CR_Core (memory is not a consumable, so jobs
# that do not ask for --mem still run side by side), task/none, and
# proctrack/linuxproc: proctrack/cgroup needs a writable cgroup hierarchy, which a
# container (gVisor here) does not give. Accounting: none (slurmdbd wants MySQL), so
# `sacct` answers "accounting storage is disabled"; instead jobcomp/filetxt writes one
# line per finished job or array task (state, exit code) to jobcomp.log, and
# MinJobAge=86400 keeps finished jobs in `scontrol show job` for a day.
# Ports: SlurmctldPort=$ABBENCH_SLURMCTLD_PORT (6817), SlurmdPort=$ABBENCH_SLURMD_PORT (6818).
#
# Must run as root (slurmd starts jobs as their users). No systemd: the daemons are
# started directly, niced (jobs inherit the niceness: the machine is shared).
set -euo pipefail

CACHE=${ABBENCH_CACHE:-$HOME/.cache/abbench}
DIR=${ABBENCH_SLURM_DIR:-$CACHE/slurm}
CTLD_PORT=${ABBENCH_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${ABBENCH_SLURMD_PORT:-6818}
CONF=$DIR/slurm.conf
SOCK=$DIR/munge/munge.socket.2
export SLURM_CONF=$CONF

say() { echo "slurm-local: $*" >&2; }
die() { say "error: $*"; exit 1; }

# pid of a daemon from its pid file, when that process is alive
alive() {  # PIDFILE
  local pid
  [[ -f $1 ]] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

answers() {  # the controller answers and the node is usable
  alive "$DIR/munged.pid" && alive "$DIR/slurmctld.pid" && alive "$DIR/slurmd.pid" &&
    timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP' &&
    timeout 10 sinfo -h -n localhost -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc|comp)'
}

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
     command -v sbatch >/dev/null && command -v munged >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || die "slurm-wlm/munge missing and no apt-get: install Slurm"
  say "installing slurm-wlm and munge (apt-get)"
  apt-get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurm-wlm munge >&2 || die "apt-get install slurm-wlm munge failed"
}

write_conf() {
  local node cpus mem
  node=$(slurmd -C | head -1)
  cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node")
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
  [[ -n $cpus && -n $mem ]] || die "cannot read CPUs/RealMemory from \`slurmd -C\`: $node"
  cat >"$CONF.tmp" <<EOF
# Written by scripts/slurm-local.sh: a single-node cluster on localhost.
ClusterName=abbench
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/d
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
MinJobAge=86400
KillWait=5
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  mv "$CONF.tmp" "$CONF"
}

start() {
  mkdir -p "$DIR/munge" "$DIR/ctld" "$DIR/d"
  chmod 700 "$DIR/munge"
  if [[ ! -s $DIR/munge.key ]]; then
    (umask 077; dd if=/dev/urandom bs=1 count=1024 of="$DIR/munge.key.tmp" status=none)
    mv "$DIR/munge.key.tmp" "$DIR/munge.key"
  fi
  chmod 400 "$DIR/munge.key"
  write_conf
  if ! alive "$DIR/munged.pid"; then
    rm -f "$SOCK" "$SOCK.lock"
    nice -n 10 munged --force --socket="$SOCK" --key-file="$DIR/munge.key" \
      --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" \
      --seed-file="$DIR/munged.seed" || { tail -5 "$DIR/munged.log" >&2; die "munged did not start"; }
  fi
  local i
  for i in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
  if ! alive "$DIR/slurmctld.pid"; then
    # -i: ignore a state save left by a killed slurmctld that no longer matches
    nice -n 10 slurmctld -f "$CONF" -i || { tail -20 "$DIR/slurmctld.log" >&2; die "slurmctld did not start"; }
  fi
  if ! alive "$DIR/slurmd.pid"; then
    nice -n 10 slurmd -f "$CONF" -N localhost || { tail -20 "$DIR/slurmd.log" >&2; die "slurmd did not start"; }
  fi
  for i in $(seq 150); do
    if answers; then return; fi
    # a node left DOWN/DRAIN by an earlier run comes back
    if [[ $i == 20 ]]; then scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true; fi
    sleep 0.2
  done
  say "the node did not become idle in 30 s; last log lines:"
  tail -15 "$DIR/slurmctld.log" "$DIR/slurmd.log" >&2 || true
  sinfo -N -l >&2 || true
  exit 1
}

stop_pidfile() {  # NAME
  local f=$DIR/$1.pid pid i
  if alive "$f"; then
    pid=$(cat "$f")
    kill "$pid"
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then say "$1 ($pid) ignored SIGTERM: SIGKILL"; kill -9 "$pid" || true; fi
  fi
  rm -f "$f"
}

down() {
  local i
  if alive "$DIR/slurmctld.pid" && [[ -f $CONF ]]; then
    scancel --quiet --partition=debug 2>/dev/null || true
    for i in $(seq 100); do
      [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  stop_pidfile slurmd
  stop_pidfile slurmctld
  stop_pidfile munged
  rm -f "$SOCK" "$SOCK.lock"
}

case "${1:-}" in
  up)
    [[ $(id -u) == 0 ]] || die "must run as root (slurmd starts jobs as their users)"
    if [[ -f $CONF ]] && command -v scontrol >/dev/null && answers; then
      echo "SLURM_CONF=$CONF"; exit 0
    fi
    install
    start
    echo "SLURM_CONF=$CONF"
    ;;
  down)
    down
    ;;
  status)
    if [[ -f $CONF ]] && command -v scontrol >/dev/null && answers; then
      sinfo >&2; squeue >&2
      echo "SLURM_CONF=$CONF"
    else
      for d in munged slurmctld slurmd; do
        if alive "$DIR/$d.pid"; then say "$d running"; else say "$d not running"; fi
      done
      exit 3
    fi
    ;;
  *)
    echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
