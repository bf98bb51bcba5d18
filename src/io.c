/* io.c - safetensors reading (validated) and atomic writing, JSON by cJSON. */
#define _GNU_SOURCE /* mkostemp, flock */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* safetensors' names. Its "F4" (E2M1) is 4 bits an element, two to a byte;
 * mixprec's MP_E2M1 buffers hold one code per byte, so neither side maps to
 * the other and both are refused by name. */
static const struct {
    const char *name;
    mp_dtype t;
} st_dtypes[] = {
    {"F32", MP_F32},      {"F16", MP_F16},      {"BF16", MP_BF16}, {"F8_E4M3", MP_E4M3},
    {"F8_E5M2", MP_E5M2}, {"F8_E8M0", MP_E8M0}, {"U8", MP_U8},
};

/* Bytes per element of a dtype a file may hold. */
static size_t elem_size(mp_dtype t) { return t == MP_U8 ? 1 : mp_format(t)->size; }

static const char *dtype_name(mp_dtype t) {
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (st_dtypes[i].t == t) return st_dtypes[i].name;
    return NULL;
}

size_t mp_tensor_numel(const mp_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

void mp_safetensors_free(mp_safetensors *s) {
    if (!s) return;
    for (size_t i = 0; i < 2 * s->nmeta; i++) free(s->meta[i]);
    free(s->meta);
    free(s->tensors);
    free(s->buffer);
    memset(s, 0, sizeof *s);
}

const mp_tensor *mp_safetensors_find(const mp_safetensors *s, const char *name) {
    for (size_t i = 0; i < s->count; i++)
        if (strcmp(s->tensors[i].name, name) == 0) return &s->tensors[i];
    return NULL;
}

const char *mp_safetensors_meta(const mp_safetensors *s, const char *key) {
    for (size_t i = 0; i < s->nmeta; i++)
        if (strcmp(s->meta[2 * i], key) == 0) return s->meta[2 * i + 1];
    return NULL;
}

static int cmp_range(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* A name that two members of JSON object obj share, or NULL; sorted, not
 * compared pairwise (a header may hold a million names). *nomem on failure. */
static const char *repeated_name(const cJSON *obj, int *nomem) {
    const int n = cJSON_GetArraySize(obj);
    const char **names = malloc((size_t)(n > 0 ? n : 1) * sizeof *names);
    if (!names) return *nomem = 1, NULL;
    int k = 0;
    for (const cJSON *e = obj->child; e && k < n; e = e->next) names[k++] = e->string;
    qsort(names, (size_t)k, sizeof *names, cmp_name);
    const char *dup = NULL;
    for (int i = 1; i < k && !dup; i++)
        if (strcmp(names[i - 1], names[i]) == 0) dup = names[i];
    free(names);
    return dup;
}

/* The header's __metadata__ object e: string values only, no name twice. */
static mp_status parse_metadata(const char *path, const cJSON *e, mp_safetensors *s) {
    if (!cJSON_IsObject(e)) return mp_error(MP_ECORRUPT, "%s: __metadata__ is not an object", path);
    int nomem = 0;
    const char *dup = repeated_name(e, &nomem);
    if (dup || nomem)
        return nomem ? mp_error(MP_ENOMEM, "%s: out of memory", path)
                     : mp_error(MP_ECORRUPT, "%s: the metadata names '%s' twice", path, dup);
    const int m = cJSON_GetArraySize(e);
    s->meta = calloc(2 * (size_t)m + 2, sizeof *s->meta);
    if (!s->meta) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    for (const cJSON *kv = e->child; kv; kv = kv->next) {
        if (!cJSON_IsString(kv)) return mp_error(MP_ECORRUPT, "%s: metadata '%s' is not a string", path, kv->string);
        s->meta[2 * s->nmeta] = strdup(kv->string);
        s->meta[2 * s->nmeta + 1] = strdup(kv->valuestring);
        s->nmeta++;
        if (!s->meta[2 * s->nmeta - 2] || !s->meta[2 * s->nmeta - 1])
            return mp_error(MP_ENOMEM, "%s: out of memory", path);
    }
    return MP_OK;
}

/* A tensor's shape: at most 4 whole dimensions, *numel their product. */
static mp_status parse_shape(const char *path, const cJSON *sh, mp_tensor *t, size_t *numel) {
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > 4)
        return mp_error(MP_ECORRUPT, "%s: tensor '%s' has %d dimensions (at most 4)", path, t->name, t->ndim);
    *numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *d = cJSON_GetArrayItem(sh, i);
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 1e12 ||
            d->valuedouble != (double)(size_t)d->valuedouble)
            return mp_error(MP_ECORRUPT, "%s: tensor '%s' has a bad shape", path, t->name);
        t->shape[i] = (size_t)d->valuedouble;
        if (t->shape[i] && *numel > ((size_t)1 << 50) / t->shape[i])
            return mp_error(MP_ECORRUPT, "%s: tensor '%s' has an impossibly large shape", path, t->name);
        *numel *= t->shape[i];
    }
    return MP_OK;
}

