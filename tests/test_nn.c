/* test_nn.c - the MLP's gradients against central differences of an fp64
 * forward written here, for ReLU/GELU, with and without layer norm; loss
 * falls on a small problem in every compute format; parsing and loading. */
#include <math.h>

#include "check.h"
#include "internal.h"

/* fp64 forward of the same model, reading the fp32 master weights */
static double loss64(const mp_mlp_config *c, mp_optim *o, const float *x, const int32_t *y, size_t B) {
    double a[64 * 16], z[64 * 16];
    const size_t in0 = (size_t)c->widths[0];
    for (size_t i = 0; i < B * in0; i++) a[i] = x[i];
    size_t pi = 0;
    double total = 0;
    for (int l = 0; l < c->nlayers; l++) {
        const size_t in = (size_t)c->widths[l], out = (size_t)c->widths[l + 1];
        const float *W = mp_optim_param(o, pi++)->master, *bias = mp_optim_param(o, pi++)->master;
        const float *lw = NULL, *lb = NULL;
        if (c->layernorm && l < c->nlayers - 1)
            lw = mp_optim_param(o, pi++)->master, lb = mp_optim_param(o, pi++)->master;
        for (size_t b = 0; b < B; b++)
            for (size_t j = 0; j < out; j++) {
                double s = bias[j];
                for (size_t k = 0; k < in; k++) s += a[b * in + k] * W[j * in + k];
                z[b * out + j] = s;
            }
        if (l == c->nlayers - 1) {
            for (size_t b = 0; b < B; b++) {
                double mx = -INFINITY, se = 0;
                for (size_t j = 0; j < out; j++) mx = fmax(mx, z[b * out + j]);
                for (size_t j = 0; j < out; j++) se += exp(z[b * out + j] - mx);
                total += log(se) + mx - z[b * out + (size_t)y[b]];
            }
            break;
        }
        for (size_t b = 0; b < B; b++) {
            double *r = z + b * out;
            if (lw) {
                double m = 0, v = 0;
                for (size_t j = 0; j < out; j++) m += r[j];
                m /= out;
                for (size_t j = 0; j < out; j++) v += (r[j] - m) * (r[j] - m);
                v /= out;
                for (size_t j = 0; j < out; j++) r[j] = (r[j] - m) / sqrt(v + 1e-5) * lw[j] + lb[j];
            }
            for (size_t j = 0; j < out; j++) {
                const double t = r[j];
                a[b * out + j] = c->act == MP_ACT_GELU
                                     ? 0.5 * t * (1 + tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)))
                                     : (t > 0 ? t : 0);
            }
        }
    }
    return total / (double)B;
}

static void check_gradients(int act, int ln) {
    mp_mlp_config c;
    CHECK(mp_mlp_parse("mlp:6-5-4-3", &c) == MP_OK, "parse");
    c.act = act ? MP_ACT_GELU : MP_ACT_RELU, c.layernorm = ln;
    mp_optim *o;
    mp_optim_sgd(&o, NULL);
    mp_mlp *m;
    CHECK(mp_mlp_create(&m, &c, MP_F32, 0, 8, o, 7) == MP_OK, "create");
    enum { B = 4 };
    float x[B * 6];
    const int32_t y[B] = {0, 2, 1, 2};
    uint64_t s = 99;
    for (int i = 0; i < B * 6; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2 - 1);
    }
    float loss;
    mp_optim_zero_grad(o);
    CHECK(mp_mlp_train_batch(m, x, y, B, 1.0f, 1, &loss) == MP_OK, "train batch");
    CHECK(fabs(loss - loss64(&c, o, x, y, B)) < 1e-5, "loss %g vs fp64 %g", (double)loss, loss64(&c, o, x, y, B));
    long bad = 0, checked = 0;
    for (size_t pi = 0; pi < mp_optim_count(o); pi++) {
        mp_param *p = mp_optim_param(o, pi);
        for (size_t i = 0; i < p->n; i++) {
            const float keep = p->master[i];
            const float h = 1e-3f;
            p->master[i] = keep + h;
            const double up = loss64(&c, o, x, y, B);
            p->master[i] = keep - h;
            const double dn = loss64(&c, o, x, y, B);
            p->master[i] = keep;
            const double num = (up - dn) / (2.0 * (double)h);
            checked++;
            if (fabs(p->grad[i] - num) > 2e-3 * (1 + fabs(num))) {
                if (bad++ < 3) fprintf(stderr, "  %s[%zu]: %g vs %g\n", p->name, i, (double)p->grad[i], num);
            }
        }
    }
    CHECK(bad == 0 && checked > 60, "%s%s: %ld of %ld gradients differ from central differences", act ? "gelu" : "relu",
          ln ? "+ln" : "", bad, checked);
    mp_mlp_free(m);
    mp_optim_free(o);
}

