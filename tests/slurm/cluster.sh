#!/usr/bin/env bash
# A two-node SLURM cluster on this machine, for the SLURM tests (root only; Debian/Ubuntu packages).
#
#   tests/slurm/cluster.sh install   # apt-get slurmctld, slurmd, slurm-client, munge (if missing)
#   tests/slurm/cluster.sh check     # can this machine run it? (one line on stderr and exit 3 where not)
#   tests/slurm/cluster.sh start     # network, /etc/slurm/slurm.conf, munged, slurmctld, two slurmd
#   tests/slurm/cluster.sh stop      # stop the daemons, every process on the nodes, remove the network
#   tests/slurm/cluster.sh kill-node zsdr-n2    # a node dies: its slurmd and everything running on it
#   tests/slurm/cluster.sh start-node zsdr-n2   # ... and comes back
#
# The two nodes, zsdr-n1 and zsdr-n2, are two network namespaces of this machine (ip netns), each with
# its own host name (a UTS namespace around its slurmd), its own address on a bridge (zsdr-br0,
# 10.213.77.0/24: the controller on .1, the nodes on .11 and .12, veth pairs into the bridge) and its
# own /etc/hosts naming every node (/etc/netns/<node>/hosts, bind-mounted over /etc/hosts in the node's
# mount namespace). slurm.conf gives each node's NodeAddr
# and NodeHostname: slurmctld reaches each slurmd at its node's address, and a job's processes on a
# node see that node's host name and address only, so an `srun` step over both nodes and the torchrun
# agents it starts talk to each other over the bridge as on a real cluster. The file system, munge's
# socket (one munged, one key) and the CPUs are shared: each node reports all of this machine's CPUs,
# so a job asking for them fits either node.
#
# slurm.conf goes to Slurm's default location because the executor plugin clears every SLURM_*
# variable (SLURM_CONF included) before the in-job srun. No systemd: the daemons run in the background
# and write their logs under /var/log/slurm. Job status: squeue, with finished jobs kept for MinJobAge
# seconds; `sacct -c` reads the job completion log (no slurmdbd). Every action is idempotent: start on
# a running cluster leaves it running, stop on a stopped one does nothing.
set -euo pipefail
ACTION=${1:?usage: cluster.sh install|check|start|stop|kill-node NODE|start-node NODE}
CONF=/etc/slurm/slurm.conf
LOGDIR=/var/log/slurm
STATE=/var/spool/slurm-zsdr
BRIDGE=zsdr-br0
NET=10.213.77
NODES=(zsdr-n1 zsdr-n2)
CTLD_PID=/run/slurmctld-zsdr.pid
MUNGE_PID=/run/munge/munged.pid

node_addr() {   # zsdr-n1 -> 10.213.77.11
    echo "$NET.$((10 + ${1##*-n}))"
}

install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null && command -v ip >/dev/null && command -v nsenter >/dev/null; then
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge iproute2 \
        util-linux >/dev/null
}

check() {
    local probe=zsdr-probe$$
    for tool in ip unshare nsenter slurmctld slurmd munged; do
        command -v "$tool" >/dev/null || { echo "two-node SLURM cluster: $tool is not installed" >&2; exit 3; }
    done
    if ! ip netns add "$probe" 2>/dev/null; then
        echo "two-node SLURM cluster: cannot create network namespaces here (ip netns add needs root and CAP_SYS_ADMIN)" >&2
        exit 3
    fi
    local ok=1
    nsenter --net="/run/netns/$probe" unshare --uts --mount true 2>/dev/null || ok=0
    ip link add zsdr-probe-br type bridge 2>/dev/null && ip link del zsdr-probe-br || ok=0
    ip netns del "$probe"
    if [ "$ok" = 0 ]; then
        echo "two-node SLURM cluster: cannot create bridges or UTS namespaces here" >&2
        exit 3
    fi
}

network() {
    ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
    [[ $(ip addr show dev "$BRIDGE") == *"inet $NET.1/"* ]] || ip addr add "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    local node addr
    for node in "${NODES[@]}"; do
        addr=$(node_addr "$node")
        [ -e "/run/netns/$node" ] || ip netns add "$node"
        if ! ip link show "$node-h" >/dev/null 2>&1; then
            ip link add "$node-h" type veth peer name "$node-c"
            ip link set "$node-c" netns "$node"
            ip link set "$node-h" master "$BRIDGE"
        fi
        ip link set "$node-h" up
        ip -n "$node" link set lo up
        [[ $(ip -n "$node" addr show dev "$node-c") == *"inet $addr/"* ]] \
            || ip -n "$node" addr add "$addr/24" dev "$node-c"
        ip -n "$node" link set "$node-c" up
        mkdir -p "/etc/netns/$node"
        {
            echo "127.0.0.1 localhost"
            echo "$NET.1 $(hostname -s)"
            for other in "${NODES[@]}"; do echo "$(node_addr "$other") $other"; done
        } > "/etc/netns/$node/hosts"
    done
}

