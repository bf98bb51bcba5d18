/* compare_state.h - a comparison under way, shared by the files of
 * mp_compare (not installed): compare.c (the modes, the table, the report,
 * summary.json), compare_reading.c (the reading in words) and compare_dir.c
 * (DIR written as a transaction). */
#ifndef MIXPREC_COMPARE_STATE_H
#define MIXPREC_COMPARE_STATE_H

#include <stdio.h>

#include "models.h"

typedef struct cmp cmp;

/* A comparison under way: where it prints, and its first failure. */
struct cmp {
    mp_run_io io;
    FILE *out;  /* io.out, or NULL */
    int writer; /* rank 0: writes DIR and prints the table */
    mp_status status;
    char msg[960];
    int nfailed; /* modes whose run failed (an early stop is no failure) */
    char failed[MP_COMPARE_MAX][64], failed_why[MP_COMPARE_MAX][512];
    const char *dir;  /* DIR */
    char stage[4200]; /* DIR/.partial, where the files are written before they replace DIR's */
    char lock[4200];  /* DIR/.partial/compare: its lock (mp_output_lock) is held while DIR is written */
    int made_dir;     /* DIR did not exist before */
};

/* A comparison writes its files into DIR/.partial and moves them into DIR
 * together once its report and summary are whole (commit). Its summary.json
 * says that mixprec wrote it (WRITTEN_BY) and names the files that came with
 * it: those alone are ever replaced or removed. The commit first renames
 * DIR/.partial/summary.json to DIR/.partial/.commit (from then on the
 * comparison is decided: .commit names the new files, in DIR or still in
 * DIR/.partial), moves the files, removes the old summary's files that the new
 * one does not name, and renames .commit to DIR/summary.json last. A
 * comparison cut anywhere in between leaves .commit, and the next comparison
 * into DIR completes it before it starts. What a mode writes, as suffixes of
 * its label: */
#define STAGE ".partial"
#define DECIDED ".commit"

#define WRITTEN_BY "mixprec compare"
extern const char *const mp_compare_mode_ext[]; /* ".csv", ".csv.partial", ".json", ".ckpt", ".ckpt.rejected", ".txt" */
enum {
    MODE_EXT = 6,
    MAX_FILES = MP_COMPARE_MAX * MODE_EXT + 1,
    LIST_MAX = MP_COMPARE_MAX * 64 + 1 /* --precisions: as many labels of up to 63 bytes, each with its comma */
};
typedef char file_name[80]; /* a file of DIR, by name */

/* DIR/NAMEEXT into out. */
static inline void path_of(char out[4200], const char *dir, const char *name, const char *ext) {
    snprintf(out, 4200, "%.4000s/%.63s%s", dir, name, ext);
}

/* compare.c: a failure, kept if it is the first, printed as "PREFIX: message"
 * on rank 0, with a pointer to the help when the spec cannot work (hint). */
mp_status mp_compare_say(cmp *c, mp_status st, int hint, const char *fmt, ...) MP_PRINTF(4, 5);
#define fail(c, st, ...) mp_compare_say(c, st, 0, __VA_ARGS__)
#define invalid(c, ...) mp_compare_say(c, MP_EINVAL, 1, __VA_ARGS__)

/* compare_reading.c */
/* The mode named name among runs, or NULL. */
const mp_run_result *mp_compare_find(const mp_compare_mode *runs, int n, const char *name);
/* Whether r is a language model's run (its row reports a validation loss), not a classifier's. */
int mp_compare_language(const mp_run_result *r);
/* "What each protection buys" as a console table. */
void mp_compare_print_ablation(FILE *out, const mp_report *rep, const mp_report_ablation *ab, int nab, int ref);
/* The plain-language reading, from the numbers, into out (cap bytes). */
void mp_compare_reading(char *out, size_t cap, const mp_compare_mode *runs, int n, const char *model,
                        const mp_report *rep, const mp_report_ablation *ab, int nab, int ref);

/* compare_dir.c: DIR written as a transaction (above) */
int mp_compare_staged_files(const cmp *x, const mp_compare_result *res, int report, file_name *names);
int mp_compare_keep_checkpoints(const cmp *x, const mp_compare_result *res, file_name *names, int *n, char *which,
                                size_t cap);
void mp_compare_discard(const cmp *x, const mp_compare_result *res, int nmodes);
mp_status mp_compare_commit(cmp *x, const mp_run_spec *base, const file_name *names, int n);
mp_status mp_compare_make_dirs(cmp *x, const mp_compare_spec *c, const mp_compare_result *res);
void mp_compare_release_dirs(cmp *x, int dir_too);

#endif
