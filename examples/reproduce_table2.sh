#!/usr/bin/env bash
# GDPFed Table 2 (Fashion-MNIST, one seed, CPU): plan the paper's setting (NOTES §6), then train each method.
# Needs: pip install torch==2.13.0 && pip install -e '.[train]'; apt-get install dataset-fashion-mnist
set -euo pipefail
OUT=${OUT:-runs/table2}
SEED=${SEED:-0}
METHODS=${METHODS:-"p-fedavg dp-fedavg gdpfed gdpfed-op gdpfed+"}
mkdir -p "$OUT"
hdp-plan solve --eps 0.5,1.5,3.0 --n 6000 --rounds 50 --q 0.02 --clip 1.5 --local-steps 5 \
  --sparsity 0.7,0.8,0.9 -o "$OUT/plan.json"
for m in $METHODS; do
  /usr/bin/time -f "$m wall %e s" hdp-plan train "$OUT/plan.json" --method "$m" --dataset fmnist \
    --seed "$SEED" --eval-every 5 --out "$OUT/$m" --plot
done
python - "$OUT" $METHODS <<'PY'
import json, sys
out = sys.argv[1]
for m in sys.argv[2:]:
    r = json.load(open(f"{out}/{m}/metrics.json"))
    eps = [e["epsilon_spent"] for e in r["epsilon_spent"]]
    print(f"{m:10s} acc {r['final_accuracy']:.2f}%  eps spent {eps}  "
          f"median round {r['round_seconds_median']:.2f}s  total {sum(r['round_seconds']):.0f}s")
PY
