/* mixprec/compare.h - the same network trained in several precision modes
 * side by side, as `mixprec compare` and `mixprec demo` do and as the Python
 * package's mixprec.compare() does: one mp_run per mode, one after the other
 * in this process, each from the same spec but its mode; a summary table, the
 * ablation ("what each protection buys"), a reading of the numbers in words,
 * and a directory of files (docs/LOGS.md):
 *
 *   DIR/MODE.csv    each mode's log (per step)
 *   DIR/MODE.json   each mode's summary
 *   DIR/MODE.txt    each mode's output, as mixprec train prints it
 *   DIR/MODE.ckpt   each mode's checkpoint (with checkpoints)
 *   DIR/summary.json  the command, the files above, the ablation, the modes
 *                     that failed and every mode's summary
 *   DIR/report.html   the report (report.h)
 *
 * The files are written into DIR/.partial and moved into DIR together once
 * the report and summary.json are whole. summary.json says mixprec wrote it
 * ("written_by": "mixprec compare") and names the other files it came with
 * ("files"): a comparison replaces or removes only those (never one a run
 * option reads), and refuses a DIR where a file it would write is there
 * without such a summary naming it (MP_EIO, nothing written). The commit:
 * DIR/.partial/summary.json renamed to DIR/.partial/.commit (the comparison
 * is decided), the files moved into DIR, the files the replaced summary named
 * and this run did not write removed, .commit renamed to DIR/summary.json
 * last. DIR so holds the files of one run: the new one when a mode trained
 * and both were written, else the old one (a comparison killed before its
 * commit, or failing at those two files, leaves its files in DIR/.partial;
 * the next one replaces those it writes); one cut during its commit leaves
 * DIR/.partial/.commit, which names the new files (in DIR or still in
 * DIR/.partial), and the next comparison into DIR completes that commit
 * before it starts. One comparison writes DIR at a time: DIR/.partial/compare
 * is locked (mp_output_lock) from before the first mode to the end, and a
 * second is refused with MP_EIO naming DIR; the commit locks each file it
 * moves into DIR, and one that another process is writing (or that came
 * into DIR meanwhile and is not compare's) stops it: MP_EIO, DIR as it was,
 * the new files in DIR/.partial.
 */
#ifndef MIXPREC_COMPARE_H
#define MIXPREC_COMPARE_H

#include "run.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MP_COMPARE_MAX 12 /* modes in one comparison */

typedef struct mp_compare_spec {
    mp_run_spec run;        /* every mode's run; compare sets precision, log, summary and save per mode, so
                               those must be NULL, and dump_grads too (each mode would write over the last's) */
    const char *precisions; /* comma-separated modes with their switches: "fp32,fp16,fp16-dynamic,bf16" */
    const char *out;        /* the directory (created when missing) */
    int checkpoints;        /* also write DIR/MODE.ckpt */
    const char *command;    /* the command line the report and summary.json name (NULL: "mixprec compare") */
} mp_compare_spec;

typedef struct mp_compare_mode {
    char name[64]; /* the mode's label: "fp16-dynamic+master-weights=none" */
    mp_run_result result;
} mp_compare_mode;

typedef struct mp_compare_result {
    int n;       /* modes that ran (a mode that failed before its first step ends the comparison) */
    int invalid; /* the spec, or a mode's, could not work (MP_EINVAL from mp_compare or mp_run) */
    mp_compare_mode modes[MP_COMPARE_MAX];
    char *summary; /* DIR/summary.json's text; NULL on rank > 0 or when it could not be made */
    char *reading; /* the reading of the numbers in words, as printed */
} mp_compare_result;

/* Runs the comparison c describes, printing its progress, table and reading
 * to io->out (NULL: silent; each mode's own output goes to DIR/MODE.txt).
 * r (not NULL) is filled whatever the outcome; free it with
 * mp_compare_result_free in every case.
 *   MP_OK       every mode ran (a mode that stopped early, its loss scale at
 *               the floor, is a result: its warnings say so) and every file
 *               was written;
 *   MP_EINVAL   the spec cannot work (a mode, an option, a set field that
 *               compare sets; r->invalid set): nothing was run when it was
 *               found before the first mode, else the modes before it ran;
 *   another     a mode failed (one that failed before its first step ends
 *               the comparison; summary.json's "failed" names it), or a file
 *               could not be written; the others were still run and written
 *               as far as they could be (the message in mp_last_error()). */
mp_status mp_compare(const mp_compare_spec *c, const mp_run_io *io, mp_compare_result *r);

/* Frees what r holds and zeroes it; NULL is a no-op. */
void mp_compare_result_free(mp_compare_result *r);

/* The defaults of `mixprec compare` into *c: mp_run_defaults, the modes
 * fp32,fp16,fp16-dynamic,bf16, DIR mixprec-compare, an MLP's gradient
 * histogram every 10 steps (run.hist_every -1: 10 for the MLP, 0 else) and a
 * 300-byte sample of each final GPT, as the CLI does. */
void mp_compare_defaults(mp_compare_spec *c);

/* Sets an option of `mixprec compare` by its CLI name ("precisions", "out",
 * "checkpoints", or a run option: mp_run_option). MP_EINVAL + message as
 * mp_run_option does, and for the options compare sets itself ("precision",
 * "log", "summary", "save") or cannot use ("dump-grads"). */
mp_status mp_compare_option(mp_compare_spec *c, const char *name, const char *value);

/* For callers that cannot embed these structs (Python's ctypes). */
size_t mp_compare_spec_size(void);
size_t mp_compare_result_size(void);
const char *mp_compare_result_summary(const mp_compare_result *r); /* r->summary (NULL: none) */
const char *mp_compare_result_reading(const mp_compare_result *r); /* r->reading (NULL: none) */

#ifdef __cplusplus
}
#endif
#endif
