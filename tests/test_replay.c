/* test_replay.c - the lean optimizer state replayed against fp32 moments.
 *
 * bf16 with Kahan-compensated weights and 8-bit AdamW state, the setting that
 * diverged to a loss of 1,891 while a positive exp_avg_sq could be stored as
 * the code of 0 (docs/TRAINING.md, "Second moments stored as zero"), on the
 * corpus where it did (the regular files of /usr/share/common-licenses in
 * sorted order): gpt:2-2-64-64, batch 8, lr 3e-3, seed 1, 2 threads, on
 * every path from AVX2 up that this CPU runs (the portable path gives AVX2's
 * bits). K steps trained and saved, the checkpoint resumed in a new trainer,
 * its state dequantized into fp32 moments, and R more steps taken while
 * those moments are carried along the same gradients in double precision
 * (PyTorch's AdamW). After each step, per tensor:
 *   - no element holds a second moment of 0 under a nonzero first moment
 *     (the next step would move it by lr * exp_avg / eps);
 *   - the update (w + comp after, minus before) is within a relative error
 *     of UPDATE_ERR of the fp32 moments' update (L2 over the tensor; 0.072
 *     measured), and no element moves by more than LR_MULT times lr or by
 *     more than twice the fp32 moments' update and lr / 2.
 * On the AVX2 path the replay reaches the case the floor of the second
 * moment's map guards, and the test asserts that it does: 5 second moments
 * that torchao's map codes as 0 under a nonzero first moment, held at the
 * floor. With the floor removed (optim.c: least_positive = 0) all three
 * checks fail: 42 second moments of 0 under a nonzero first moment over the
 * steps, updates of up to 50 times lr, a relative error of 1.3 in wte. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

enum { K = 15, R = 10, B = 8, SEED = 1 };
static const double LR = 3e-3, UPDATE_ERR = 0.3, LR_MULT = 4.0;
static const char *const MODE = "bf16+master-weights=kahan+optim-state=8bit";

typedef struct {
    mp_precision prec;
    mp_optim *opt;
    mp_gpt *gpt;
    mp_loader loader;
    mp_trainer *t;
} rig;

static mp_status rig_make(rig *r, const mp_text *text) {
    memset(r, 0, sizeof *r);
    mp_gpt_config c;
    mp_status st = mp_precision_parse(MODE, &r->prec);
    if (st == MP_OK) st = mp_gpt_parse("gpt:2-2-64-64", &c);
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = LR;
    if (st == MP_OK) st = mp_optim_adamw(&r->opt, &ac);
    if (st == MP_OK) st = mp_gpt_create(&r->gpt, &c, r->prec.compute, r->prec.master_weights, B, r->opt, SEED);
    if (st == MP_OK) st = mp_text_loader(&r->loader, text, B, (size_t)c.block_size, 1, SEED, 1);
    const mp_train_config tc = {
        .precision = &r->prec, .scaler = mp_scaler_defaults(), .lr = {.lr = LR}, .accum = 1, .seed = SEED};
    if (st == MP_OK) st = mp_trainer_create(&r->t, &tc, mp_gpt_model(r->gpt), r->opt, r->loader);
    return st;
}

static void rig_free(rig *r) {
    mp_trainer_free(r->t);
    mp_loader_free(&r->loader);
    mp_gpt_free(r->gpt);
    mp_optim_free(r->opt);
}

/* A parameter's weights as the trainer holds them: its fp32 masters, or w + comp. */
static void weights(const mp_param *p, double *w) {
    const uint16_t *h = p->half;
    for (size_t i = 0; i < p->n; i++)
        w[i] = p->master ? p->master[i]
                         : (double)mp_bf16_to_f32(h[i]) + (p->comp ? (double)mp_bf16_to_f32(p->comp[i]) : 0.0);
}

/* Its moments in fp32: dequantized from a block format, widened from fp16 or bf16 (a parameter too small for
 * the blocks keeps its compute format's), or copied. */
