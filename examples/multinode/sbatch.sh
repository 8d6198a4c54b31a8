#!/usr/bin/env bash
# SLURM: one worker per task; the coordinator runs on the first node of the allocation.
# Submit from the repository root (or from this folder), saying how many tasks:
#   sbatch --nodes=2 --ntasks-per-node=4 examples/multinode/sbatch.sh
#   sbatch --ntasks=3 examples/multinode/sbatch.sh          # one node, three workers
# Under sbatch, $0 is slurmd's copy of this script in its spool: the files are found from
# $SLURM_SUBMIT_DIR, where sbatch was run.
#SBATCH --job-name=actorwire
#SBATCH --time=00:30:00
set -euo pipefail
here=$(dirname "$0")
for dir in "${SLURM_SUBMIT_DIR:-}/examples/multinode" "${SLURM_SUBMIT_DIR:-}" "$here"; do
  if [ -f "$dir/train.py" ]; then train=${TRAIN_SCRIPT:-$dir/train.py}; break; fi
done
: "${train:?train.py not found under \$SLURM_SUBMIT_DIR ($SLURM_SUBMIT_DIR): submit from the repository root or set TRAIN_SCRIPT}"
export TRAIN_SAMPLES=${TRAIN_SAMPLES:-1400}  # the coordinator's dataset and every worker's data
export ACTORWIRE_KEYS=${ACTORWIRE_KEYS:-${SLURM_SUBMIT_DIR:-$PWD}/keys}   # made once with `actorwire keygen keys/`
export ACTORWIRE_PORT=${ACTORWIRE_PORT:-29555}
FIRST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
# The run id defaults to SLURM_JOB_ID on both sides; workers find the coordinator from SLURM_NODELIST.
srun --nodes=1 --ntasks=1 -w "$FIRST" --overlap \
  actorwire coordinator --bind "tcp://0.0.0.0:$ACTORWIRE_PORT" --world-size "$SLURM_NTASKS" \
  --dataset-size "$TRAIN_SAMPLES" --epochs "${EPOCHS:-3}" &
coord=$!
# A worker that dies fails its srun step; the survivors finish the run: its outcome is the coordinator's.
srun python "$train" || echo "sbatch.sh: a worker exited with an error; the coordinator says how the run ended" >&2
wait "$coord"