/* every compute format learns a separable toy problem */
static void check_loss_falls(void) {
    const mp_dtype cts[3] = {MP_F32, MP_F16, MP_BF16};
    for (int k = 0; k < 4; k++) {
        mp_mlp_config c;
        mp_mlp_parse("mlp:8-32-32-4", &c);
        c.layernorm = k == 3;
        mp_adamw_config ac = mp_adamw_defaults();
        ac.lr = 3e-3;
        mp_optim *o;
        mp_optim_adamw(&o, &ac);
        mp_mlp *m;
        CHECK(mp_mlp_create(&m, &c, k == 3 ? MP_BF16 : cts[k], k == 3, 64, o, 1) == MP_OK, "create");
        float x[64 * 8];
        int32_t y[64];
        uint64_t s = 5;
        float first = 0, last = 0;
        for (int step = 0; step < 150; step++) {
            for (int b = 0; b < 64; b++) {
                y[b] = b % 4;
                for (int j = 0; j < 8; j++) {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    x[b * 8 + j] = (float)((double)(s >> 11) * 0x1p-53) + (j % 4 == y[b] ? 1.0f : 0.0f);
                }
            }
            mp_optim_zero_grad(o);
            float loss;
            CHECK(mp_mlp_train_batch(m, x, y, 64, 1.0f, 1, &loss) == MP_OK, "batch");
            mp_optim_step(o);
            if (step == 0) first = loss;
            last = loss;
        }
        CHECK(last < 0.25f * first, "%s%s: loss %g -> %g", mp_format(k == 3 ? MP_BF16 : cts[k])->name,
              k == 3 ? "-pure+ln" : "", (double)first, (double)last);
        const mp_tensor_stats *ls = mp_mlp_stats(m, 0);
        /* fc0's backward stores per step: its weight gradient (32 x 8), the gradient of its output
         * from fc1 (64 x 32) and through the activation (64 x 32), and through the layer norm */
        const uint64_t per_step = 32 * 8 + 2 * 64 * 32 + (k == 3 ? 64 * 32 : 0);
        CHECK(ls && strcmp(ls->name, "fc0") == 0 && ls->bwd_elements == 150 * per_step,
              "fc0: %llu backward stores counted, %llu expected", ls ? (unsigned long long)ls->bwd_elements : 0ull,
              (unsigned long long)(150 * per_step));
        mp_mlp_free(m);
        mp_optim_free(o);
    }
}