static void moments(const mp_param *p, float *m, float *v) {
    const mp_state_format f = p->state_format;
    if (f == MP_STATE_FP32) {
        memcpy(m, p->state1, p->n * 4), memcpy(v, p->state2, p->n * 4);
        return;
    }
    if (f == MP_STATE_BF16 || f == MP_STATE_FP16) {
        mp_optim_scalar.widen(m, p->hstate1, p->n, f == MP_STATE_BF16);
        mp_optim_scalar.widen(v, p->hstate2, p->n, f == MP_STATE_BF16);
        return;
    }
    const int bits = f == MP_STATE_8BIT ? 8 : f == MP_STATE_4BIT ? 4 : 0;
    const size_t block = f == MP_STATE_4BIT ? 128 : 256;
    mp_optim_scalar.dequant(m, p->qstate1, p->qscale1, mp_optim_state_map(f, 1), bits, p->n, block);
    mp_optim_scalar.dequant(v, p->qstate2, p->qscale2, mp_optim_state_map(f, 2), bits, p->n, block);
}

typedef struct {
    double err, top_lr, ref_top_lr; /* the largest relative error, update / lr, fp32's update / lr */
    long over, eps_set, steps;      /* elements over both bounds; second moments of 0 under a first moment */
    long floored;                   /* second moments held at the floor: torchao's map codes them 0 */
    const char *worst;
} replay_stats;

/* Step k (1-based) of parameter p: its fp32 moments (m, v) carried along p's
 * gradient; w0 its weights before the step, u the update taken. */
static void compare_step(const mp_param *p, const mp_adamw_config *ac, double lr, long k, const double *w0,
                         const double *w1, double *m, double *v, float *qm, float *qv, replay_stats *s) {
    const double b1 = ac->beta1, b2 = ac->beta2, bc1 = 1 - pow(b1, (double)k), bc2 = 1 - pow(b2, (double)k);
    const double decay = p->no_decay ? 1.0 : 1.0 - lr * ac->weight_decay;
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < p->n; i++) {
        const double g = p->grad[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double ref = w0[i] * decay - lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + ac->eps) - w0[i];
        const double u = w1[i] - w0[i];
        d2 += (u - ref) * (u - ref), r2 += ref * ref;
        if (fabs(u) / lr > s->top_lr) s->top_lr = fabs(u) / lr;
        if (fabs(ref) / lr > s->ref_top_lr) s->ref_top_lr = fabs(ref) / lr;
        if (fabs(u) > LR_MULT * lr || (fabs(u) > 2 * fabs(ref) && fabs(u) > lr / 2)) s->over++;
    }
    const double err = r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
    if (err > s->err) s->err = err, s->worst = p->name;
    moments(p, qm, qv);
    for (size_t i = 0; i < p->n; i++) s->eps_set += qv[i] == 0.0f && qm[i] != 0.0f;
    if (p->state_format != MP_STATE_8BIT) return;
    const float least = mp_optim_state_map(MP_STATE_8BIT, 2)->value[1]; /* torchao: under least / 2 codes 0 */
    for (size_t i = 0; i < p->n; i++)
        s->floored += m[i] != 0 && v[i] < 0.5 * least * p->qscale2[i / 256] && qv[i] != 0.0f;
}

