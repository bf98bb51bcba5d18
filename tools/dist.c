/* dist.c - data-parallel training over OpenMPI (dist.h): the trainer's
 * reductions as MPI_Allreduce, the ranks' agreement before training, and the
 * quiet output of ranks other than 0. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef MP_HAVE_MPI
#include <mpi.h>
#endif

#include "cli.h"
#include "dist.h"
#include "wire.h"
#include <zlib.h> /* crc32 */

static int g_rank = 0, g_size = 1;
static dist_stats g_stats = {.wire = MP_F32};

const dist_stats *dist_get_stats(void) { return &g_stats; }

void dist_set_allreduce(mp_dtype wire) { g_stats = (dist_stats){.wire = wire}; }

int dist_rank(void) { return g_rank; }
int dist_size(void) { return g_size; }

/* OpenMPI's mpirun (and PMIx launchers) put these in each rank's environment. */
static int under_mpirun(void) { return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK"); }

/* "R:S" from a fault variable: rank R, step S; 0 when unset or malformed. */
static int fault_rank_step(const char *name, int *rank, long *step) {
#ifndef MP_FAULT_HOOKS
    return (void)name, (void)rank, (void)step, 0;
#endif
    const char *v = getenv(name);
    char *end;
    if (!v || !*v) return 0;
    const long r = strtol(v, &end, 10);
    if (end == v || *end != ':') return 0;
    const char *s = end + 1;
    const long k = strtol(s, &end, 10);
    if (end == s || *end || r < 0 || k < 0) return 0;
    *rank = (int)r, *step = k;
    return 1;
}

void dist_fault_step(long step, mp_optim *opt) {
    int r;
    long s;
    if (fault_rank_step("MIXPREC_FAULT_DIST_DIVERGE", &r, &s) && r == g_rank && s == step && mp_optim_count(opt)) {
        mp_param *p = mp_optim_param(opt, 0); /* one weight of the first parameter, where checkpoints see it */
        if (p->master) p->master[0] += 1.0f;
        else if (p->half) ((uint16_t *)p->half)[0] ^= 1u; /* pure bf16 or half-only: the last bit of its weight */
    }
}

static int ranks_agree(void *ctx, int code, int *first) { return (void)ctx, dist_agree(code, first); }
static int ranks_any(void *ctx, int flag) { return (void)ctx, dist_any(flag); }
static void ranks_abort(void *ctx, int code) { (void)ctx, dist_abort(code); }
static void ranks_set_allreduce(void *ctx, mp_dtype wire) { (void)ctx, dist_set_allreduce(wire); }
static const mp_allreduce_stats *ranks_stats(void *ctx) { return (void)ctx, dist_get_stats(); }
static void ranks_after_step(void *ctx, long step, mp_optim *opt) { (void)ctx, dist_fault_step(step, opt); }

const mp_run_ranks *dist_ranks(void) {
    static mp_run_ranks r;
    r = (mp_run_ranks){.rank = dist_rank(),
                       .size = dist_size(),
                       .dist = dist_hook(),
                       .agree = ranks_agree,
                       .any = ranks_any,
                       .abort = ranks_abort,
                       .set_allreduce = ranks_set_allreduce,
                       .stats = ranks_stats,
                       .after_step = ranks_after_step};
    return &r;
}

int dist_fault_read(void) {
#ifndef MP_FAULT_HOOKS
    return 0;
#endif
    const char *v = getenv("MIXPREC_FAULT_DIST_READ");
    char *end;
    if (!v || !*v) return 0;
    const long r = strtol(v, &end, 10);
    return !*end && r == g_rank;
}

#ifdef MP_HAVE_MPI

/* The gradients travel in one buffer per step (as DDP's buckets): one
 * MPI_Allreduce instead of one per parameter. */
typedef struct {
    void *buf;
    size_t cap; /* bytes */
} grad_buffer;

static grad_buffer g_grads;
static int g_mpi = 0;                   /* dist_init initialised MPI */
static MPI_Op g_wire_sum = MPI_OP_NULL; /* the 16-bit formats' sum (wire_combine) */

/* MPI's signature for a user-defined reduction: inout = in + inout. */
static void wire_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type; /* always MPI_UINT16_T; the format is the run's */
    wire_combine(in, inout, (size_t)*len, g_stats.wire);
}

/* MPI counts are ints: large arrays go in pieces of 2^30. (MPI's default
 * error handler ends the job on a failed transfer; MP_EIO if one returns.)
 * The time inside goes to the statistics. */
