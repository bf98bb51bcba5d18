/* compare_dir.c - a comparison's output directory, written as a
 * transaction: the files staged in DIR/.partial, decided by one rename, moved
 * into DIR, a cut commit completed by the next comparison; never a file that
 * mixprec did not write replaced (compare_state.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "compare_state.h"

/* A name that compare could have written in DIR (summary.json's "files"): no
 * directory, no dot file, report.html or a mode's file by its suffix. */
static int plain_name(const char *name) {
    const size_t len = strlen(name);
    if (!len || name[0] == '.' || strchr(name, '/') || len >= sizeof(file_name)) return 0;
    if (!strcmp(name, "report.html")) return 1;
    for (int e = 0; e < MODE_EXT; e++) {
        const size_t k = strlen(mp_compare_mode_ext[e]);
        if (len > k && !strcmp(name + len - k, mp_compare_mode_ext[e])) return 1;
    }
    return 0;
}

/* The files a summary.json at path names, when it is a regular file that
 * mixprec compare wrote (its "written_by"); -1 when there is a file there
 * that is not such a summary, 0 (no files) when there is none. */
static int manifest_files(const char *path, file_name *names, int cap) {
    struct stat st;
    if (lstat(path, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode)) return -1;
    uint8_t *text = NULL; /* read as every input is (a file swapped for a FIFO meanwhile is refused) */
    size_t size = 0;
    int n = 0;
    if (mp_read_file(NULL, path, (size_t)1 << 28, &text, &size) == MP_OK) {
        cJSON *j = cJSON_Parse((const char *)text);
        const cJSON *e, *fl = cJSON_GetObjectItemCaseSensitive(j, "files");
        const cJSON *by = cJSON_GetObjectItemCaseSensitive(j, "written_by");
        if (!cJSON_IsString(by) || strcmp(by->valuestring, WRITTEN_BY) != 0) n = -1;
        else
            cJSON_ArrayForEach(e, fl) if (n < cap && cJSON_IsString(e) && plain_name(e->valuestring))
                snprintf(names[n++], sizeof names[0], "%s", e->valuestring);
        cJSON_Delete(j);
    } else n = -1;
    free(text);
    return n;
}

/* The files DIR's summary.json names (none when it is not mixprec's). */
static int old_files(const char *dir, file_name *names, int cap) {
    char path[4200];
    path_of(path, dir, "summary", ".json");
    const int n = manifest_files(path, names, cap);
    return n > 0 ? n : 0;
}

/* The files this comparison left in DIR/.partial, by name: each mode's that
 * ran, then report.html when it was written. */
int mp_compare_staged_files(const cmp *x, const mp_compare_result *res, int report, file_name *names) {
    int n = 0;
    for (int r = 0; r < res->n; r++)
        for (int e = 0; e < MODE_EXT; e++) {
            char path[4200];
            struct stat st;
            path_of(path, x->stage, res->modes[r].name, mp_compare_mode_ext[e]);
            if (!strcmp(mp_compare_mode_ext[e],
                        ".csv.partial")) { /* the run's own PATH.partial.PID: its rows, by DIR's name */
                char own[4300];
                snprintf(own, sizeof own, "%s.%ld", path, (long)getpid());
                if (lstat(own, &st) == 0 && S_ISREG(st.st_mode)) rename(own, path);
            }
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode))
                snprintf(names[n++], sizeof names[0], "%.63s%s", res->modes[r].name, mp_compare_mode_ext[e]);
        }
    if (report) snprintf(names[n++], sizeof names[0], "report.html");
    return n;
}

/* The modes whose run ended worse (their state staged as MODE.ckpt.rejected,
 * no MODE.ckpt): an earlier comparison's MODE.ckpt in DIR stays, named by the
 * new summary too, so that the commit neither replaces nor removes it.
 * Returns how many modes ended worse, with their names in `which`. */
