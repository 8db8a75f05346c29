#!/usr/bin/env bash
# One lent GPU window (15 minutes of device time, an H200 or H100 with 16 cores), prepared so that
# each device call is one command of at most 10 minutes. From the repository root:
#
#   CORPUS=DIR RAW=DIR GENERAL=DIR bash benchmarks/gpu_session.sh train [DEADLINE_S]   # call 1
#   bash benchmarks/gpu_session.sh int8                                                # call 2, if time is left
#   DRY_RUN=1 CORPUS=c RAW=r GENERAL=g bash benchmarks/gpu_session.sh train             # print the commands
#
# CORPUS: `python -m spacy_crossner convert` output, <domain>/{train,dev,test}.spacy for
# conll2003 and the five CrossNER domains; RAW: <domain>.txt, each domain's train+dev text
# (`raw-text`), conll2003 included; GENERAL: the general corpora of issue 47 (../shared/data/raw:
# Wikipedia vital-article leads and the State of the Union addresses, JSONL). The packages must be
# importable first (benchmarks/results/gpu.md, "How it was run").
#
# train: what needs a GPU, in this order, 12 trainings at once (benchmarks/results/gpu.md: twelve
# MiniLM trainings at once kept an H200 at 98-99 % and finished in 5-8 minutes), each one
# `project/scripts/study.py run --workers 0` with the study's protocol (eval every 100 steps,
# patience 400, --gpu-id 0), until DEADLINE_S (default 510) seconds have passed; issue 47's screens
# (AI and music x seeds 555/666), each part against trf_finetune:
#   1. the teachers: trf_finetune on ai and music, seeds 555 and 666 (their stage 1, trf_source of
#      the seed on CoNLL-2003, is shared); the study has their results, these are for the models;
#      then the same recipe on the other three domains and seed 777 (issue 47's baseline and the
#      README's best pipeline over five domains x three seeds; lines done on CPU since are skipped);
#   1b. the combination of part 5's keepers: trf_finetune_shape (each token's shape beside the
#      uncased MiniLM, +0.38 ± 0.26 over the four AI and music pairs on CPU, -0.53 ± 0.35 on
#      literature; a stage 1 of its own per seed) on five domains x seeds 555/666/777, beside step 1
#      (all fifteen ran on CPU by 2026-11-30, +0.56 ± 0.87 over trf_finetune, within noise: skipped);
#   2. part 3, DAPT as long as the paper's: dapt_span with --dapt-epochs 15 (the study's is 2; the
#      bundled MiniLM's held-out masked-LM loss after 2 epochs is no lower than a context-free
#      model's, docs/dapt.md) on ai and music x 555/666, on the target's train+dev text plus the
#      100,000 tokens 4 reads (named ...-dapt_e15) (all four ran on CPU by 2026-11-30, +1.12 ± 0.85
#      over trf_target: skipped);
#   2b. row 10 on those 15-epoch encoders: dapt_finetune_span --dapt-epochs 15 (a CoNLL-2003 stage 1
#      on each domain's e15 encoder, then the fine-tune; against trf_finetune), same four runs;
#   3. part 5, row 10's second seed: trf_finetune_tuned on ai and music, s666 (ran on CPU
#      2026-11-30: skipped);
#   4. part 4, row 11: trf_selftrain on ai and music x 555/666, the 100,000 tokens selected from
#      GENERAL (select-corpus, lexical) labelled by the teacher of the same seed (each waits up to
#      15 min for its teacher), then trf_selftrain_o (O wherever the teacher found no entity);
#   5. part 3: dapt_span and dapt_token on ai and music x 555/666 on the target's train+dev text
#      plus the same selected text; their baseline trf_target is in the study already;
#   6. part 1: trf_finetune with --extra-sources others (CoNLL-2003 + the other four domains' train
#      sets; a stage 1 of its own per target) on ai and music, s555;
#   7. part 5, each change on its own: trf_finetune_warmup, trf_finetune_head_lr,
#      trf_finetune_layer_decay and trf_finetune_mentions on ai and music x 555/666, and
#      trf_finetune_shape (each token's shape beside the uncased MiniLM, a stage 1 of its own
#      per seed) (all ran on CPU by 2026-11-30: skipped);
#   8. DAPT then pre-train -> fine-tune (dapt_finetune_span: stage 1 on the DAPT encoder of 5) on
#      ai and music x 555/666, on the same selected text (all four in the study since 2026-11-28).
# Not listed: issue 47's combination on the other domains (benchmarks/cpu_queue.txt, block 9: row
# 10, dapt_finetune_span --dapt-epochs 15, on literature, politics and science x 3 seeds and music
# s777). Each is a chain of 4,700-6,900 training steps in the study's runs so far (DAPT 1,770-1,950,
# a CoNLL-2003 stage 1 that stopped at 1,900-3,400, a fine-tune that stopped at 1,000-1,600): at the
# 0.22 s a step of twelve target trainings at once (benchmarks/results/gpu.md) that is roughly 17-25
# min, more than a 600 s call, and a spaCy training does not resume: a stage 1 cut off by a call's
# end starts over at the next. It needs a loan with longer calls.
# 1's teachers write into rerun/ (models and checks, not new study results), the rest into study/
# (new results: copy them into project/study/results and run `python project/scripts/report.py
# study`); a study/ line whose result project/study/results holds already (`study.py plan` says done: run on CPU since)
# is skipped, so a copy never overwrites it. A run cut
# off by the deadline writes nothing; calling `train` again on the same warm machine runs only the
# runs without a result (the results and the work folder live in $TMPDIR/gpu_session between
# calls; a fresh machine starts over). Each call copies results, logs and the small records of the
# work folder (selection.json, DAPT and training logs, no models) to $OUT.
#
# int8 (issue 50, resolved): benchmarks/speed.py --int8 on the CPU cores of the device, on the
# trf_finetune pipelines the `train` call left in the work folder (s555), output in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
phase=${1:-}
deadline=${2:-510}
state=${TMPDIR:-/tmp}/gpu_session
work=$state/work
out=${OUT:-$state/out}
run=${DRY_RUN:+echo}