static void replay(const mp_text *text, const char *ckpt) {
    const long mark = check_failures;
    rig a, r;
    CHECK(rig_make(&a, text) == MP_OK, "%s", mp_last_error());
    for (long k = 0; k < K && check_failures == mark; k++)
        CHECK(mp_trainer_step(a.t, NULL) == MP_OK, "%s", mp_last_error());
    CHECK(mp_trainer_save(a.t, ckpt, NULL, MP_F32) == MP_OK, "%s", mp_last_error());
    rig_free(&a);
    CHECK(rig_make(&r, text) == MP_OK, "%s", mp_last_error());
    CHECK(mp_trainer_resume(r.t, ckpt, NULL) == MP_OK, "%s", mp_last_error());
    if (check_failures != mark) return rig_free(&r);

    const size_t np = mp_optim_count(r.opt);
    size_t most = 0;
    for (size_t i = 0; i < np; i++)
        if (mp_optim_param(r.opt, i)->n > most) most = mp_optim_param(r.opt, i)->n;
    double *w1 = calloc(most, sizeof *w1);
    double **M = calloc(np, sizeof *M), **V = calloc(np, sizeof *V);
    double **W = calloc(np, sizeof *W);
    float *qm = calloc(most, 4), *qv = calloc(most, 4);
    int ok = w1 && M && V && W && qm && qv;
    for (size_t i = 0; ok && i < np; i++) {
        const mp_param *p = mp_optim_param(r.opt, i);
        ok = (M[i] = calloc(p->n, sizeof **M)) && (V[i] = calloc(p->n, sizeof **V)) && (W[i] = calloc(p->n, 8));
        if (!ok) break;
        moments(p, qm, qv);
        for (size_t j = 0; j < p->n; j++) M[i][j] = qm[j], V[i][j] = qv[j];
    }
    CHECK(ok, "out of memory");
    mp_adamw_config ac = mp_adamw_defaults();
    replay_stats s = {0};
    for (long k = K + 1; ok && k <= K + R && check_failures == mark; k++) {
        for (size_t i = 0; i < np; i++) weights(mp_optim_param(r.opt, i), W[i]);
        mp_step_info info;
        CHECK(mp_trainer_step(r.t, &info) == MP_OK && !info.skipped, "step %ld: %s", k, mp_last_error());
        CHECK((long)mp_optim_steps(r.opt) == k, "the optimizer counts %llu steps at step %ld",
              (unsigned long long)mp_optim_steps(r.opt), k);
        for (size_t i = 0; i < np; i++) {
            const mp_param *p = mp_optim_param(r.opt, i);
            weights(p, w1);
            compare_step(p, &ac, info.lr, k, W[i], w1, M[i], V[i], qm, qv, &s);
        }
        s.steps++;
    }
    CHECK(s.steps == R, "%ld of %d steps replayed", s.steps, R);
    CHECK(s.floored > 0 || mp_cpu_isa() != MP_ISA_AVX2,
          "avx2: the replay did not reach a second moment that torchao's map codes as 0 (the case it guards)");
    CHECK(s.eps_set == 0, "%s: %ld elements held exp_avg_sq 0 under a nonzero exp_avg", mp_isa_name(mp_cpu_isa()),
          s.eps_set);
    CHECK(s.err <= UPDATE_ERR && s.over == 0 && s.top_lr <= LR_MULT,
          "%s: updates against fp32 moments: relative error %.3f (at most %.2f, in %s), %ld elements over the bounds, "
          "largest %.2f lr (fp32 moments %.2f lr)",
          mp_isa_name(mp_cpu_isa()), s.err, UPDATE_ERR, s.worst ? s.worst : "-", s.over, s.top_lr, s.ref_top_lr);
    CHECK_SAY(mark,
              "replay %s: steps %d-%d of %s from step %d's checkpoint: update relative error at most %.3f (%s) "
              "against fp32 moments, largest update %.2f lr (fp32 moments %.2f lr), no exp_avg_sq of 0 "
              "(%ld held at the floor)\n",
              mp_isa_name(mp_cpu_isa()), K + 1, K + R, MODE, K, s.err, s.worst, s.top_lr, s.ref_top_lr, s.floored);
    for (size_t i = 0; i < np; i++) {
        if (M) free(M[i]);
        if (V) free(V[i]);
        if (W) free(W[i]);
    }
    free(M), free(V), free(W), free(w1), free(qm), free(qv);
    rig_free(&r);
}

int main(void) {
    mp_text text; /* the directory's regular files in strcmp order, as scripts/check_stability.sh concatenates them */
    CHECK(mp_text_load(&text, "/usr/share/common-licenses") == MP_OK,
          "the corpus, /usr/share/common-licenses (Debian's base-files), could not be read: %s", mp_last_error());
    if (check_failures) return 1;
    char ckpt[] = "/tmp/mixprec-replay-XXXXXX";
    const int fd = mkstemp(ckpt);
    CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) close(fd);
    mp_set_threads(2);
    const mp_isa top = mp_cpu_isa();
    for (int isa = top >= MP_ISA_AVX2 ? MP_ISA_AVX2 : MP_ISA_SCALAR; fd >= 0 && isa <= (int)top; isa++) {
        if (mp_cpu_set_isa((mp_isa)isa) != MP_OK) continue;
        replay(&text, ckpt);
    }
    mp_cpu_set_isa(top);
    if (fd >= 0) unlink(ckpt);
    mp_text_free(&text);
    return check_failures ? 1 : 0;
}
