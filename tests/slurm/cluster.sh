#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the SLURM tests (root only; Debian/Ubuntu packages).
#
#   tests/slurm/cluster.sh install   # apt-get slurmctld, slurmd, slurm-client, munge (if missing)
#   tests/slurm/cluster.sh start     # write /etc/slurm/slurm.conf, start munged, slurmctld, slurmd
#   tests/slurm/cluster.sh stop      # stop the three daemons
#
# slurm.conf goes to Slurm's default location because the executor plugin clears every SLURM_*
# variable (SLURM_CONF included) before the in-job srun. No systemd: the daemons run in the
# background and write their logs under /var/log/slurm. Job status: squeue, with finished jobs kept
# for MinJobAge seconds (no slurmdbd, so sacct has no database behind it).
set -euo pipefail
ACTION=${1:?usage: cluster.sh install|start|stop}
CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
STATE=/var/spool/slurm-zsdr

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
}

start() {
    local host cpus mem
    host=$(hostname -s)
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
    mkdir -p /etc/slurm "$LOGDIR" "$STATE/ctld" "$STATE/d" /run/munge /var/lib/munge /var/log/munge
    # Jobs keep the memory their rules declare for the paper scale (tens of GB): the node reports the
    # configured size (config_overrides) and memory is not a consumable, so they are scheduled here.
    cat > "$CONF" <<CONF
ClusterName=zsdr-test
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.log
MinJobAge=7200
KillWait=30
NodeName=$host CPUs=$cpus RealMemory=$((mem > 1024000 ? mem : 1024000)) State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
        || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    pgrep -x munged >/dev/null || runuser -u munge -- munged
    pgrep -x slurmctld >/dev/null || slurmctld
    pgrep -x slurmd >/dev/null || slurmd
    for _ in $(seq 60); do
        if sinfo -h -o %T 2>/dev/null | grep -qx idle; then
            sinfo
            return 0
        fi
        sleep 0.5
    done
    echo "slurm did not come up; slurmctld log:" >&2
    tail -n 20 "$LOGDIR/slurmctld.log" "$LOGDIR/slurmd.log" >&2 || true
    return 1
}

stop() {
    pkill -x slurmd || true
    pkill -x slurmctld || true
    pkill -x munged || true
}

"$ACTION"
