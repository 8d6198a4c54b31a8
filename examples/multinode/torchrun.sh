#!/usr/bin/env bash
# Two hosts, 4 workers each, started by torchrun; the coordinator runs on the first host.
#   host0$ NODE_RANK=0 MASTER=host0 ./torchrun.sh
#   host1$ NODE_RANK=1 MASTER=host0 ./torchrun.sh
# Keys: run `actorwire keygen keys/` once and copy keys/ to both hosts.
set -euo pipefail
export TRAIN_SAMPLES=${TRAIN_SAMPLES:-1400}  # the coordinator's dataset and every worker's data
: "${MASTER:?set MASTER to the first host}" "${NODE_RANK:?set NODE_RANK}"
NNODES=${NNODES:-2}
PER_NODE=${PER_NODE:-4}
RUN_ID=${RUN_ID:-run-$(date +%Y%m%d)}
export ACTORWIRE_KEYS=${ACTORWIRE_KEYS:-$PWD/keys}
export ACTORWIRE_PORT=${ACTORWIRE_PORT:-29555}
export CHECKPOINT_DIR=${CHECKPOINT_DIR:-$PWD/checkpoints/$RUN_ID}  # shared by every host
MAX_RESTARTS=${MAX_RESTARTS:-1}
restart=()  # with no restarts a run that loses every worker ends at once
[ "$MAX_RESTARTS" = 0 ] || restart=(--restart-wait "${RESTART_WAIT:-60}")
coord=
if [ "$NODE_RANK" = 0 ]; then
  # torchrun stops every worker when one dies and starts them all again (--max-restarts): the
  # coordinator waits for them (--restart-wait) and they resume from the last checkpoint.
  actorwire coordinator --bind "tcp://0.0.0.0:$ACTORWIRE_PORT" --run-id "$RUN_ID" \
    --world-size $((NNODES * PER_NODE)) --dataset-size "$TRAIN_SAMPLES" --epochs "${EPOCHS:-3}" \
    --checkpoint-every 1 "${restart[@]}" &
  coord=$!
  trap '[ -z "$coord" ] || kill "$coord" 2>/dev/null || true' EXIT
fi
status=0
torchrun --nnodes "$NNODES" --nproc-per-node "$PER_NODE" --node-rank "$NODE_RANK" \
  --max-restarts "$MAX_RESTARTS" --master-addr "$MASTER" --master-port "${MASTER_PORT:-29500}" --rdzv-id "$RUN_ID" \
  "$(dirname "$0")/train.py" || status=$?
if [ -n "$coord" ]; then  # the run's outcome is the coordinator's: let it say how the run ended
  status=0; wait "$coord" || status=$?; coord=
fi
exit $status
