#!/usr/bin/env bash
# Plain ssh: a coordinator here, one worker per listed host, no launcher at all.
#   ./ssh.sh host1 host2 host3
set -euo pipefail
export TRAIN_SAMPLES=${TRAIN_SAMPLES:-1400}  # the coordinator's dataset and every worker's data
[ $# -ge 1 ] || { echo "usage: $0 HOST..." >&2; exit 2; }
HERE=${ACTORWIRE_HOST:-$(hostname -I | awk '{print $1}')}  # the address the hosts reach this one at
PORT=${ACTORWIRE_PORT:-29555}
RUN_ID=run-$$-$(date +%s)
KEYS=${ACTORWIRE_KEYS:-$PWD/keys}            # same directory on every host (copy it first)
ACTORWIRE_KEYS=$KEYS actorwire coordinator --bind "tcp://$HERE:$PORT" --run-id "$RUN_ID" \
  --world-size $# --dataset-size "$TRAIN_SAMPLES" --epochs 2 --join-timeout "${JOIN_TIMEOUT:-120}" &
coord=$!
rank=0
workers=()
for host in "$@"; do
  ssh "$host" "ACTORWIRE_KEYS=$KEYS ACTORWIRE_JOIN=tcp://$HERE:$PORT ACTORWIRE_RUN_ID=$RUN_ID \
    ACTORWIRE_RANK=$rank ACTORWIRE_WORLD_SIZE=$# TRAIN_SAMPLES=$TRAIN_SAMPLES python $PWD/examples/multinode/train.py" &
  workers+=($!)
  rank=$((rank + 1))
done
status=0
for pid in "${workers[@]}"; do wait "$pid" || status=1; done
wait "$coord" || status=1  # a failed worker or coordinator fails the script
exit $status