static mp_status allreduce(void *x, size_t n, MPI_Datatype type, size_t size, MPI_Op op) {
    const double t0 = MPI_Wtime();
    mp_status st = MP_OK;
    for (char *p = x; n > 0 && st == MP_OK;) {
        const int k = n > (size_t)1 << 30 ? 1 << 30 : (int)n;
        if (MPI_Allreduce(MPI_IN_PLACE, p, k, type, op, MPI_COMM_WORLD) != MPI_SUCCESS) st = MP_EIO;
        p += (size_t)k * size, n -= (size_t)k;
    }
    g_stats.mpi_seconds += MPI_Wtime() - t0;
    return st;
}

static mp_status sum_grads(void *ctx, float *const *x, const size_t *n, size_t count) {
    grad_buffer *g = ctx;
    const mp_dtype wire = g_stats.wire;
    const size_t esize = wire == MP_F32 ? sizeof(float) : sizeof(uint16_t);
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += n[i];
    const size_t elems = total + (wire != MP_F32); /* the 16-bit formats carry the ranks' finiteness flag */
    if (elems * esize > g->cap) {
        void *b = realloc(g->buf, elems * esize);
        if (!b) return MP_ENOMEM;
        g->buf = b, g->cap = elems * esize;
    }
    g_stats.allreduces++, g_stats.values = total, g_stats.wire_bytes = elems * esize;
    mp_status st;
    if (wire == MP_F32) {
        float *b = g->buf;
        for (size_t i = 0, k = 0; i < count; k += n[i], i++) memcpy(b + k, x[i], n[i] * sizeof(float));
        st = allreduce(b, total, MPI_FLOAT, sizeof(float), MPI_SUM);
        for (size_t i = 0, k = 0; st == MP_OK && i < count; k += n[i], i++) memcpy(x[i], b + k, n[i] * sizeof(float));
    } else {
        wire_pack(g->buf, wire, x, n, count, &g_stats.packed);
        st = allreduce(g->buf, elems, MPI_UINT16_T, sizeof(uint16_t), g_wire_sum);
        int nonfinite = 0;
        if (st == MP_OK && wire_unpack(x, n, count, g->buf, wire, &nonfinite) == 0 && nonfinite) g_stats.lost_sums++;
    }
    return st;
}

/* --shard-optimizer's transfers are point to point, straight from and into
 * the arrays (no packing): each rank sends every other rank that rank's
 * arrays and receives its own, in pieces of 2^30 bytes (MPI counts are ints),
 * all posted at once and then awaited. Between two ranks messages arrive in
 * the order they were sent, so one tag serves. */
typedef struct {
    MPI_Request *req;
    size_t n, cap;
} requests;

static mp_status post(requests *q, int recv, void *p, size_t bytes, int peer) {
    for (char *c = p; bytes > 0;) {
        if (q->n == q->cap) {
            const size_t cap = q->cap ? 2 * q->cap : 64;
            MPI_Request *r = realloc(q->req, cap * sizeof *r);
            if (!r) return MP_ENOMEM;
            q->req = r, q->cap = cap;
        }
        const int k = bytes > (size_t)1 << 30 ? 1 << 30 : (int)bytes;
        const int rc = recv ? MPI_Irecv(c, k, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &q->req[q->n])
                            : MPI_Isend(c, k, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &q->req[q->n]);
        if (rc != MPI_SUCCESS) return MP_EIO;
        q->n++, c += k, bytes -= (size_t)k;
    }
    return MP_OK;
}

/* Waits for what was posted (all of it, even after a failure: the arrays
 * must not change under a transfer). */
static mp_status await(requests *q, mp_status st) {
    const double t0 = MPI_Wtime();
    if (q->n && MPI_Waitall((int)q->n, q->req, MPI_STATUSES_IGNORE) != MPI_SUCCESS && st == MP_OK) st = MP_EIO;
    g_stats.mpi_seconds += MPI_Wtime() - t0;
    free(q->req);
    return st;
}

/* --shard-optimizer: the sums of rank r's arrays ([first[r], first[r + 1]))
 * on rank r only. Each rank receives the others' copies of its own arrays
 * and adds them in rank order (x_0 + x_1 + ...), whichever rank it is: with
 * 2 ranks the all-reduce's one addition, the same bits. */
