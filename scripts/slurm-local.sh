#!/usr/bin/env bash
# A real single-node Slurm cluster on localhost, from Debian's packages, for the
# tests of abbench/campaign/slurm.py and for trying campaigns on one machine.
#
#   scripts/slurm-local.sh up       install slurm-wlm + munge if missing (apt), write the
#                                   munge key and slurm.conf, start munged, slurmctld and
#                                   slurmd; wait until the node is idle. Twice is fine
#                                   (fast: it only checks that the daemons answer).
#   scripts/slurm-local.sh down     cancel this cluster's jobs, stop every daemon it
#                                   started (by the pids in their pid files)
#   scripts/slurm-local.sh status   exit 0 when the daemons run and the node answers,
#                                   3 otherwise; sinfo/squeue on stderr
#
# Timings here (2 cores, gVisor): first install 13 s (apt); `up` cold 1.2 s, warm 0.1 s;
# `down` 5.5 s. With ABBENCH_SLURM_ACCOUNTING=1: install 45 s more, first `up` 9 s
# (creating the database), cold 2 s, warm 0.1 s, `down` 11 s.
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
# container (gVisor here) does not give. Accounting: none by default (slurmdbd needs a
# MySQL server), so `sacct` answers "accounting storage is disabled". Instead
# MinJobAge=86400 keeps finished jobs in `scontrol show job` for a day, and
# jobcomp/filetxt writes one line per finished job record (state, exit code) to
# jobcomp.log, for people: abbench.campaign.slurm does not read it (a task cancelled
# while pending with others gets no line there either). Its wrapper's status files
# are what outlive Slurm's memory.
# ABBENCH_SLURM_ACCOUNTING=1 gives real accounting, so that `sacct` answers: it also
# installs mariadb-server and slurmdbd (about 100 MB), starts a private mariadbd
# (datadir mysql/, 127.0.0.1:$ABBENCH_SLURM_DB_PORT, default 6833) and slurmdbd (port
# $ABBENCH_SLURMDBD_PORT, 6819). `up` in the other mode than the running one restarts
# slurmctld and slurmd on the new slurm.conf (running jobs survive that).
# Ports: SlurmctldPort=$ABBENCH_SLURMCTLD_PORT (6817), SlurmdPort=$ABBENCH_SLURMD_PORT (6818).
#
# Must run as root (slurmd starts jobs as their users). No systemd: the daemons are
# started directly, niced (jobs inherit the niceness: the machine is shared).
set -euo pipefail

CACHE=${ABBENCH_CACHE:-$HOME/.cache/abbench}
DIR=${ABBENCH_SLURM_DIR:-$CACHE/slurm}
CTLD_PORT=${ABBENCH_SLURMCTLD_PORT:-6817}
SLURMD_PORT=${ABBENCH_SLURMD_PORT:-6818}
DBD_PORT=${ABBENCH_SLURMDBD_PORT:-6819}
DB_PORT=${ABBENCH_SLURM_DB_PORT:-6833}
ACCOUNTING=${ABBENCH_SLURM_ACCOUNTING:-0}
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

daemons() {  # those this mode runs, in start order
  if [[ $ACCOUNTING == 1 ]]; then echo munged mariadbd slurmdbd slurmctld slurmd
  else echo munged slurmctld slurmd; fi
}

answers() {  # this mode's daemons run, the controller answers, the node is usable
  local d want=none
  for d in $(daemons); do alive "$DIR/$d.pid" || return 1; done
  [[ $ACCOUNTING == 1 ]] && want=slurmdbd
  grep -q "^AccountingStorageType=accounting_storage/$want\$" "$CONF" &&
    timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP' &&
    timeout 10 sinfo -h -n localhost -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc|comp)'
}

. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"  # apt_get: one apt-get at a time

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
     command -v sbatch >/dev/null && command -v munged >/dev/null; then
    return
  fi
  command -v apt-get >/dev/null || die "slurm-wlm/munge missing and no apt-get: install Slurm"
  say "installing slurm-wlm and munge (apt-get)"
  apt_get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends \
    slurm-wlm munge >&2 || die "apt-get install slurm-wlm munge failed"
}

install_accounting() {
  if command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null &&
     compgen -G "/usr/lib/*/slurm-wlm/accounting_storage_mysql.so" >/dev/null; then
    return
  fi
  say "installing slurmdbd and mariadb-server (apt-get)"
  apt_get update -qq >&2 || die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends \
    slurmdbd mariadb-server >&2 || die "apt-get install slurmdbd mariadb-server failed"
}

sql() { mariadb --no-defaults -S "$DIR/mysql.sock" -u root "$@"; }