int mp_compare_keep_checkpoints(const cmp *x, const mp_compare_result *res, file_name *names, int *n, char *which,
                                size_t cap) {
    file_name old[MAX_FILES];
    const int nold = old_files(x->dir, old, MAX_FILES);
    int worse = 0;
    which[0] = 0;
    for (int r = 0; r < res->n; r++) {
        char ckpt[80], rej[96];
        snprintf(ckpt, sizeof ckpt, "%.63s.ckpt", res->modes[r].name);
        snprintf(rej, sizeof rej, "%s.rejected", ckpt);
        int has_rej = 0, has_ckpt = 0, had = 0;
        for (int i = 0; i < *n; i++) has_rej |= !strcmp(names[i], rej), has_ckpt |= !strcmp(names[i], ckpt);
        if (!has_rej || has_ckpt) continue;
        for (int k = 0; k < nold; k++) had |= !strcmp(old[k], ckpt);
        if (had && *n < MAX_FILES) snprintf(names[(*n)++], sizeof names[0], "%s", ckpt);
        const size_t len = strlen(which);
        snprintf(which + len, cap - len, "%s%s", worse++ ? ", " : "", res->modes[r].name);
    }
    return worse;
}

/* Removes the comparison's files from DIR/.partial (each mode of the list's,
 * its log's partial files that this process or a dead one left, report.html,
 * summary.json): only names that compare writes there, in its own directory. */
void mp_compare_discard(const cmp *x, const mp_compare_result *res, int nmodes) {
    char path[4300];
    for (int r = 0; r < nmodes; r++) {
        for (int e = 0; e < MODE_EXT; e++)
            path_of(path, x->stage, res->modes[r].name, mp_compare_mode_ext[e]), unlink(path);
        path_of(path, x->stage, res->modes[r].name, ".csv.partial");
        snprintf(path + strlen(path), sizeof path - strlen(path), ".%ld", (long)getpid()), unlink(path);
        char base[80];
        snprintf(base, sizeof base, "%.63s.csv", res->modes[r].name);
        mp_remove_stale(x->stage, base, ".partial.");
    }
    path_of(path, x->stage, "report", ".html"), unlink(path);
    path_of(path, x->stage, "summary", ".json"), unlink(path);
}

static mp_status commit_locked(cmp *x, const mp_run_spec *base, const file_name *names, int n);

static mp_status lock_names(cmp *x, const file_name *names, int n, int lock);

/* The decided comparison's files (names, besides summary.json) moved from
 * DIR/.partial into DIR (one already moved is skipped: a cut commit completed),
 * then the files of the run before that DIR's old summary.json (mixprec's)
 * named and this run does not (never one a run option reads: base), then
 * DIR/.partial/.commit renamed to DIR/summary.json, last. */
static mp_status finish_commit(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    file_name old[MAX_FILES];
    const int nold = old_files(x->dir, old, MAX_FILES);
    char from[4200], to[4200];
    for (int i = 0; i <= n; i++) {
        const char *name = i < n ? names[i] : DECIDED;
        snprintf(from, sizeof from, "%.4000s/%.79s", x->stage, name);
        snprintf(to, sizeof to, "%.4000s/%.79s", x->dir, i < n ? name : "summary.json");
        if (i == n) /* the old files that the new summary does not name, removed before it replaces the old one */
            for (int k = 0; k < nold; k++) {
                int kept = 0;
                for (int j = 0; j < n && !kept; j++) kept = !strcmp(old[k], names[j]);
                struct stat st;
                char stale[4200];
                snprintf(stale, sizeof stale, "%.4000s/%.79s", x->dir, old[k]);
                if (!kept && lstat(stale, &st) == 0 && S_ISREG(st.st_mode) && (!base || !mp_run_reader(base, stale)))
                    unlink(stale);
            }
        struct stat st;
        if (i < n && lstat(from, &st) != 0 && errno == ENOENT) continue; /* moved before the last cut */
        if (rename(from, to) != 0)
            return fail(x, MP_EIO,
                        "%s: cannot move it from %s (%s): the comparison is decided (%s/" DECIDED " names "
                        "its files, in %s or %s), the next comparison into %s completes it",
                        to, x->stage, strerror(errno), x->stage, x->dir, x->stage, x->dir);
    }
    const int dfd = open(x->dir, O_RDONLY | O_CLOEXEC); /* the renames, durable */
    if (dfd >= 0) fsync(dfd), close(dfd);
    return MP_OK;
}

