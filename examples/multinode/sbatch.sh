#!/usr/bin/env bash
# SLURM: 2 nodes x 4 tasks; the coordinator runs on the first node of the allocation.
#   sbatch examples/multinode/sbatch.sh
#SBATCH --job-name=actorwire
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
set -euo pipefail
export TRAIN_SAMPLES=${TRAIN_SAMPLES:-65536}  # the coordinator's dataset and every worker's data
export ACTORWIRE_KEYS=${ACTORWIRE_KEYS:-$PWD/keys}   # made once with `actorwire keygen keys/`
export ACTORWIRE_PORT=${ACTORWIRE_PORT:-29555}
FIRST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# The run id defaults to SLURM_JOB_ID on both sides; workers find the coordinator from SLURM_NODELIST.
srun --nodes=1 --ntasks=1 -w "$FIRST" --overlap \
  actorwire coordinator --bind "tcp://0.0.0.0:$ACTORWIRE_PORT" --world-size "$SLURM_NTASKS" \
  --dataset-size "$TRAIN_SAMPLES" --epochs 3 &
coord=$!
srun python "$(dirname "$0")/train.py"
wait "$coord"  # the run's outcome is the coordinator's