conf() {
    local host cpus mem node
    host=$(hostname -s)
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
    mkdir -p /etc/slurm "$LOGDIR" "$STATE/ctld"
    # Jobs keep the memory their rules declare for the paper scale (tens of GB): the nodes report the
    # configured size (config_overrides) and memory is not a consumable, so they are scheduled here.
    # SlurmdTimeout: a node whose slurmd stops answering is DOWN after 10 s (a site's default is 300).
    cat > "$CONF.tmp" <<CONF
ClusterName=zsdr-test
SlurmctldHost=$host($NET.1)
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
SlurmdSpoolDir=$STATE/d-%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd-%n.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOGDIR/jobcomp.log
MinJobAge=7200
KillWait=30
SlurmdTimeout=10
MessageTimeout=5
CONF
    for node in "${NODES[@]}"; do
        echo "NodeName=$node NodeAddr=$(node_addr "$node") NodeHostname=$node CPUs=$cpus RealMemory=$((mem > 1024000 ? mem : 1024000)) State=UNKNOWN" >> "$CONF.tmp"
    done
    echo "PartitionName=main Nodes=$(IFS=,; echo "${NODES[*]}") Default=YES MaxTime=INFINITE State=UP" >> "$CONF.tmp"
    mv "$CONF.tmp" "$CONF"
}

alive() {   # a pid file whose process runs (a zombie, dead but not yet reaped, does not)
    local pid
    [ -s "$1" ] && pid=$(cat "$1") && [ -r "/proc/$pid/stat" ] \
        && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

start_node() {
    local node=$1
    mkdir -p "$STATE/d-$node"
    alive "/run/slurmd-$node.pid" && return 0
    # the node's own network, host name and /etc/hosts (its own mount namespace, as `ip netns exec` makes,
    # but keeping this machine's /sys: slurmd needs its cgroup file systems); slurmd finds its NodeName
    # from the host name
    nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private \
        sh -c "mount --bind /etc/netns/$node/hosts /etc/hosts && hostname $node && exec slurmd"
}

start() {
    network
    conf
    mkdir -p /run/munge /var/lib/munge /var/log/munge /etc/munge
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
        || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    munge -n </dev/null >/dev/null 2>&1 || runuser -u munge -- munged
    if ! alive "$CTLD_PID"; then
        # a fresh controller: no job of an earlier run comes back, job ids start again at 1
        [ ! -e "$LOGDIR/jobcomp.log" ] || mv "$LOGDIR/jobcomp.log" "$LOGDIR/jobcomp.log.old"
        slurmctld -c
    fi
    local node
    for node in "${NODES[@]}"; do start_node "$node"; done
    wait_idle "${NODES[@]}"
}

wait_idle() {   # every node named is idle
    local nodes idle
    nodes=$(IFS=,; echo "$*")
    for _ in $(seq 120); do
        idle=$(sinfo -h -N -t idle -n "$nodes" -o %N 2>/dev/null | sort -u | wc -l)
        if [ "$idle" = "$#" ]; then
            sinfo -N
            return 0
        fi
        sleep 0.5
    done
    echo "slurm did not come up ($idle of $# nodes idle); the logs end:" >&2
    tail -n 20 "$LOGDIR/slurmctld.log" "$LOGDIR"/slurmd-*.log >&2 || true
    return 1
}

kill_node() {   # everything running in the node's namespace: its slurmd, job steps and their processes
    local node=$1 pids
    [ -e "/run/netns/$node" ] || return 0
    for _ in 1 2 3; do
        pids=$(ip netns pids "$node" 2>/dev/null || true)
        [ -n "$pids" ] || break
        kill -9 $pids 2>/dev/null || true
        sleep 0.2
    done
    rm -f "/run/slurmd-$node.pid"
}

stop() {
    local node
    for node in "${NODES[@]}"; do kill_node "$node"; done
    if alive "$CTLD_PID"; then
        kill "$(cat "$CTLD_PID")" 2>/dev/null || true
        for _ in $(seq 50); do alive "$CTLD_PID" || break; sleep 0.1; done
    fi
    if alive "$MUNGE_PID"; then kill "$(cat "$MUNGE_PID")" 2>/dev/null || true; fi
    for node in "${NODES[@]}"; do
        ip link del "$node-h" 2>/dev/null || true
        ip netns del "$node" 2>/dev/null || true
        rm -rf "/etc/netns/$node"
    done
    ip link del "$BRIDGE" 2>/dev/null || true
}

case "$ACTION" in
    install|check|start|stop) "$ACTION" ;;
    kill-node) kill_node "${2:?usage: cluster.sh kill-node NODE}" ;;
    start-node) start_node "${2:?usage: cluster.sh start-node NODE}" ;;
    *) echo "usage: cluster.sh install|check|start|stop|kill-node NODE|start-node NODE" >&2; exit 2 ;;
esac