static void check_parse_and_load(void) {
    mp_mlp_config c;
    CHECK(mp_mlp_parse("mlp:784-1024-1024-10", &c) == MP_OK && c.nlayers == 3 && c.widths[3] == 10, "parse");
    CHECK(mp_mlp_parse("mlp:784", &c) == MP_EINVAL, "one width");
    CHECK(mp_mlp_parse("mlp:784-0-10", &c) == MP_EINVAL, "zero width");
    CHECK(mp_mlp_parse("cnn:1-2", &c) == MP_EINVAL, "not an mlp");
    CHECK(mp_mlp_parse("mlp:3-4-", &c) == MP_EINVAL, "trailing dash");
    /* save, load into a fresh model, same parameters */
    mp_mlp_parse("mlp:5-7-3", &c);
    c.layernorm = 1;
    mp_optim *o1, *o2;
    mp_optim_sgd(&o1, NULL), mp_optim_sgd(&o2, NULL);
    mp_mlp *a, *b;
    mp_mlp_create(&a, &c, MP_F16, 0, 4, o1, 1);
    mp_mlp_create(&b, &c, MP_F16, 0, 4, o2, 2);
    mp_tensor ts[4 * MP_MLP_MAX_LAYERS];
    const size_t n = mp_mlp_tensors(a, ts, 4 * MP_MLP_MAX_LAYERS);
    CHECK(mp_mlp_tensors(a, NULL, 0) == 6 && n == 6, "6 tensors (fc0, ln0, fc1)");
    const char *path = "test_nn_weights.safetensors";
    CHECK(mp_safetensors_write(path, ts, n, NULL) == MP_OK, "write");
    mp_safetensors st;
    CHECK(mp_safetensors_read(path, &st) == MP_OK, "read");
    CHECK(mp_mlp_load(b, &st) == MP_OK, "load");
    long diff = 0;
    for (size_t i = 0; i < mp_optim_count(o1); i++) {
        diff += memcmp(mp_optim_param(o1, i)->master, mp_optim_param(o2, i)->master, mp_optim_param(o1, i)->n * 4) != 0;
        diff += memcmp(mp_optim_param(o1, i)->half ? mp_optim_param(o1, i)->half : mp_optim_param(o1, i)->master,
                       mp_optim_param(o2, i)->half ? mp_optim_param(o2, i)->half : mp_optim_param(o2, i)->master,
                       mp_optim_param(o1, i)->n * (mp_optim_param(o1, i)->half ? 2 : 4)) != 0;
    }
    CHECK(diff == 0, "loaded parameters and half copies equal the saved ones");
    mp_safetensors_free(&st);
    /* a model of another shape refuses the file */
    mp_mlp_config c2;
    mp_mlp_parse("mlp:5-8-3", &c2);
    mp_optim *o3;
    mp_optim_sgd(&o3, NULL);
    mp_mlp *d;
    mp_mlp_create(&d, &c2, MP_F32, 0, 4, o3, 1);
    mp_safetensors_read(path, &st);
    CHECK(mp_mlp_load(d, &st) == MP_ECORRUPT && strstr(mp_last_error(), "fc0.weight"), "shape mismatch: %s",
          mp_last_error());
    mp_safetensors_free(&st);
    remove(path);
    mp_mlp_free(a), mp_mlp_free(b), mp_mlp_free(d);
    mp_optim_free(o1), mp_optim_free(o2), mp_optim_free(o3);
    /* non-finite input is refused */
    float x[5] = {0, NAN, 0, 0, 0};
    int32_t y = 0;
    float loss;
    mp_optim *o4;
    mp_optim_sgd(&o4, NULL);
    mp_mlp *e;
    mp_mlp_parse("mlp:5-3", &c);
    mp_mlp_create(&e, &c, MP_F32, 0, 1, o4, 1);
    CHECK(mp_mlp_train_batch(e, x, &y, 1, 1.0f, 0, &loss) == MP_EINVAL && strstr(mp_last_error(), "not finite"),
          "NaN input");
    mp_mlp_free(e), mp_optim_free(o4);
}

/* accumulate = 0 replaces whatever the gradients held (NaN here) with exactly
 * what zero_grad + accumulate = 1 gives; a second accumulating batch adds. */