/* The header's entry e for a tensor into *t, its bytes [range[0], range[1]) of the data (datalen bytes). */
static mp_status parse_tensor(const char *path, const cJSON *e, size_t datalen, const uint8_t *data, mp_tensor *t,
                              size_t range[2]) {
    if (strlen(e->string) >= sizeof t->name) return mp_error(MP_ECORRUPT, "%s: tensor name too long", path);
    strcpy(t->name, e->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2)
        return mp_error(MP_ECORRUPT, "%s: tensor '%s' needs dtype, shape and data_offsets", path, t->name);
    int known = 0;
    for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
        if (strcmp(dt->valuestring, st_dtypes[i].name) == 0) t->dtype = st_dtypes[i].t, known = 1;
    if (!known)
        return mp_error(MP_ECORRUPT,
                        "%s: tensor '%s' has dtype %s (F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0 are read%s)", path,
                        t->name, dt->valuestring,
                        strcmp(dt->valuestring, "F4") == 0 ? "; F4 packs two fp4 codes a byte, mixprec holds one" : "");
    size_t numel = 1;
    const mp_status st = parse_shape(path, sh, t, &numel);
    if (st != MP_OK) return st;
    const cJSON *b0 = cJSON_GetArrayItem(of, 0), *b1 = cJSON_GetArrayItem(of, 1);
    if (!cJSON_IsNumber(b0) || !cJSON_IsNumber(b1) || b0->valuedouble < 0 || b1->valuedouble < b0->valuedouble ||
        b1->valuedouble > (double)datalen || b0->valuedouble != (double)(size_t)b0->valuedouble ||
        b1->valuedouble != (double)(size_t)b1->valuedouble)
        return mp_error(MP_ECORRUPT, "%s: tensor '%s' has data offsets out of range or not whole (data is %zu bytes)",
                        path, t->name, datalen);
    const size_t begin = (size_t)b0->valuedouble, end = (size_t)b1->valuedouble;
    t->nbytes = end - begin;
    if (t->nbytes != numel * elem_size(t->dtype))
        return mp_error(MP_ECORRUPT, "%s: tensor '%s' has %zu bytes for a shape of %zu %s values", path, t->name,
                        t->nbytes, numel, dt->valuestring);
    t->data = data + begin;
    range[0] = begin, range[1] = end;
    return MP_OK;
}

/* The tensors' byte ranges (n pairs) cover the data, datalen bytes, without a gap or an overlap. */
static mp_status check_ranges(const char *path, size_t *ranges, size_t n, size_t datalen) {
    qsort(ranges, n, 2 * sizeof *ranges, cmp_range);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranges[2 * i] != pos)
            return mp_error(MP_ECORRUPT, "%s: tensor data %s at byte %zu", path,
                            ranges[2 * i] < pos ? "overlaps" : "has a gap", pos);
        pos = ranges[2 * i + 1];
    }
    return pos != datalen ? mp_error(MP_ECORRUPT, "%s: %zu bytes after the last tensor", path, datalen - pos) : MP_OK;
}

