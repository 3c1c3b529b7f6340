#!/usr/bin/env bash
# Train a plan with `flwr run` on Flower's local simulation, offline, every group's round through SecAgg+.
# Usage (from the repository root): examples/flower-secagg/run.sh [DATASET] [CLIENTS] [ROUNDS]
# Defaults: digits, 120 clients, 10 rounds, GDPFed+ with budgets EPS=1,2,4 and Q=0.7, the plan's T = ROUNDS (the
# budgets are spent over the rounds that run). Writes OUT/{plan,metrics}.json (OUT=runs/flower-secagg-example by
# default): a folder that holds a finished run is refused unless OVERWRITE=1. Public data split among virtual nodes
# charges no privacy ledger (the rule of every command). Ctrl-C stops every process it started, temporary folders gone.
# Differential privacy needs clients: with 30 (10 a group) the noise outweighs every update and accuracy stays
# near chance (10%).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATASET=${1:-digits}; CLIENTS=${2:-120}; ROUNDS=${3:-10}
OUT=$(realpath -m "${OUT:-$ROOT/runs/flower-secagg-example}")
source "$ROOT/examples/flower-offline.sh"
refuse_earlier "$OUT"
mkdir -p "$OUT"
DIM=$(python -c "from hdp_planner_train.learning.models import model_dim; print(model_dim('$DATASET'))")
hdp-plan solve --eps "${EPS:-1,2,4}" --n "$CLIENTS" --rounds "$ROUNDS" --q "${Q:-0.7}" --clip 1.5 --local-steps 5 \
  --sparsity 0.7,0.8,0.9 --trust secagg --bits 16 --model-dim "$DIM" -o "$OUT/plan.json" ${OVERWRITE:+--overwrite} \
  > /dev/null
# Every node pins the plan it accepts (here through its environment) and counts its participations in its own folder.
export HDP_PLAN="$OUT/plan.json" HDP_PLAN_SHA256=$(sha256sum "$OUT/plan.json" | cut -d' ' -f1)
export HDP_STATE_DIR="$OUT/nodes"
flwr run "$ROOT/examples/flower-secagg" local --stream \
  --run-config "plan='$OUT/plan.json' dataset='$DATASET' clients=$CLIENTS rounds=$ROUNDS out='$OUT'" \
  --federation-config "num-supernodes=$CLIENTS client-resources-num-cpus=1" &
wait $!  # in the background: a signal reaches this script's trap at once
