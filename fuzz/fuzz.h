/* fuzz.h - what the harnesses share: the input as a file (for readers that
 * take a path), a scratch directory, and the check that stops the run on a
 * broken invariant. Each harness defines _GNU_SOURCE before any include. */
#ifndef MIXPREC_FUZZ_H
#define MIXPREC_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mixprec/mixprec.h"

/* The entry point libFuzzer (or replay.c) calls with each input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken invariant is a finding: report it and abort, as a crash would. */
#define FUZZ_CHECK(cond)                                                                                 \
    do {                                                                                                 \
        if (!(cond)) {                                                                                   \
            fprintf(stderr, "%s:%d: invariant failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
                    mp_last_error());                                                                    \
            abort();                                                                                     \
        }                                                                                                \
    } while (0)

/* The bytes as the contents of a file, returned as its path: one memfd per
 * process, rewritten for every input (no disk I/O). */
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("mixprec-fuzz", 0);
        if (fd < 0) perror("memfd_create"), abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) perror("ftruncate"), abort();
    for (size_t done = 0; done < size;) {
        const ssize_t n = pwrite(fd, data + done, size - done, (off_t)done);
        if (n <= 0) perror("pwrite"), abort();
        done += (size_t)n;
    }
    return path;
}

/* dir/name in a private directory for files a harness writes, created on
 * first use in $TMPDIR, else /dev/shm (tmpfs: the writers fsync), else /tmp;
 * the files and the directory are removed at exit (not after a crash:
 * scripts/fuzz.sh points TMPDIR into its own directory). At most 8 names. */
typedef struct {
    char dir[200];
    char paths[8][320];
} fuzz_scratch_state;

static inline fuzz_scratch_state *fuzz_scratch_state_(void) {
    static fuzz_scratch_state s;
    return &s;
}

static inline void fuzz_cleanup_(void) {
    const fuzz_scratch_state *s = fuzz_scratch_state_();
    for (int i = 0; i < 8 && s->paths[i][0]; i++) unlink(s->paths[i]);
    rmdir(s->dir);
}

static inline const char *fuzz_scratch(const char *name) {
    fuzz_scratch_state *s = fuzz_scratch_state_();
    if (!s->dir[0]) {
        const char *tmp = getenv("TMPDIR");
        if (!tmp || !*tmp) tmp = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        if ((size_t)snprintf(s->dir, sizeof s->dir, "%s/mixprec-fuzz-XXXXXX", tmp) >= sizeof s->dir || !mkdtemp(s->dir))
            perror("fuzz_scratch: mkdtemp"), abort();
        atexit(fuzz_cleanup_);
    }
    char path[320];
    snprintf(path, sizeof path, "%.199s/%.100s", s->dir, name);
    int i = 0;
    while (i < 8 && s->paths[i][0] && strcmp(s->paths[i], path) != 0) i++;
    if (i == 8) abort();
    memcpy(s->paths[i], path, sizeof path);
    return s->paths[i];
}

#endif