/* DIR/NAME's lock for each of the n names and summary.json (lock), or let go
 * of them (!lock). On a lock that another process holds (a train writing one
 * of DIR's files), those taken are let go and the failure said. */
static mp_status lock_names(cmp *x, const file_name *names, int n, int lock) {
    char path[4200];
    for (int i = 0; i <= n; i++) {
        snprintf(path, sizeof path, "%.4000s/%.79s", x->dir, i < n ? names[i] : "summary.json");
        if (!lock) mp_output_unlock(path);
        else if (mp_output_lock(NULL, path) != MP_OK) {
            fail(x, MP_EIO, "%s: %s is as it was, this comparison's files are in %s", mp_last_error(), x->dir,
                 x->stage);
            for (int k = 0; k < i; k++) {
                snprintf(path, sizeof path, "%.4000s/%.79s", x->dir, names[k]);
                mp_output_unlock(path);
            }
            return MP_EIO;
        }
    }
    return MP_OK;
}

/* The comparison decided (DIR/.partial/summary.json renamed to .commit), then
 * finished, with each file it moves into DIR locked; DIR's files checked again
 * under those locks (foreign_files: one may have come since the start). */
mp_status mp_compare_commit(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    if (lock_names(x, names, n, 1) != MP_OK) return MP_EIO;
    const mp_status st = commit_locked(x, base, names, n);
    lock_names(x, names, n, 0);
    return st;
}

static mp_status commit_locked(cmp *x, const mp_run_spec *base, const file_name *names, int n) {
    char from[4200], to[4200];
    path_of(to, x->dir, "summary", ".json");
    file_name old[MAX_FILES];
    const int nold = manifest_files(to, old, MAX_FILES);
    for (int i = -1; i < n; i++) {
        snprintf(to, sizeof to, "%.4000s/%.79s", x->dir, i < 0 ? "summary.json" : names[i]);
        struct stat st;
        int known = i < 0 ? nold >= 0 : 0; /* summary.json: replaced when it is mixprec's (or absent) */
        for (int k = 0; i >= 0 && k < nold && !known; k++) known = !strcmp(old[k], names[i]);
        if (!known && lstat(to, &st) == 0)
            return fail(x, MP_EIO,
                        "%s came while this comparison ran and is not a file that mixprec compare wrote: "
                        "it is not replaced; %s is as it was, this comparison's files are in %s",
                        to, x->dir, x->stage);
    }
    path_of(from, x->stage, "summary", ".json");
    path_of(to, x->stage, DECIDED, "");
    if (rename(from, to) != 0)
        return fail(x, MP_EIO, "%s: cannot rename it to %s (%s): %s is as it was, this comparison's files are in %s",
                    from, to, strerror(errno), x->dir, x->stage);
    const int sfd = open(x->stage, O_RDONLY | O_CLOEXEC); /* the decision, durable before DIR changes */
    if (sfd >= 0) fsync(sfd), close(sfd);
    return finish_commit(x, base, names, n);
}

/* A comparison that was cut during its commit (DIR/.partial/.commit there, a
 * summary mixprec wrote) completed: its files moved in, the old ones it
 * replaces removed. MP_OK also when there is none. */
