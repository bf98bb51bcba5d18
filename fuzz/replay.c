/* replay.c - runs a libFuzzer harness without libFuzzer: calls
 * LLVMFuzzerTestOneInput once on every file named on the command line, and on
 * every regular file of every directory named (in name order), so a corpus
 * replays deterministically under any compiler and sanitizer. Exits 1 when an
 * argument cannot be read or names no input at all; a finding aborts. As
 * under libFuzzer (-rss_limit_mb=2048), an input gets 2 GiB of memory: an
 * allocation above that is a finding under ASan, and fails (NULL) in a build
 * without a sanitizer. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#if defined(__SANITIZE_ADDRESS__)
#define REPLAY_ASAN 1
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAY_ASAN 1
#endif
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define REPLAY_SANITIZER 1
#endif
#endif
#if defined(REPLAY_ASAN) || defined(__SANITIZE_THREAD__)
#define REPLAY_SANITIZER 1
#endif

#ifdef REPLAY_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "max_allocation_size_mb=2048"; }
#endif

enum { LIMIT_MIB = 2048 };

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "replay: %s: cannot open\n", path), -1;
    uint8_t *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            uint8_t *q = realloc(b, cap = cap ? 2 * cap : 4096);
            if (!q) return fclose(f), free(b), fprintf(stderr, "replay: %s: out of memory\n", path), -1;
            b = q;
        }
        const size_t got = fread(b + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    const int bad = ferror(f);
    fclose(f);
    if (bad) return free(b), fprintf(stderr, "replay: %s: read error\n", path), -1;
    /* an exact-size copy, so that ASan sees a read past the input's end */
    uint8_t *in = malloc(n ? n : 1);
    if (!in) return free(b), -1;
    memcpy(in, b, n);
    free(b);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Runs the regular files of dir in name order; the number run, or -1. */
static long run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return fprintf(stderr, "replay: %s: cannot open\n", dir), -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            char **q = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *q);
            if (!q) break;
            names = q;
        }
        const size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if (!(names[n] = malloc(len))) break;
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    closedir(d);
    if (n > 1) qsort(names, n, sizeof *names, cmp_str);
    long ran = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat sb;
        if (ran >= 0 && stat(names[i], &sb) == 0 && S_ISREG(sb.st_mode)) ran = run_file(names[i]) == 0 ? ran + 1 : -1;
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv) {
#ifndef REPLAY_SANITIZER /* sanitizers reserve terabytes of address space: they limit allocations themselves */
    const struct rlimit lim = {(rlim_t)LIMIT_MIB << 20, (rlim_t)LIMIT_MIB << 20};
    if (setrlimit(RLIMIT_AS, &lim) != 0) perror("replay: setrlimit");
#endif
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) return fprintf(stderr, "replay: %s: not found\n", argv[i]), 1;
        const long r = S_ISDIR(sb.st_mode) ? run_dir(argv[i]) : run_file(argv[i]) == 0 ? 1 : -1;
        if (r < 0) return 1;
        total += r;
    }
    if (total == 0) return fprintf(stderr, "replay: no inputs\n"), 1;
    printf("replay: %ld inputs, no finding\n", total);
    return 0;
}
