# budget.sh - sourced by check_gpt.sh and check_fp8.sh: the GPT at the
# accuracy budget (docs/TRAINING.md, "The GPT at the accuracy budget"),
# budget_train, which trains modes at it (with jobs.sh's each_at_once).
#
# budget_train MIXPREC OUT MODE...: each mode in a comparison of its own,
# `mixprec compare --precisions MODE --checkpoints --out OUT/MODE` with the
# budget's options, its console output in OUT/MODE.txt; JOBS (the CPU count)
# at a time, each with CPUs / JOBS threads (at least one), the costliest
# recipes first. A run's results do not depend on its thread count (a
# GEMM's sums, the reductions' order and the random streams are fixed per
# element, not per thread), and on 2 Zen 3 cores two one-thread runs side by
# side take 8-14% less time than the same two one after the other with two
# threads each (the GEMMs at this size spend less in OpenMP's barriers and
# more in their kernels). One line per mode as it ends; 1 when any failed
# (its reason on stderr). A caller's function budget_after MODE, if defined,
# runs in the mode's job once it trained (MIXPREC_THREADS its threads), its
# failure the job's. BUDGET_BESIDE: a command (for bash -c) that runs as one
# more job of the pool, ranked as the costliest modes, with THREADS and
# MIXPREC_THREADS set to the jobs' threads; its output in OUT/beside.txt,
# printed when it ends, its failure the pool's (`make check-budget` runs
# check-layers-quick so, in the cores that the budget's last runs leave idle).
. "$(dirname "${BASH_SOURCE[0]}")/jobs.sh"
budget=(--model gpt:4-4-128-128 --batch 16 --steps 1000 --lr 6e-3 --lr-schedule cosine --warmup 50
        --weight-decay 0.1 --betas 0.9,0.95 --clip 1 --seed 1)

budget_cost() { # MODE: a rank of its step time (Zen 3: nvfp4 1.5x bf16's, fp8-current 1.3x, ...)
    case $1 in
    nvfp4* | @beside) echo 4 ;;
    fp8-current*) echo 3 ;;
    mxfp8* | fp8-delayed*) echo 2 ;;
    *) echo 1 ;;
    esac
}

budget_train() { # MIXPREC OUT MODE...
    local m=$1 out=$2 cpus jobs threads
    shift 2
    cpus=$(nproc 2> /dev/null || echo 1)
    jobs=${JOBS:-$cpus}
    [ "$jobs" -ge 1 ] || jobs=1
    threads=$((cpus / jobs > 0 ? cpus / jobs : 1))
    mkdir -p "$out"
    local order=() mode
    [ -z "${BUDGET_BESIDE:-}" ] || set -- "$@" @beside
    for mode in "$@"; do order+=("$(budget_cost "$mode") $mode"); done
    mapfile -t order < <(printf '%s\n' "${order[@]}" | sort -s -k1,1nr | cut -d' ' -f2-)
    one() { # MODE: an earlier run's files go first (a run that fails leaves none to be read as its)
        local t0=$SECONDS
        if [ "$1" = @beside ]; then
            if THREADS=$threads MIXPREC_THREADS=$threads bash -c "$BUDGET_BESIDE" > "$out/beside.txt" 2>&1; then
                cat "$out/beside.txt"
                echo "  beside: $BUDGET_BESIDE: done in $((SECONDS - t0)) s ($threads thread(s))"
                return 0
            fi
            cat "$out/beside.txt" >&2
            echo "budget: beside: $BUDGET_BESIDE failed after $((SECONDS - t0)) s" >&2
            return 1
        fi
        rm -rf "${out:?}/$1" "$out/$1.txt"
        if "$m" compare --precisions "$1" --checkpoints --threads "$threads" --out "$out/$1" "${budget[@]}" \
            > "$out/$1.txt" 2>&1; then
            echo "  $1: trained in $((SECONDS - t0)) s ($threads thread(s), $jobs at a time)"
        else
            echo "budget: $1 failed: $(tail -2 "$out/$1.txt")" >&2
            return 1
        fi
        if declare -F budget_after > /dev/null; then MIXPREC_THREADS=$threads budget_after "$1"; fi
    }
    each_at_once "$jobs" one "${order[@]}"
}