static mp_status complete_cut_commit(cmp *x, const mp_run_spec *base) {
    char path[4200];
    path_of(path, x->stage, DECIDED, "");
    file_name names[MAX_FILES];
    const int n = manifest_files(path, names, MAX_FILES);
    struct stat st;
    if (n < 0 || (n == 0 && lstat(path, &st) != 0))
        return n < 0 ? fail(x, MP_EIO,
                            "%s is not a summary mixprec compare "
                            "wrote: it is left alone (remove it)",
                            path)
                     : MP_OK;
    if (lock_names(x, names, n, 1) != MP_OK) return MP_EIO;
    const mp_status done = finish_commit(x, base, names, n);
    lock_names(x, names, n, 0);
    return done;
}

/* Each file this comparison may place in DIR (summary.json, report.html, each
 * mode's) that is there already must be one an earlier comparison wrote: named
 * by DIR's summary.json, which mixprec wrote. Else it is said (MP_EIO) and
 * nothing is replaced. */
static mp_status foreign_files(cmp *x, const mp_compare_result *res) {
    char path[4200];
    path_of(path, x->dir, "summary", ".json");
    file_name old[MAX_FILES];
    const int nold = manifest_files(path, old, MAX_FILES);
    if (nold < 0)
        return fail(x, MP_EIO,
                    "--out %s: %s is not a summary that mixprec compare wrote: it is not replaced "
                    "(choose another --out)",
                    x->dir, path);
    for (int r = -1; r < res->n; r++)
        for (int e = 0; e < (r < 0 ? 1 : MODE_EXT); e++) {
            char name[80];
            snprintf(name, sizeof name, "%.63s%s", r < 0 ? "report" : res->modes[r].name,
                     r < 0 ? ".html" : mp_compare_mode_ext[e]);
            snprintf(path, sizeof path, "%.4000s/%s", x->dir, name);
            struct stat st;
            if (lstat(path, &st) != 0) continue;
            int known = 0;
            for (int k = 0; k < nold && !known; k++) known = !strcmp(old[k], name);
            if (!known)
                return fail(x, MP_EIO,
                            "--out %s: %s is not a file that mixprec compare wrote there (its summary.json "
                            "does not name it): it is not replaced (choose another --out)",
                            x->dir, path);
        }
    return MP_OK;
}

/* DIR and DIR/.partial made where missing and locked (rank 0), a commit that
 * was cut completed, the files of DIR this comparison would replace checked
 * (foreign_files), and the files it will write removed from DIR/.partial (a
 * comparison that was killed left them). */
mp_status mp_compare_make_dirs(cmp *x, const mp_compare_spec *c, const mp_compare_result *res) {
    int bad = 0, err = 0;
    const char *what = c->out;
    if (x->writer) {
        struct stat st;
        x->made_dir = stat(c->out, &st) != 0;
        snprintf(x->lock, sizeof x->lock, "%.4000s/compare", x->stage);
        if (mkdir(c->out, 0755) != 0 && errno != EEXIST) bad = 1, err = errno;
        else if (mkdir(x->stage, 0755) != 0 && errno != EEXIST) bad = 1, err = errno, what = x->stage;
        else if (mp_output_lock(NULL, x->lock) != MP_OK)
            bad = 2, fail(x, MP_EIO, "--out %s: %s", c->out, mp_last_error());
        else if (complete_cut_commit(x, &c->run) != MP_OK || foreign_files(x, res) != MP_OK) bad = 2;
        else mp_compare_discard(x, res, res->n);
    }
    int first;
    const mp_run_ranks *ranks = c->run.ranks;
    if (ranks && ranks->size > 1 ? ranks->agree(ranks->ctx, bad, &first) : bad) {
        if (bad == 2) return x->status; /* said */
        return fail(x, MP_EIO, "%s: cannot create (%s)", what, strerror(err ? err : EIO));
    }
    return MP_OK;
}

/* DIR's lock let go; DIR/.partial removed when it is empty, and DIR too when
 * this comparison made it and wrote nothing there. */
void mp_compare_release_dirs(cmp *x, int dir_too) {
    if (!x->writer || !x->lock[0]) return;
    mp_output_unlock(x->lock);
    rmdir(x->stage);
    if (dir_too && x->made_dir) rmdir(x->dir);
}
