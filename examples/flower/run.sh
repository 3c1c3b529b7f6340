#!/usr/bin/env bash
# Train a plan with `flwr run` on Flower's local simulation, offline. Usage (from the repository root):
#   examples/flower/run.sh [DATASET] [CLIENTS] [ROUNDS] [METHOD]      e.g. examples/flower/run.sh digits 30 3
# Defaults: fmnist, 6000 clients (the paper's n), 3 rounds, gdpfed+; Q=0.02 (the plan's q). Writes
# runs/flower-example/{plan,metrics}.json. A quick check: Q=0.3 examples/flower/run.sh digits 30 3
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DATASET=${1:-fmnist}; CLIENTS=${2:-6000}; ROUNDS=${3:-3}; METHOD=${4:-gdpfed+}
OUT=${OUT:-$ROOT/runs/flower-example}
source "$ROOT/examples/flower-offline.sh"
mkdir -p "$OUT"
hdp-plan solve --eps 0.5,1.5,3.0 --n "$CLIENTS" --rounds 50 --q "${Q:-0.02}" --clip 1.5 --local-steps 5 \
  --sparsity 0.7,0.8,0.9 -o "$OUT/plan.json" > /dev/null
# Public data split among virtual nodes: no one's lifetime budget to charge, so the example can run again (a
# deployment's ServerApp charges its privacy ledger: leave HDP_PLANNER_LEDGER unset there).
export HDP_PLANNER_LEDGER=none
flwr run "$ROOT/examples/flower" local --stream \
  --run-config "plan='$OUT/plan.json' dataset='$DATASET' clients=$CLIENTS rounds=$ROUNDS method='$METHOD' out='$OUT'" \
  --federation-config "num-supernodes=$CLIENTS client-resources-num-cpus=1"
