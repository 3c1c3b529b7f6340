#!/usr/bin/env bash
# A plan on Flower's deployment engine on this machine: a SuperLink and one SuperNode per client as separate
# processes, over TLS with node authentication, a run under the plan's trust model (secagg); every process
# stopped afterwards, by PID. Usage (from the repository root):
#   examples/deploy/run.sh [NODES] [ROUNDS]        e.g. examples/deploy/run.sh 9 2 (nine nodes or more: fewer
#   have no secure form, and solve says so)
# Writes runs/deploy-example/{plan.json,secagg}; the deployment's certificates, keys and logs go to
# runs/deploy-example/deployment, the nodes' state to runs/deploy-example/nodes (one SQLite file per client). Earlier
# results there are refused unless OVERWRITE=1 replaces them.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NODES=${1:-9}; ROUNDS=${2:-2}
OUT=${OUT:-$ROOT/runs/deploy-example}
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"
DIM=$(python -c "from hdp_planner_train.learning.models import make_model as m; print(sum(p.numel() for p in m('digits').parameters()))")
hdp-plan solve --eps 1,2,4 --n "$NODES" --rounds 10 --q 1.0 --clip 1.0 --methods gdpfed,gdpfed+ --trust secagg \
  --bits 16 --survivors 0.75 --model-dim "$DIM" --participations 8 -o "$OUT/plan.json" ${OVERWRITE:+--overwrite} \
  > /dev/null
hdp-plan deploy local "$OUT/plan.json" --nodes "$NODES" --rounds "$ROUNDS" --folder "$OUT/deployment" \
  --node-state "$OUT/nodes" --out "$OUT" ${OVERWRITE:+--overwrite} &
DEPLOY=$!  # in the background, so that Ctrl-C or SIGTERM reach it through this trap at once: it stops its processes
trap 'kill -TERM $DEPLOY 2>/dev/null; wait $DEPLOY; exit 130' INT TERM
wait $DEPLOY
