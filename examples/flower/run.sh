#!/usr/bin/env bash
# Train a plan with `flwr run` on Flower's local simulation, offline. Usage (from the repository root):
#   examples/flower/run.sh [DATASET] [CLIENTS] [ROUNDS] [METHOD]      e.g. examples/flower/run.sh digits 30 3
# Defaults: fmnist, 6000 clients (the paper's n), 3 rounds, gdpfed+; Q=0.02 (the plan's q). Writes
# OUT/{plan,metrics}.json (OUT=runs/flower-example by default): a folder that holds a finished run is refused unless
# OVERWRITE=1. A quick check: Q=0.3 examples/flower/run.sh digits 30 3
# Public data split among virtual nodes charges no privacy ledger (the rule of every command): the example can run
# again. Ctrl-C stops every process it started and removes its temporary folders.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATASET=${1:-fmnist}; CLIENTS=${2:-6000}; ROUNDS=${3:-3}; METHOD=${4:-gdpfed+}
OUT=$(realpath -m "${OUT:-$ROOT/runs/flower-example}")
source "$ROOT/examples/flower-offline.sh"
refuse_earlier "$OUT"
mkdir -p "$OUT"
hdp-plan solve --eps 0.5,1.5,3.0 --n "$CLIENTS" --rounds 50 --q "${Q:-0.02}" --clip 1.5 --local-steps 5 \
  --sparsity 0.7,0.8,0.9 -o "$OUT/plan.json" ${OVERWRITE:+--overwrite} > /dev/null
flwr run "$ROOT/examples/flower" local --stream \
  --run-config "plan='$OUT/plan.json' dataset='$DATASET' clients=$CLIENTS rounds=$ROUNDS method='$METHOD' out='$OUT'" \
  --federation-config "num-supernodes=$CLIENTS client-resources-num-cpus=1" &
wait $!  # in the background: a signal reaches this script's trap at once