if [ "$phase" != train ] && [ "$phase" != int8 ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 2  # the header, however long
fi

copy_back() {
    mkdir -p "$out/work"
    cp -r "$state/rerun" "$state/study" "$state/logs" "$out/" 2>/dev/null
    # the records, not the models: training and DAPT logs, DAPT and selection summaries
    find "$work" -maxdepth 1 \( -name '*.log' -o -name '*.json' \) -exec cp {} "$out/work/" \; 2>/dev/null
    for sel in "$work"/raw-*; do
        [ -d "$sel" ] && mkdir -p "$out/work/${sel##*/}" && cp "$sel"/selection.json "$sel"/select.log "$out/work/${sel##*/}/" 2>/dev/null
    done
    return 0
}

if [ "$phase" = int8 ]; then
    $run python3 benchmarks/speed.py --int8 --study-workdir "$work" --methods trf_finetune --seeds 555 \
        --rounds 1 --output "$out/speed_int8.md" --json "$out/speed_int8.json"
    exit $?
fi

for var in CORPUS RAW GENERAL; do
    if [ -z "${!var:-}" ]; then echo "gpu_session.sh: set $var (see the top of $0)"; exit 2; fi
    if [ -z "$run" ] && [ ! -d "${!var}" ]; then echo "gpu_session.sh: $var=${!var} is not a folder"; exit 2; fi
done
mkdir -p "$state/rerun" "$state/study" "$state/logs" "$work"
selected="--raw-sizes 100000 --raw-source select:$GENERAL --raw-scorer lexical"
# RESULTS METHOD DOMAIN SEED [study.py options], in the order they start
runs=$state/runs.txt
{
    for seed in 555 666; do for domain in ai music; do echo "rerun trf_finetune $domain $seed"; done; done
    for seed in 555 666; do for domain in literature politics science; do echo "study trf_finetune $domain $seed"; done; done
    for domain in ai music literature politics science; do echo "study trf_finetune $domain 777"; done
    for seed in 555 666 777; do
        for domain in ai music literature politics science; do echo "study trf_finetune_shape $domain $seed"; done
    done
    for seed in 555 666; do for domain in ai music; do echo "study dapt_span $domain $seed $selected --dapt-epochs 15"; done; done
    for seed in 555 666; do for domain in ai music; do echo "study dapt_finetune_span $domain $seed $selected --dapt-epochs 15"; done; done
    for domain in ai music; do echo "study trf_finetune_tuned $domain 666"; done
    for seed in 555 666; do
        for domain in ai music; do echo "study trf_selftrain $domain $seed $selected --teacher-wait 900"; done
    done
    for seed in 555 666; do
        for domain in ai music; do echo "study trf_selftrain_o $domain $seed $selected --teacher-wait 900"; done
    done
    for seed in 555 666; do
        for domain in ai music; do
            for masking in span token; do echo "study dapt_$masking $domain $seed $selected"; done
        done
    done
    for domain in ai music; do echo "study trf_finetune $domain 555 --extra-sources others"; done
    for part in warmup head_lr layer_decay mentions shape; do
        for seed in 555 666; do for domain in ai music; do echo "study trf_finetune_$part $domain $seed"; done; done
    done
    for seed in 555 666; do for domain in ai music; do echo "study dapt_finetune_span $domain $seed $selected"; done; done
} > "$runs"

study="python3 project/scripts/study.py run --workers 0 --features minilm --corpus $CORPUS --raw $RAW \
--workdir $work --gpu-id 0 --threads 1 --eval-frequency 100 --patience 400"
plan="python3 project/scripts/study.py plan --features minilm --corpus $CORPUS --raw $RAW --workdir $work \
--results project/study/results"
if [ -n "$run" ]; then
    while read -r results method domain seed extra; do
        echo "$study --results $state/$results --methods $method --domains $domain --seeds $seed $extra"
    done < "$runs"
    exit 0
fi
echo "[gpu_session] $(wc -l < "$runs") runs, 12 at once, until ${deadline}s, from $(date -u +%H:%M:%S)"
timeout --kill-after=10 "$deadline" xargs -P 12 -L 1 bash -c '
    results=$0 method=$1 domain=$2 seed=$3; shift 3
    # a screen the repository has already (run on CPU since this list was written) is not run
    # again: its result would overwrite the one in project/study/results when copied in
    if [ "$results" = study ] && '"$plan"' --methods $method --domains $domain --seeds $seed "$@" 2>/dev/null \
            | grep -q "^done "; then
        echo "[gpu_session] $method $domain $seed $*: project/study/results has it, skipped"; exit 0
    fi
    # the same run with other options (--dapt-epochs) has a log of its own
    log='"$state"'/logs/$method-$domain-s$seed${1:+-$(echo "$*" | md5sum | cut -c1-6)}.log
    '"$study"' --results '"$state"'/$results --methods $method --domains $domain --seeds $seed "$@" > $log 2>&1
    echo "[gpu_session] $method $domain $seed exit $? at $(date -u +%H:%M:%S)"' < "$runs"
echo "[gpu_session] stopped at $(date -u +%H:%M:%S): $(ls "$state"/rerun/*.json 2>/dev/null | wc -l) rerun, \
$(ls "$state"/study/*.json 2>/dev/null | wc -l) study result(s)"
copy_back