static mp_status reduce_scatter(void *ctx, float *const *x, const size_t *n, size_t count, const size_t *first) {
    grad_buffer *g = ctx;
    size_t total = 0, own = 0;
    for (size_t i = 0; i < count; i++) total += n[i];
    for (size_t i = first[g_rank]; i < first[g_rank + 1]; i++) own += n[i];
    const size_t need = (size_t)(g_size - 1) * own * sizeof(float); /* a slot of the own arrays per other rank */
    if (need > g->cap) {
        void *b = realloc(g->buf, need);
        if (!b) return MP_ENOMEM;
        g->buf = b, g->cap = need;
    }
    g_stats.allreduces++, g_stats.values = total, g_stats.wire_bytes = total * sizeof(float);
    float *slots = g->buf;
    requests q = {0};
    mp_status st = MP_OK;
    for (int s = 0; s < g_size && st == MP_OK; s++) {
        if (s == g_rank) continue;
        float *slot = slots + (size_t)(s < g_rank ? s : s - 1) * own;
        for (size_t i = first[g_rank], k = 0; i < first[g_rank + 1] && st == MP_OK; k += n[i], i++)
            st = post(&q, 1, slot + k, n[i] * sizeof(float), s);
        for (size_t i = first[s]; i < first[s + 1] && st == MP_OK; i++) st = post(&q, 0, x[i], n[i] * sizeof(float), s);
    }
    if ((st = await(&q, st)) != MP_OK) return st;
    for (size_t i = first[g_rank], k = 0; i < first[g_rank + 1]; k += n[i], i++) {
        /* x_0 + x_1 in x itself on ranks 0 and 1 (the addition is commutative), else in rank 0's slot */
        float *acc = g_rank <= 1 ? x[i] : slots + k;
        for (int s = 0; s < g_size; s++) {
            const float *v = s == g_rank ? x[i] : slots + (size_t)(s < g_rank ? s : s - 1) * own + k;
            if (v != acc)
                for (size_t j = 0; j < n[i]; j++) acc[j] += v[j];
        }
        if (acc != x[i]) memcpy(x[i], acc, n[i] * sizeof(float));
    }
    return MP_OK;
}

/* Rank root's bytes to every rank, in pieces of 1 MiB; a rank that keeps none
 * of them (x NULL) receives each piece into one static buffer, so that no
 * rank can fail for memory once the transfer has begun. */
static mp_status broadcast(void *ctx, void *x, size_t bytes, int root) {
    static char scratch[1 << 20];
    (void)ctx;
    const double t0 = MPI_Wtime();
    mp_status st = MP_OK;
    for (char *p = x; bytes > 0 && st == MP_OK;) {
        const int k = bytes > sizeof scratch ? (int)sizeof scratch : (int)bytes;
        if (MPI_Bcast(x ? p : scratch, k, MPI_BYTE, root, MPI_COMM_WORLD) != MPI_SUCCESS) st = MP_EIO;
        if (x) p += k;
        bytes -= (size_t)k;
    }
    g_stats.mpi_seconds += MPI_Wtime() - t0;
    return st;
}

/* Each rank's items [first[r], first[r + 1]) to every rank, straight into
 * their arrays. */
static mp_status all_gather(void *ctx, void *const *x, const size_t *bytes, size_t count, const size_t *first) {
    (void)ctx, (void)count;
    requests q = {0};
    mp_status st = MP_OK;
    for (int s = 0; s < g_size && st == MP_OK; s++) {
        if (s == g_rank) continue;
        for (size_t i = first[s]; i < first[s + 1] && st == MP_OK; i++) st = post(&q, 1, x[i], bytes[i], s);
        for (size_t i = first[g_rank]; i < first[g_rank + 1] && st == MP_OK; i++) st = post(&q, 0, x[i], bytes[i], s);
    }
    return await(&q, st);
}

static mp_status sum_f64(void *ctx, double *x, size_t n) {
    (void)ctx;
    return allreduce(x, n, MPI_DOUBLE, sizeof(double), MPI_SUM);
}

static mp_status max_f32(void *ctx, float *x, size_t n) {
    (void)ctx;
    return allreduce(x, n, MPI_FLOAT, sizeof(float), MPI_MAX);
}

static mp_train_dist g_hook;

const mp_train_dist *dist_hook(void) { return g_size > 1 ? &g_hook : NULL; }

const char *dist_describe(char *buf, size_t cap) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n = 0;
    MPI_Get_library_version(v, &n); /* allowed before MPI_Init */
    int k = snprintf(buf, cap, "MPI: %.*s", (int)strcspn(v, ",\n"), v), on = 0;
    MPI_Initialized(&on);
    if (on && k >= 0 && (size_t)k < cap) snprintf(buf + k, cap - (size_t)k, ", rank %d of %d", g_rank, g_size);
    return buf;
}