static mp_status parse_header(const char *path, const char *json, size_t jsonlen, size_t datalen, const uint8_t *data,
                              mp_safetensors *s) {
    const char *after = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, jsonlen, &after, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return mp_error(MP_ECORRUPT, "%s: the header is not a JSON object", path);
    }
    for (; after < json + jsonlen; after++) /* then only padding, as the reference reader allows */
        if (*after != ' ' && *after != '\t' && *after != '\n' && *after != '\r') {
            cJSON_Delete(root);
            return mp_error(MP_ECORRUPT, "%s: bytes after the header's JSON object", path);
        }
    mp_status st = MP_OK;
    const int n = cJSON_GetArraySize(root);
    s->tensors = calloc((size_t)n + 1, sizeof *s->tensors);
    size_t *ranges = calloc((size_t)n + 1, 2 * sizeof *ranges);
    int nomem = 0;
    const char *dup = s->tensors && ranges ? repeated_name(root, &nomem) : NULL;
    if (!s->tensors || !ranges || nomem) st = mp_error(MP_ENOMEM, "%s: out of memory", path);
    else if (dup) st = mp_error(MP_ECORRUPT, "%s: the header names '%s' twice", path, dup);
    for (const cJSON *e = root->child; e && st == MP_OK; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) st = parse_metadata(path, e, s);
        else if ((st = parse_tensor(path, e, datalen, data, &s->tensors[s->count], &ranges[2 * s->count])) == MP_OK)
            s->count++;
    }
    if (st == MP_OK) st = check_ranges(path, ranges, s->count, datalen);
    free(ranges);
    cJSON_Delete(root);
    return st;
}

mp_status mp_safetensors_read(const char *path, mp_safetensors *s) {
    memset(s, 0, sizeof *s);
    uint8_t *buf;
    size_t nread;
    mp_status st = mp_read_file(NULL, path, (size_t)1 << 46, &buf, &nread); /* a regular file, unchanged while read */
    if (st != MP_OK) return st;
    s->buffer = buf;
    const long size = (long)nread;
    uint8_t *b = s->buffer;
    if (st == MP_OK && size < 8)
        st = mp_error(MP_ECORRUPT, "%s: %ld bytes, too short for a safetensors file", path, size);
    if (st == MP_OK) {
        const uint64_t n = mp_get_u64(b);
        if (n < 2 || n > (uint64_t)size - 8 || n > (100u << 20)) {
            st = mp_error(MP_ECORRUPT, "%s: header length %llu does not fit a %ld-byte file", path,
                          (unsigned long long)n, size);
        } else {
            char *json = malloc(n + 1);
            if (!json) st = mp_error(MP_ENOMEM, "%s: out of memory", path);
            else {
                memcpy(json, b + 8, n);
                json[n] = 0;
                st = parse_header(path, json, n, (size_t)size - 8 - n, b + 8 + n, s);
                free(json);
            }
        }
    }
    if (st != MP_OK) mp_safetensors_free(s);
    return st;
}

mp_status mp_safetensors_write(const char *path, const mp_tensor *ts, size_t count, const char *const *meta) {
    cJSON *root = cJSON_CreateObject();
    if (!root) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    mp_status st = MP_OK;
    if (meta && meta[0]) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (size_t i = 0; meta[i] && meta[i + 1]; i += 2) cJSON_AddStringToObject(m, meta[i], meta[i + 1]);
    }
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        const char *dn = dtype_name(ts[i].dtype);
        if (ts[i].dtype == MP_E2M1) {
            cJSON_Delete(root);
            return mp_error(MP_EINVAL,
                            "%s: tensor '%s' is e2m1, one code a byte; safetensors' F4 packs two a byte "
                            "(not written: widen it with mp_convert first)",
                            path, ts[i].name);
        }
        if (!dn || ts[i].ndim < 0 || ts[i].ndim > 4 ||
            ts[i].nbytes != mp_tensor_numel(&ts[i]) * elem_size(ts[i].dtype)) {
            cJSON_Delete(root);
            return mp_error(MP_EINVAL, "%s: tensor '%s' has a bad dtype, shape or size", path, ts[i].name);
        }
        cJSON *t = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON_AddStringToObject(t, "dtype", dn);
        cJSON *sh = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < ts[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)ts[i].shape[d]));
        cJSON *of = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + ts[i].nbytes)));
        off += ts[i].nbytes;
    }
    char *json = mp_json_print(root, 0);
    cJSON_Delete(root);
    if (!json) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    size_t hlen = strlen(json);
    const size_t padded = (hlen + 7) / 8 * 8; /* spaces to an 8-byte boundary, as the reference writer does */

    uint8_t len8[8];
    mp_put_u64(len8, padded);
    static const char spaces[] = "       "; /* up to 7 */
    mp_chunk *c = malloc((count + 3) * sizeof *c);
    if (!c) {
        free(json);
        return mp_error(MP_ENOMEM, "%s: out of memory", path);
    }
    c[0] = (mp_chunk){len8, 8}, c[1] = (mp_chunk){json, hlen}, c[2] = (mp_chunk){spaces, padded - hlen};
    for (size_t i = 0; i < count; i++) c[3 + i] = (mp_chunk){ts[i].data, ts[i].nbytes};
    st = mp_write_file_atomic(path, c, count + 3);
    free(c);
    free(json);
    return st;
}

