#!/usr/bin/env bash
# Many study runs at once on one GPU (each `project/scripts/study.py run --workers 0` is one process
# that trains, then scores with `spacy_crossner evaluate`, all with --gpu-id 0), up to WORKERS at
# a time, until DEADLINE seconds have passed; a run that finishes writes its JSON into RESULTS,
# one cut off by the deadline writes nothing (rerun it: finished runs are skipped).
#
#   bash benchmarks/gpu_study.sh CORPUS RAW RESULTS WORKERS DEADLINE RUNS_FILE [study.py options]
#
# RUNS_FILE: one run a line, "METHOD DOMAIN SEED" (features minilm), e.g. "trf_target music 777".
# Logs: RESULTS/logs/METHOD-DOMAIN-sSEED.log. One work folder for all, $TMPDIR (or /tmp)/gpu_study:
# runs that start from the same model (a seed's stage 1, a domain's DAPT encoder) share it, the
# first trains it and the others wait (study.py's lock); list those runs early, so that they do
# not wait beside a deadline.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 6 ]; then
    sed -n 2,14p "$0"; exit 2
fi
corpus=$1 raw=$2 results=$3 workers=$4 deadline=$5 runs=$6
shift 6
[ -f "$runs" ] || { echo "RUNS_FILE $runs does not exist"; exit 2; }
mkdir -p "$results/logs"
work=${TMPDIR:-/tmp}/gpu_study
grep -v '^\s*\(#\|$\)' "$runs" | timeout --kill-after=10 "$deadline" xargs -P "$workers" -L 1 \
    bash -c 'python3 project/scripts/study.py run --workers 0 --features minilm --methods "$0" --domains "$1" \
        --seeds "$2" --corpus "'"$corpus"'" --raw "'"$raw"'" --results "'"$results"'" \
        --workdir "'"$work"'" --gpu-id 0 --threads 1 --eval-frequency 100 \
        --patience 400 '"$*"' > "'"$results"'/logs/$0-$1-s$2.log" 2>&1; \
        echo "[gpu_study] $0 $1 $2 exit $? at $(date -u +%H:%M:%S)"'
echo "[gpu_study] done at $(date -u +%H:%M:%S): $(ls "$results"/*.json 2>/dev/null | wc -l) result(s) in $results"