start_accounting() {  # mariadbd, its user for slurmdbd, slurmdbd
  local i pass
  if [[ ! -d $DIR/mysql/mysql ]]; then
    rm -rf "${DIR:?}/mysql"
    mariadb-install-db --no-defaults --datadir="$DIR/mysql" --user=root \
      --auth-root-authentication-method=socket --skip-test-db >"$DIR/mariadb-install.log" 2>&1 ||
      { tail -5 "$DIR/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
  fi
  if ! alive "$DIR/mariadbd.pid"; then
    rm -f "$DIR/mysql.sock"
    nice -n 10 mariadbd --no-defaults --datadir="$DIR/mysql" --user=root \
      --socket="$DIR/mysql.sock" --bind-address=127.0.0.1 --port="$DB_PORT" \
      --pid-file="$DIR/mariadbd.pid" --log-error="$DIR/mariadbd.log" \
      --innodb-buffer-pool-size=64M --skip-name-resolve </dev/null >/dev/null 2>&1 &
    local until=$((SECONDS + 60))
    while ((SECONDS < until)); do
      sql -e 'select 1' >/dev/null 2>&1 && break
      sleep 0.2
    done
  fi
  [[ -s $DIR/db.pass ]] || (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$DIR/db.pass")
  pass=$(cat "$DIR/db.pass")
  sql -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
          GRANT ALL ON abbench_slurm_acct.* TO 'slurm'@'127.0.0.1';" >&2 ||
    { tail -5 "$DIR/mariadbd.log" >&2; die "mariadbd did not start, or refused the slurm user"; }
  (umask 077; printf '%s\n' \
    "# Written by scripts/slurm-local.sh (ABBENCH_SLURM_ACCOUNTING=1)." \
    "AuthType=auth/munge" "AuthInfo=socket=$SOCK" "DbdHost=localhost" "DbdPort=$DBD_PORT" \
    "SlurmUser=root" "PidFile=$DIR/slurmdbd.pid" "LogFile=$DIR/slurmdbd.log" \
    "StorageType=accounting_storage/mysql" "StorageHost=127.0.0.1" "StoragePort=$DB_PORT" \
    "StorageUser=slurm" "StoragePass=$pass" "StorageLoc=abbench_slurm_acct" \
    >"$DIR/slurmdbd.conf")
  if ! alive "$DIR/slurmdbd.pid"; then
    nice -n 10 slurmdbd || { tail -20 "$DIR/slurmdbd.log" >&2; die "slurmdbd did not start"; }
  fi
  local until=$((SECONDS + 30))  # (AccountingStoragePass: the munge socket for slurmdbd)
  while ((SECONDS < until)); do
    timeout 10 sacctmgr -n list cluster >/dev/null 2>&1 && return
    sleep 0.2
  done
  tail -5 "$DIR/slurmdbd.log" >&2
  timeout 10 sacctmgr -n list cluster >&2 || true
  die "slurmdbd does not answer sacctmgr in 30 s"
}

write_conf() {
  local node cpus mem
  node=$(slurmd -C | head -1)
  cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node")
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
  [[ -n $cpus && -n $mem ]] || die "cannot read CPUs/RealMemory from \`slurmd -C\`: $node"
  local accounting=AccountingStorageType=accounting_storage/none
  if [[ $ACCOUNTING == 1 ]]; then
    accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStoragePass=$SOCK"
  fi
  cat >"$CONF.new" <<EOF
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
$accounting
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
MinJobAge=86400
KillWait=5
SchedulerParameters=sched_interval=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
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
  if ! cmp -s "$CONF.new" "$CONF" && alive "$DIR/slurmctld.pid"; then
    say "restarting slurmctld and slurmd on a new slurm.conf"
    stop_pidfile slurmd
    stop_pidfile slurmctld
  fi
  mv "$CONF.new" "$CONF"
  if [[ $ACCOUNTING != 1 ]]; then stop_pidfile slurmdbd; stop_pidfile mariadbd; fi
  if ! alive "$DIR/munged.pid"; then
    rm -f "$SOCK" "$SOCK.lock"
    nice -n 10 munged --force --socket="$SOCK" --key-file="$DIR/munge.key" \
      --pid-file="$DIR/munged.pid" --log-file="$DIR/munged.log" \
      --seed-file="$DIR/munged.seed" || { tail -5 "$DIR/munged.log" >&2; die "munged did not start"; }
  fi
  local i
  for i in $(seq 50); do [[ -S $SOCK ]] && break; sleep 0.1; done
  if [[ $ACCOUNTING == 1 ]]; then start_accounting; fi
  if ! alive "$DIR/slurmctld.pid"; then
    # -i: ignore a state save left by a killed slurmctld that no longer matches
    nice -n 10 slurmctld -f "$CONF" -i || { tail -20 "$DIR/slurmctld.log" >&2; die "slurmctld did not start"; }
  fi
  if ! alive "$DIR/slurmd.pid"; then
    nice -n 10 slurmd -f "$CONF" -N localhost || { tail -20 "$DIR/slurmd.log" >&2; die "slurmd did not start"; }
  fi
  local until=$((SECONDS + 30)) resumed=0
  while ((SECONDS < until)); do
    if answers; then return; fi
    # a node left DOWN/DRAIN by an earlier run comes back
    if ((resumed == 0 && SECONDS > until - 26)); then
      scontrol update NodeName=localhost State=RESUME >/dev/null 2>&1 || true
      resumed=1
    fi
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
  stop_pidfile slurmdbd
  stop_pidfile mariadbd
  stop_pidfile munged
  rm -f "$SOCK" "$SOCK.lock"
}

case "${1:-}" in
  up)
    [[ $(id -u) == 0 ]] || die "must run as root (slurmd starts jobs as their users)"
    # one `up` at a time (the test workers each call it): a second waits, then finds
    # the cluster answering; two at once would both create the accounting database.
    # flock runs this script again holding the lock, and closes it there (-o): the
    # daemons it starts must not inherit the lock, or no other `up` would get it.
    if [[ -z ${ABBENCH_SLURM_UP_LOCKED:-} ]]; then
      mkdir -p "$DIR"
      rc=0
      ABBENCH_SLURM_UP_LOCKED=1 flock -w 900 -E 75 -o "$DIR/up.lock" bash "$0" up || rc=$?
      [[ $rc != 75 ]] || die "another scripts/slurm-local.sh up held $DIR/up.lock for 15 min"
      exit "$rc"
    fi
    if [[ -f $CONF ]] && command -v scontrol >/dev/null && answers; then
      echo "SLURM_CONF=$CONF"; exit 0
    fi
    install
    if [[ $ACCOUNTING == 1 ]]; then install_accounting; fi
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
      for d in $(daemons); do
        if alive "$DIR/$d.pid"; then say "$d running"; else say "$d not running"; fi
      done
      exit 3
    fi
    ;;
  *)
    echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