/* The process's umask, read without changing it for longer than a moment
 * (/proc/self/status has it on Linux 4.7 and later). */
static mode_t current_umask(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned m = 0;
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f)) found = sscanf(line, "Umask: %o", &m) == 1;
    if (f) fclose(f);
    if (found) return (mode_t)m;
    const mode_t u = umask(022);
    umask(u);
    return u;
}

/* Test-only fault injection (tests/test_crash.sh), compiled only into the
 * test build of the command (build/mixprec-fault, MP_FAULT_HOOKS; the library
 * and the mixprec command have none): MIXPREC_FAULT_WRITE_KILL_AFTER=N makes
 * the process SIGKILL itself once N bytes of a file's temporary copy are
 * written (N = the file's size: after its last byte, before fsync and
 * rename); MIXPREC_FAULT_WRITE_ENOSPC=N makes the write fail there with
 * ENOSPC, as a full disk does. Counted per file. */
static long fault_at(const char *name) {
#ifdef MP_FAULT_HOOKS
    const char *v = getenv(name);
    char *end;
    const long n = v && *v ? strtol(v, &end, 10) : -1;
    return n >= 0 && !*end ? n : -1;
#else
    return (void)name, -1;
#endif
}

typedef struct {
    int fd;
    size_t done;           /* bytes written */
    long kill_at, full_at; /* the fault hook; -1: off */
} sink;

static int sink_write(sink *s, const uint8_t *p, size_t n) {
    for (;;) {
        if (s->kill_at >= 0 && s->done >= (size_t)s->kill_at) raise(SIGKILL);
        if (!n) return 0;
        if (s->full_at >= 0 && s->done >= (size_t)s->full_at) return errno = ENOSPC, -1;
        size_t m = n;
        if (s->kill_at >= 0 && m > (size_t)s->kill_at - s->done) m = (size_t)s->kill_at - s->done;
        if (s->full_at >= 0 && m > (size_t)s->full_at - s->done) m = (size_t)s->full_at - s->done;
        const ssize_t w = write(s->fd, p, m);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w == 0 ? (errno = EIO, -1) : -1;
        p += w, n -= (size_t)w, s->done += (size_t)w;
    }
}

/* Removes the regular files BASE INFIX PID[.SUFFIX] in DIR whose process is
 * gone: what a writer killed before its rename left behind. A link, a
 * directory or a name whose PID is alive (or this process) is left alone. */
void mp_remove_stale(const char *dir, const char *base, const char *infix) {
    DIR *d = opendir(dir);
    const size_t bl = strlen(base), il = strlen(infix);
    for (struct dirent *e; d && (e = readdir(d));) {
        char *end;
        if (strncmp(e->d_name, base, bl) != 0 || strncmp(e->d_name + bl, infix, il) != 0) continue;
        const long pid = strtol(e->d_name + bl + il, &end, 10);
        if ((*end && *end != '.') || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char stale[8192];
        struct stat st;
        if ((size_t)snprintf(stale, sizeof stale, "%s/%s", dir, e->d_name) < sizeof stale && lstat(stale, &st) == 0 &&
            S_ISREG(st.st_mode))
            unlink(stale);
    }
    if (d) closedir(d);
}

int mp_create_excl(const char *path) { return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666); }

/* ---- one writer per output: PATH.lock, flock(2)ed while the output is written ----
 * The locks this thread holds (a run locks its outputs at its start, and its
 * writes of them must not take the lock again: flock locks belong to an open
 * file, so a second open of the same lock would refuse this process itself). */
enum { HELD_MAX = 128 }; /* a comparison's commit locks each file it moves into DIR: 12 modes x 6 + 2 */
static _Thread_local struct {
    int fd;
    long pid;   /* the process that took it: a child made by fork() holds none of its parent's locks */
    char *path; /* the output's (malloc'd) */
} held[HELD_MAX];
static _Thread_local int nheld;

static int held_at(const char *path) {
    for (int i = 0; i < nheld; i++)
        if (held[i].pid == (long)getpid() && !strcmp(held[i].path, path)) return i;
    return -1;
}