static void check_accumulate(void) {
    static const mp_dtype cts[3] = {MP_F32, MP_F16, MP_BF16};
    for (int k = 0; k < 3; k++) {
        mp_mlp_config c;
        mp_mlp_parse("mlp:40-33-17-5", &c);
        c.layernorm = 1;
        mp_optim *o;
        mp_optim_sgd(&o, NULL);
        mp_mlp *m;
        CHECK(mp_mlp_create(&m, &c, cts[k], 0, 16, o, 3) == MP_OK, "create");
        float x[16 * 40], loss;
        int32_t y[16];
        for (int i = 0; i < 16 * 40; i++) x[i] = (float)((i * 37) % 101) / 101.0f;
        for (int i = 0; i < 16; i++) y[i] = i % 5;
        size_t total = 0;
        for (size_t pi = 0; pi < mp_optim_count(o); pi++) total += mp_optim_param(o, pi)->n;
        float *first = malloc(total * 4);
        size_t off = 0;
        for (size_t pi = 0; pi < mp_optim_count(o); pi++) {
            mp_param *p = mp_optim_param(o, pi);
            for (size_t i = 0; i < p->n; i++) p->grad[i] = NAN;
        }
        CHECK(mp_mlp_train_batch(m, x, y, 16, 1.0f, 0, &loss) == MP_OK, "replace");
        for (size_t pi = 0; pi < mp_optim_count(o); pi++, off += mp_optim_param(o, pi - 1)->n)
            memcpy(first + off, mp_optim_param(o, pi)->grad, mp_optim_param(o, pi)->n * 4);
        mp_optim_zero_grad(o);
        mp_mlp_train_batch(m, x, y, 16, 1.0f, 1, &loss);
        long differ = 0, not_doubled = 0, nonzero = 0;
        off = 0;
        for (size_t pi = 0; pi < mp_optim_count(o); pi++) {
            const mp_param *p = mp_optim_param(o, pi);
            differ += memcmp(first + off, p->grad, p->n * 4) != 0;
            off += p->n;
        }
        mp_mlp_train_batch(m, x, y, 16, 1.0f, 1, &loss);
        off = 0;
        for (size_t pi = 0; pi < mp_optim_count(o); pi++) {
            const mp_param *p = mp_optim_param(o, pi);
            float big = 0; /* layer norm's sums over rows round differently when they start from a value */
            for (size_t i = 0; i < p->n; i++) big = fmaxf(big, fabsf(first[off + i]));
            for (size_t i = 0; i < p->n; i++) {
                const float f = first[off + i];
                nonzero += f != 0.0f;
                not_doubled += !(fabsf(p->grad[i] - 2.0f * f) <= 1e-6f * big);
            }
            off += p->n;
        }
        CHECK(differ == 0 && not_doubled == 0 && nonzero > (long)total / 2,
              "%s: accumulate 0 vs zero_grad + 1: %ld params differ; second batch not added: %ld of %zu",
              mp_format(cts[k])->name, differ, not_doubled, total);
        free(first);
        mp_mlp_free(m), mp_optim_free(o);
    }
}

/* Weight-gradient counts (has_wgrad, wgrad_*): 8 of fc0's 32 units are dead
 * (bias -100: ReLU gives 0 for every example), so fc0's rows and fc1's
 * columns of those units get gradient values exactly 0 in any format. In
 * fp32, dead equals the zeros of the fp32 gradients and nothing is lost;
 * with accumulate = 1 the zeros counted are those of the gradient summed so
 * far. In fp16 with a tiny loss scale, dead equals the zeros of the same
 * products in fp32 (the histogram's plain fp32 GEMM), and lost equals the
 * zeros stored minus those: the values that underflowed. */
static uint64_t weight_zeros(mp_optim *o) {
    uint64_t z = 0;
    for (size_t pi = 0; pi < mp_optim_count(o); pi++) {
        const mp_param *p = mp_optim_param(o, pi);
        if (strstr(p->name, ".weight"))
            for (size_t i = 0; i < p->n; i++) z += p->grad[i] == 0.0f;
    }
    return z;
}

