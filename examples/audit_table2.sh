#!/usr/bin/env bash
# The canary audit of GDPFed's FMNIST Table 2 plan (real Fashion-MNIST, 50 rounds, seed 0, seeded noise) for
# GDPFed+, DP-FedAvg and IDP-FedAvg-Sample, recorded into benchmarks/results/audit_fmnist.json for the docs.
# Needs: pip install torch==2.13.0 && pip install -e '.[train]'; apt-get install dataset-fashion-mnist
# A few minutes a run on 2 CPU cores. Runs already in OUT are refused unless OVERWRITE=1 replaces them.
set -euo pipefail
OUT=${OUT:-runs/audit-table2}
METHODS=${METHODS:-gdpfed+ dp-fedavg idp-fedavg-sample}
mkdir -p "$OUT"
hdp-plan solve --eps 0.5,1.5,3.0 --n 6000 --rounds 50 --q 0.02 --clip 1.5 --local-steps 5 --sparsity 0.7,0.8,0.9 \
  --methods all -o "$OUT/plan.json" ${OVERWRITE:+--overwrite} > /dev/null
for m in $METHODS; do
  hdp-plan train "$OUT/plan.json" --method "$m" --dataset fmnist --seed 0 --seeded-noise --audit \
    --out "$OUT/$m" ${OVERWRITE:+--overwrite}
done
python benchmarks/record_audit.py $(for m in $METHODS; do echo "$OUT/$m/metrics.json"; done) \
  --name audit_fmnist --title "Canary audit of the FMNIST Table 2 plan" --command "bash examples/audit_table2.sh"