int mp_output_held(const char *path) { return path && held_at(path) >= 0; }

static const char lock_text[] = "mixprec lock, pid ";

mp_status mp_output_lock(const char *option, const char *path) {
    if (!path || !*path) return mp_error(MP_EINVAL, "mp_output_lock: no path");
    const char *opt = option ? option : "", *sp = option ? " " : "";
    if (strlen(path) >= 4200 - 8) return mp_error(MP_EINVAL, "%s%s%.200s...: path too long", opt, sp, path);
    if (held_at(path) >= 0) return MP_OK;
    for (int i = 0; i < nheld; i++) /* a parent's, copied by fork(): not this process's (its descriptor is left
                                       as it is: the child may have closed it and reused the number) */
        if (held[i].pid != (long)getpid()) free(held[i].path), held[i--] = held[--nheld];
    if (nheld == HELD_MAX)
        return mp_error(MP_ENOMEM, "%s%s%s: more than %d outputs locked at once", opt, sp, path, HELD_MAX);
    char lk[4300];
    snprintf(lk, sizeof lk, "%s.lock", path);
    for (int tries = 0; tries < 100; tries++) {
        const int fd = open(lk, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
        if (fd < 0)
            return mp_error(MP_EIO, "%s%s%s: cannot create its lock file %s (%s)", opt, sp, path, lk,
                            errno == ELOOP ? "it is a symbolic link" : strerror(errno));
        struct stat a, b;
        if (fstat(fd, &a) != 0 || !S_ISREG(a.st_mode)) {
            close(fd);
            return mp_error(MP_EIO, "%s%s%s: its lock file %s is not a regular file", opt, sp, path, lk);
        }
        char text[64] = "";
        const ssize_t got = pread(fd, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = 0;
        const int ours = got <= 0 || !strncmp(text, lock_text, sizeof lock_text - 1);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            const int e = errno;
            close(fd);
            if (e != EWOULDBLOCK)
                return mp_error(MP_EIO, "%s%s%s: cannot lock %s (%s)", opt, sp, path, lk, strerror(e));
            const long pid = ours && got > 0 ? strtol(text + sizeof lock_text - 1, NULL, 10) : 0;
            char who[64] = "another process";
            if (pid > 0) snprintf(who, sizeof who, "another mixprec process (pid %ld)", pid);
            return mp_error(MP_EIO, "%s%s%s: %s is writing it (it holds %s); one writer per output", opt, sp, path, who,
                            lk);
        }
        if (lstat(lk, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) { /* its last holder removed it */
            close(fd);
            continue;
        }
        if (!ours) {
            close(fd);
            return mp_error(MP_EIO,
                            "%s%s%s: %s is a file mixprec did not write, not a lock: it is left alone "
                            "(remove it, or choose another path)",
                            opt, sp, path, lk);
        }
        char mine[64];
        const int len = snprintf(mine, sizeof mine, "%s%ld\n", lock_text, (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, mine, (size_t)len, 0) != len) {
            const int e = errno;
            unlink(lk), close(fd);
            return mp_error(MP_EIO, "%s%s%s: cannot write its lock file %s (%s)", opt, sp, path, lk, strerror(e));
        }
        char *copy = strdup(path);
        if (!copy) {
            unlink(lk), close(fd);
            return mp_error(MP_ENOMEM, "%s%s%s: out of memory", opt, sp, path);
        }
        held[nheld].fd = fd, held[nheld].pid = (long)getpid(), held[nheld++].path = copy;
        return MP_OK;
    }
    return mp_error(MP_EIO, "%s%s%s: its lock file %s keeps being replaced", opt, sp, path, lk);
}

void mp_output_unlock(const char *path) {
    const int i = path ? held_at(path) : -1;
    if (i < 0) return;
    char lk[4300];
    snprintf(lk, sizeof lk, "%s.lock", path);
    unlink(lk); /* while it is held: a process waiting on it sees a removed file and opens the path again */
    close(held[i].fd);
    free(held[i].path);
    held[i] = held[--nheld];
}

static _Thread_local int no_replace; /* mp_write_no_replace */

void mp_write_no_replace(int on) { no_replace = on; }

mp_status mp_write_file_atomic(const char *path, const mp_chunk *chunks, size_t n) {
    if (!path || !*path || (n && !chunks)) return mp_error(MP_EINVAL, "mp_write_file_atomic: no path or no data");
    char tmp[4200], dir[4096];
    if (strlen(path) >= sizeof dir) return mp_error(MP_EINVAL, "%.200s...: path too long", path);
    const char *slash = strrchr(path, '/');
    if (slash) snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    else strcpy(dir, ".");
    struct stat st; /* a device, a FIFO or a directory is never replaced by a regular file */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return mp_error(MP_EIO, "%s is %s, not a regular file: it is not replaced", path,
                        S_ISDIR(st.st_mode)    ? "a directory"
                        : S_ISFIFO(st.st_mode) ? "a FIFO"
                                               : "a device");
    /* one writer: a lock this thread holds (a run's output) is used as it is, else taken for the write */
    const int locked_here = held_at(path) < 0;
    if (locked_here && mp_output_lock(NULL, path) != MP_OK) return MP_EIO;
    /* PATH.tmp.PID.XXXXXX, created exclusively (never a link's target, never a file already there) */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.XXXXXX", path, (long)getpid());
    mp_remove_stale(dir, slash ? slash + 1 : path, ".tmp.");
    sink s = {mkostemp(tmp, O_CLOEXEC), 0, fault_at("MIXPREC_FAULT_WRITE_KILL_AFTER"),
              fault_at("MIXPREC_FAULT_WRITE_ENOSPC")};
    if (s.fd < 0) { /* the path asked for, and why: the temporary file beside it is ours */
        const int e = errno;
        if (locked_here) mp_output_unlock(path);
        return mp_error(MP_EIO, "%s: cannot create (%s); the previous file is untouched", path, strerror(e));
    }
    if (fchmod(s.fd, 0666 & ~current_umask()) != 0) { /* mkstemp makes 0600; a file is written as open(0666) would */
        const int e = errno;
        close(s.fd), unlink(tmp);
        if (locked_here) mp_output_unlock(path);
        return mp_error(MP_EIO, "%s: cannot create (%s); the previous file is untouched", path, strerror(e));
    }
    const char *failed = NULL;
    for (size_t i = 0; !failed && i < n; i++)
        if (sink_write(&s, chunks[i].data, chunks[i].size) != 0) failed = "write failed";
    if (!failed && fsync(s.fd) != 0) failed = "fsync failed";
    int err = errno;
    if (close(s.fd) != 0 && !failed) failed = "close failed", err = errno;
    if (!failed && no_replace) { /* link(2) fails with EEXIST where a file is: nothing is replaced */
        if (link(tmp, path) == 0) unlink(tmp);
        else if (errno == EEXIST) failed = "a file is there already, and it is not replaced", err = EEXIST;
        else if (lstat(path, &st) != 0 && errno == ENOENT && rename(tmp, path) == 0) { /* no hard links here */ } else
            failed = "cannot move the new file into place", err = errno;
    } else if (!failed && rename(tmp, path) != 0) failed = "cannot rename the new file into place", err = errno;
    if (failed) {
        unlink(tmp);
        if (locked_here) mp_output_unlock(path);
        return mp_error(MP_EIO, "%s: %s (%s); the previous file is untouched", path, failed, strerror(err));
    }
    /* make the rename itself durable (EINVAL: this file system cannot sync a directory) */
    const int dfd = open(dir, O_RDONLY | O_CLOEXEC);
    const int synced = dfd < 0 || fsync(dfd) == 0 || errno == EINVAL;
    err = errno;
    if (dfd >= 0) close(dfd);
    if (locked_here) mp_output_unlock(path);
    if (!synced) return mp_error(MP_EIO, "%s: written, but its directory cannot be synced (%s)", path, strerror(err));
    return MP_OK;
}

mp_status mp_print_file_atomic(const char *path, void (*print)(FILE *f, const void *ctx), const void *ctx) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    print(f, ctx);
    const int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        free(text);
        return mp_error(MP_ENOMEM, "%s: out of memory", path);
    }
    /* the pages say charset=utf-8: bytes that are not (a path's, echoed) become U+FFFD */
    char *utf8 = mp_utf8_repair(text, "\xef\xbf\xbd");
    free(text);
    if (!utf8) return mp_error(MP_ENOMEM, "%s: out of memory", path);
    const mp_status st = mp_write_file_atomic(path, &(mp_chunk){utf8, strlen(utf8)}, 1);
    free(utf8);
    return st;
}
