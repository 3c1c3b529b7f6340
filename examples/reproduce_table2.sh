#!/usr/bin/env bash
# GDPFed Table 2 on real Fashion-MNIST (CPU): the paper's plan (ε = 0.5, 1.5, 3; n = 6000; T = 50;
# q = 0.02; C = 1.5; τ = 5; k/d = 0.7, 0.8, 0.9), every method over SEEDS seeds, with hdp-plan compare.
# Needs: pip install torch==2.13.0 && pip install -e '.[train]'; apt-get install dataset-fashion-mnist
# About 30-60 s a run on 2 CPU cores: 27 runs, 15-25 minutes. Results: $OUT/results.csv, $OUT/comparison.png.
set -euo pipefail
OUT=${OUT:-runs/table2}
SEEDS=${SEEDS:-3}
METHODS=${METHODS:-p-fedavg,dp-fedavg,gdpfed,gdpfed-op,gdpfed+,pfa,idp-fedavg-sample,idp-fedavg-scale,time-adaptive}
MODEL=${MODEL:-cnn}  # cnn2-paper: McMahan et al. 2017's CNN (d = 1,663,370), the paper's scale (a GPU is advised)
hdp-plan compare --dataset fmnist --model "$MODEL" --methods "$METHODS" --seeds "$SEEDS" --out "$OUT" \
  --eps 0.5,1.5,3.0 --n 6000 --rounds 50 --q 0.02 --clip 1.5 --local-steps 5 --sparsity 0.7,0.8,0.9 --resume