/* The cores this process may run on, shared by the ranks on this machine. */
static int threads_per_rank(void) {
    cpu_set_t set;
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    const char *l = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int local = l && atoi(l) > 0 ? atoi(l) : g_size;
    return cpus / local > 1 ? cpus / local : 1;
}

/* CRC-32 of the arguments after the program's name, each with its NUL. */
static uint32_t argv_crc(int argc, char **argv) {
    uLong c = crc32(0L, Z_NULL, 0);
    for (int i = 1; i < argc; i++) c = crc32(c, (const Bytef *)argv[i], (uInt)(strlen(argv[i]) + 1));
    return (uint32_t)c;
}

int dist_init(int argc, char **argv) {
    if (!under_mpirun()) return 0;
    int provided;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "mixprec: MPI_Init failed\n");
        return 1;
    }
    g_mpi = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_size == 1) return 0;
    g_hook =
        (mp_train_dist){g_rank, g_size, &g_grads, sum_grads, sum_f64, max_f32, reduce_scatter, all_gather, broadcast};
    MPI_Op_create(wire_sum, 1, &g_wire_sum); /* commutative: fp32 addition is, and each combine rounds once */
    if (g_rank != 0) {
        /* the other ranks' standard output goes to /dev/null: the descriptor under the command's own stream
         * (main.c's), which freopen cannot reopen */
        fflush(stdout);
        const int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull < 0 || dup2(devnull, STDOUT_FILENO) < 0) close(STDOUT_FILENO);
        if (devnull > STDOUT_FILENO) close(devnull);
        cli_quiet = 1; /* usage errors come from the options, the same on every rank: rank 0 says them */
    }
    if (!getenv("MIXPREC_THREADS")) mp_set_threads(threads_per_rank());
    unsigned crc = argv_crc(argc, argv), all_same = 1;
    unsigned *all = malloc((size_t)g_size * sizeof *all);
    if (!all || MPI_Allgather(&crc, 1, MPI_UNSIGNED, all, 1, MPI_UNSIGNED, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "mixprec: rank %d: the ranks' command lines could not be compared\n", g_rank);
        dist_abort(1);
    }
    int other = 0;
    for (int r = 1; r < g_size && all_same; r++)
        if (all[r] != all[0]) all_same = 0, other = r;
    free(all);
    if (all_same) return 0;
    if (g_rank == 0)
        fprintf(stderr,
                "mixprec: the ranks were started with different options (rank %d's command line differs from "
                "rank 0's): every rank must run the same command\n",
                other);
    return CLI_USAGE;
}

int dist_finalize(int rc) {
    if (g_mpi) {
        fflush(stdout), fflush(stderr);
        if (g_wire_sum != MPI_OP_NULL) MPI_Op_free(&g_wire_sum);
        MPI_Finalize();
    }
    free(g_grads.buf), g_grads = (grad_buffer){0};
    return rc;
}

int dist_any(int flag) {
    int any = flag != 0;
    if (g_size > 1) MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return any;
}

int dist_agree(int rc, int *first) {
    *first = rc ? g_rank : -1;
    if (g_size == 1) return rc;
    int *all = malloc((size_t)g_size * sizeof *all);
    if (!all || MPI_Allgather(&rc, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "mixprec: rank %d: the ranks could not agree (%s)\n", g_rank, all ? "MPI" : "out of memory");
        dist_abort(1);
    }
    int agreed = 0;
    for (int r = 0; r < g_size && !agreed; r++)
        if (all[r]) agreed = all[r], *first = r;
    free(all);
    return agreed;
}

void dist_abort(int rc) {
    if (g_size == 1) return;
    fflush(stdout), fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, rc);
    _exit(rc); /* MPI_Abort does not return */
}

#else /* one process: mpirun without MPI built in would start N separate trainings */

const mp_train_dist *dist_hook(void) { return NULL; }

const char *dist_describe(char *buf, size_t cap) {
    snprintf(buf, cap, "MPI: not built in");
    return buf;
}

int dist_init(int argc, char **argv) {
    (void)argc, (void)argv;
    const char *n = getenv("OMPI_COMM_WORLD_SIZE");
    if (!under_mpirun() || !n || atoi(n) <= 1) return 0;
    fprintf(stderr,
            "mixprec: started by mpirun with %s ranks, but this mixprec was built without MPI (install "
            "libopenmpi-dev and rebuild: scripts/deps.sh build)\n",
            n);
    return 1;
}

int dist_finalize(int rc) { return rc; }
int dist_any(int flag) { return flag != 0; }

int dist_agree(int rc, int *first) {
    *first = rc ? 0 : -1;
    return rc;
}

void dist_abort(int rc) { (void)rc; }

#endif
