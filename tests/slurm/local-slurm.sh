#!/usr/bin/env bash
# A single-node SLURM of our own for the tests: munged, slurmctld and slurmd, all under DIR.
#   tests/slurm/local-slurm.sh start DIR   # prints SLURM_CONF=DIR/slurm.conf once the node is idle
#   tests/slurm/local-slurm.sh stop DIR    # stops the three daemons (by their pid files)
# Needs Debian's slurm-wlm and munge:  apt-get install -y slurm-wlm munge
# Nothing outside DIR is written: its own munge key and socket, spool, state, logs and ports.
set -euo pipefail
cmd=${1:?usage: local-slurm.sh start|stop DIR}
dir=${2:?usage: local-slurm.sh start|stop DIR}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

stop() {
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munged.pid"; do
    if [ -s "$pidfile" ]; then
      pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    fi
  done
}

if [ "$cmd" = stop ]; then
  stop
  exit 0
fi
[ "$cmd" = start ] || { echo "local-slurm.sh: unknown command $cmd (start or stop)" >&2; exit 2; }
for tool in munged slurmctld slurmd sbatch; do
  command -v "$tool" >/dev/null || { echo "local-slurm.sh: $tool not found; install with: apt-get install -y slurm-wlm munge" >&2; exit 3; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
host=$(hostname -s)
# More CPUs than the machine has (config_overrides lets slurmd take them): a test's three workers
# and the coordinator's step fit on a 2-core machine.
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p "$dir/spool" "$dir/state" "$dir/log" "$dir/munge"
chmod 700 "$dir/munge"

# munge: a key and a socket of our own.
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" --pid-file="$dir/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed" --force

cat > "$dir/slurm.conf" <<CONF
ClusterName=actorwire-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -i -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$host"
for _ in $(seq 100); do
  if sinfo -h -o %t 2>/dev/null | grep -qx idle; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "local-slurm.sh: the node did not come up within 20 s; logs in $dir/log" >&2
sinfo >&2 || true
tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
stop
exit 1