static void wgrad_totals(const mp_mlp *m, uint64_t *elements, uint64_t *lost, uint64_t *dead) {
    *elements = *lost = *dead = 0;
    for (int l = 0; l < mp_mlp_get_config(m)->nlayers; l++) {
        const mp_tensor_stats *s = mp_mlp_stats(m, l);
        CHECK(s->has_wgrad, "fc%d has a weight gradient", l);
        *elements += s->wgrad_elements, *lost += s->wgrad_lost, *dead += s->wgrad_dead;
    }
}

static void check_wgrad_counts(void) {
    enum { B = 64, IN = 8 };
    float x[B * IN];
    int32_t y[B];
    uint64_t s = 11;
    for (int b = 0; b < B; b++) {
        y[b] = b % 4;
        for (int j = 0; j < IN; j++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            x[b * IN + j] = (float)((double)(s >> 11) * 0x1p-53);
        }
    }
    for (int k = 0; k < 2; k++) {
        const mp_dtype ct = k ? MP_F16 : MP_F32;
        mp_mlp_config c;
        mp_mlp_parse("mlp:8-32-32-4", &c);
        mp_optim *o;
        mp_optim_sgd(&o, NULL);
        mp_mlp *m;
        CHECK(mp_mlp_create(&m, &c, ct, 0, B, o, 1) == MP_OK, "create");
        float *bias0 = mp_optim_param(o, 1)->master; /* fc0.bias, fp32 in every mode */
        for (int u = 0; u < 8; u++) bias0[u] = -100.0f;
        const uint64_t n_weights = 32 * 8 + 32 * 32 + 4 * 32;
        uint64_t elements, lost, dead, hist_zeros = 0, bins[84];
        float loss;
        mp_mlp_reset_stats(m);
        if (ct == MP_F32) {
            CHECK(mp_mlp_train_batch(m, x, y, B, 1.0f, 0, &loss) == MP_OK, "fp32 batch");
            const uint64_t z1 = weight_zeros(o);
            CHECK(mp_mlp_train_batch(m, x, y, B, 1.0f, 1, &loss) == MP_OK, "fp32 second batch");
            const uint64_t z2 = weight_zeros(o);
            wgrad_totals(m, &elements, &lost, &dead);
            CHECK(elements == 2 * n_weights && lost == 0 && dead == z1 + z2 && z1 >= 8 * 8 + 32 * 8,
                  "fp32: %llu values, %llu lost, %llu dead, zeros %llu + %llu", (unsigned long long)elements,
                  (unsigned long long)lost, (unsigned long long)dead, (unsigned long long)z1, (unsigned long long)z2);
        } else {
            memset(bins, 0, sizeof bins);
            mp_mlp_histogram(m, bins, -64, 84, &hist_zeros);
            CHECK(mp_mlp_train_batch(m, x, y, B, 0x1p-16f, 0, &loss) == MP_OK, "fp16 batch");
            mp_mlp_histogram(m, NULL, 0, 0, NULL);
            const uint64_t stored = weight_zeros(o);
            wgrad_totals(m, &elements, &lost, &dead);
            CHECK(elements == n_weights && dead == hist_zeros && lost == stored - hist_zeros && lost > 0 &&
                      dead >= 8 * 8 + 32 * 8,
                  "fp16 at scale 2^-16: %llu values, %llu lost, %llu dead; %llu stored zeros, %llu fp32 zeros",
                  (unsigned long long)elements, (unsigned long long)lost, (unsigned long long)dead,
                  (unsigned long long)stored, (unsigned long long)hist_zeros);
        }
        mp_mlp_free(m), mp_optim_free(o);
    }
}

int main(void) {
    for (int act = 0; act < 2; act++)
        for (int ln = 0; ln < 2; ln++) check_gradients(act, ln);
    check_loss_falls();
    check_accumulate();
    check_wgrad_counts();
    check_parse_and_load();
    return check_report("test_nn");
}
