# jobs.sh - sourced by the long checks (budget.sh, check_stability.sh,
# check_layers.sh through budget.sh): each_at_once, which keeps the CPUs busy
# with independent jobs.
#
# each_at_once JOBS FUNC ITEM...: FUNC ITEM for every item in the background,
# JOBS at a time, the next starting as soon as one ends (before bash 5.1: as
# the oldest ends); 1 when any failed.
each_at_once() {
    local jobs=$1 fn=$2 pids=() failed=0 i item done_pid
    shift 2
    for item in "$@"; do
        if [ ${#pids[@]} -ge "$jobs" ]; then
            done_pid=${pids[0]}
            if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 501)); then
                wait -n -p done_pid "${pids[@]}" || failed=1
            else
                wait "$done_pid" || failed=1
            fi
            for i in "${!pids[@]}"; do [ "${pids[$i]}" != "$done_pid" ] || unset "pids[$i]"; done
            pids=("${pids[@]}")
        fi
        "$fn" "$item" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || failed=1; done
    return "$failed"
}
