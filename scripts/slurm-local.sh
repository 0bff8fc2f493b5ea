#!/usr/bin/env bash
# slurm-local.sh: a private one-node Slurm cluster (munged + slurmctld + slurmd)
# that lives entirely in a caller-made directory, for tests that need sbatch.
#
#   scripts/slurm-local.sh up DIR     # last stdout line: export SLURM_CONF=DIR/slurm.conf
#   scripts/slurm-local.sh down DIR   # stops exactly the daemons `up` started in DIR
#
# `up` exits 3 with one "slurm-local: cannot start Slurm here: ..." line on stderr
# when this machine can't run Slurm (callers skip on 3); it stops what it started.
set -Eeuo pipefail

usage() { echo "usage: $0 up|down DIR" >&2; exit 2; }
[[ $# -eq 2 && ( $1 == up || $1 == down ) ]] || usage
[[ -d $2 ]] || { echo "slurm-local: $2 is not a directory" >&2; exit 2; }
DIR=$(cd "$2" && pwd -P)
CONF=$DIR/slurm.conf
MUNGE_SOCK=$DIR/munge/munge.sock
DAEMONS=(slurmd slurmctld munged) # stop order: clients of munged first

log() { echo "slurm-local: $*" >&2; }

# stat_fields PID: /proc/PID/stat from the state field on (state ppid pgrp sid ...).
stat_fields() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  echo "${stat##*) }"
}

# alive PID: running and not a zombie (orphaned daemons may be reaped late).
alive() {
  local st
  st=$(stat_fields "$1") || return 1
  [[ ${st%% *} != Z ]]
}

# pid_of NAME: the recorded pid, only if that process still belongs to DIR,
# so a recycled pid is never killed.
pid_of() {
  local pid
  pid=$(cat "$DIR/pids/$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && alive "$pid" || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$DIR/" || return 1
  echo "$pid"
}

stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do alive "$pid" || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do alive "$pid" || return 0; sleep 0.1; done
}

down() {
  local name pid p sid sids=" "
  # Cancel jobs while the controller still runs: slurmd leaves running job
  # steps alone on shutdown (by design), which would orphan them.
  if pid_of slurmctld >/dev/null && pid_of slurmd >/dev/null; then
    SLURM_CONF=$CONF timeout 10 scancel --partition=debug 2>/dev/null || true
    for ((p = 0; p < 50; p++)); do
      [[ -z $(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
      sleep 0.2
    done
  fi
  for name in "${DAEMONS[@]}"; do
    if pid=$(pid_of "$name"); then stop_pid "$pid"; fi
    rm -f "$DIR/pids/$name"
  done
  # If the controller was already gone there was no scancel, and slurmstepd
  # outlives slurmd: kill each of our steps' sessions (the step and its job).
  # Our steps are known by the SLURM_CONF they inherited from our slurmd.
  for p in /proc/[0-9]*; do
    [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
    grep -qzxF "SLURM_CONF=$CONF" "$p/environ" 2>/dev/null || continue
    read -r _ _ _ sid _ <<<"$(stat_fields "${p#/proc/}")" && sids+="$sid "
  done
  [[ $sids == " " ]] && return 0
  for p in /proc/[0-9]*; do
    read -r _ _ _ sid _ <<<"$(stat_fields "${p#/proc/}")"
    if [[ $sids == *" $sid "* ]]; then kill -KILL "${p#/proc/}" 2>/dev/null || true; fi
  done
  return 0
}

fail() {
  trap - ERR
  down
  log "cannot start Slurm here: $*"
  exit 3
}

# tail_log FILE: last lines of a daemon log, for the failure message's context.
tail_log() { [[ -s $1 ]] && { echo "--- tail $1" >&2; tail -n 15 "$1" >&2; }; return 0; }

# start NAME CMD...: run a daemon in the foreground of its own session so we
# know its pid at once and it survives the caller's terminal/process group.
start() {
  local name=$1; shift
  SLURM_CONF=$CONF setsid "$@" </dev/null >>"$DIR/log/$name.out" 2>&1 &
  echo $! >"$DIR/pids/$name"
}

# wait_for NAME SECONDS CHECK...: poll CHECK, giving up early if NAME died.
wait_for() {
  local name=$1 secs=$2 i; shift 2
  for ((i = 0; i < secs * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    pid_of "$name" >/dev/null || { tail_log "$DIR/log/$name.out"; tail_log "$DIR/log/$name.log"; fail "$name exited during startup (logs in $DIR/log)"; }
    sleep 0.2
  done
  tail_log "$DIR/log/$name.log"
  fail "$name not ready after ${secs}s (logs in $DIR/log)"
}

ensure_packages() {
  local missing=() c
  for c in sbatch sinfo squeue scancel scontrol slurmctld slurmd munged munge unmunge mungekey; do
    PATH=$PATH:/usr/sbin:/sbin command -v "$c" >/dev/null || missing+=("$c")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  [[ $EUID -eq 0 ]] || fail "missing ${missing[*]} and not root to install them"
  command -v apt-get >/dev/null || fail "missing ${missing[*]} and no apt-get"
  log "installing slurm and munge packages (missing: ${missing[*]})"
  # slurm-wlm is only a metapackage for these three; munge comes as their dependency anyway.
  { apt-get update &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      -o DPkg::Lock::Timeout=300 slurmctld slurmd slurm-client munge; } \
    >"$DIR/log/apt.log" 2>&1 || { tail_log "$DIR/log/apt.log"; fail "apt-get install slurmctld slurmd slurm-client munge failed"; }
}

# free_port_pair: a random P such that neither P nor P+1 is listening here.
# Kept below 32768 so it can't clash with Linux's ephemeral client ports.
free_port_pair() {
  local used=" " f l st p i
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $f ]] || continue
    while read -r _ l _ st _; do
      [[ $st == 0A ]] && used+="$((16#${l##*:})) "
    done < <(tail -n +2 "$f")
  done
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % 12000))
    [[ $used != *" $p "* && $used != *" $((p + 1)) "* ]] && { echo "$p"; return; }
  done
  return 1
}

write_conf() {
  local host=$1 port=$2 cpus mem
  cpus=$(nproc)
  # Leave headroom: slurmd drains a node whose RealMemory exceeds what it sees.
  mem=$(awk '/^MemTotal:/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
  : >"$DIR/plugstack.conf" # so the system's /etc/slurm/plugstack.conf is not read
  cat >"$CONF" <<EOF
# Private one-node cluster made by scripts/slurm-local.sh; everything is under $DIR.
ClusterName=local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
PlugStackConfig=$DIR/plugstack.conf
# Don't rely on cgroups (often unusable in containers/CI): track processes by
# parentage and bind nothing, so no cgroup.conf is needed either.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
# CR_CPU (not CR_Core) so array tasks share hyperthreaded cores one CPU each.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# Schedule at submit time: the default 3 s batch delay makes a tiny array take
# ~10 s under sbatch --wait (whose poll backs off to 10 s) instead of ~2 s.
SchedulerParameters=batch_sched_delay=0
# Trust the CPUs/RealMemory below even if slurmd reads the topology differently.
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

node_idle() { [[ $(sinfo -h -N -o %T) == idle ]]; }
job_state() { scontrol -o show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_ended() { [[ ! $(job_state "$1") =~ ^(PENDING|CONFIGURING|RUNNING|COMPLETING)$ ]]; }
munge_ok() { munge -n -S "$MUNGE_SOCK" | unmunge -S "$MUNGE_SOCK"; }

up() {
  local host port jid
  trap 'fail "unexpected error at line $LINENO: $BASH_COMMAND"' ERR
  export PATH=$PATH:/usr/sbin:/sbin SLURM_CONF=$CONF
  # Refuse (without stopping anything) rather than start a second set in DIR.
  for host in "${DAEMONS[@]}"; do
    if pid_of "$host" >/dev/null; then log "$host already running for $DIR; run down first"; exit 2; fi
  done
  [[ $EUID -eq 0 ]] || fail "must run as root (SlurmUser=root)"
  mkdir -p "$DIR"/{log,pids,run,state,spool}
  cd "$DIR" # daemons keep their cwd; don't pin the caller's
  ensure_packages
  # Unix socket paths (munge's, slurmd's step sockets) must fit in 108 bytes.
  ((${#DIR} <= 70)) || fail "DIR path too long for unix sockets (${#DIR} > 70 chars): $DIR"
  host=$(hostname -s 2>/dev/null || uname -n)
  host=${host%%.*}
  port=$(free_port_pair) || fail "no free TCP port pair found"
  write_conf "$host" "$port"

  # munged's permission checks assume a multi-user host (e.g. it wants the socket
  # dir's ancestors executable by all, which mktemp -d's 0700 is not). Only root
  # uses this cluster, so keep the key private and turn those checks into
  # warnings with --force instead of touching the caller's DIR mode.
  install -d -m 0700 "$DIR/munge"
  mungekey -c -b 1024 -k "$DIR/munge/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 status=none
  chmod 0400 "$DIR/munge/munge.key"
  start munged munged -F --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCK" \
    --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed"
  wait_for munged 10 munge_ok

  # -i: never refuse to start over unreadable state files; DIR's state is disposable.
  start slurmctld slurmctld -D -i -f "$CONF"
  wait_for slurmctld 30 scontrol ping
  start slurmd slurmd -D -f "$CONF" -N "$host"
  wait_for slurmd 60 node_idle

  # One real job proves credentials, slurmstepd and the spool work (callers
  # skip instead of hanging), and sits out slurmctld's few-second scheduling
  # pause after startup here rather than in the caller's first sbatch --wait.
  jid=$(sbatch --parsable --job-name=slurm-local-check --output=/dev/null --wrap true) ||
    fail "sbatch of a check job failed"
  wait_for slurmd 30 job_ended "$jid"
  [[ $(job_state "$jid") == COMPLETED ]] || { tail_log "$DIR/log/slurmd.log"; fail "check job ended $(job_state "$jid")"; }
  trap - ERR
  log "up in $DIR (slurmctld port $port, slurmd port $((port + 1)))"
  echo "export SLURM_CONF=$CONF"
}

"$1"
