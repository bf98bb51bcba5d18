/* test_layers.c - precision per layer (train.h): the assignment syntax, its
 * files and their errors, name patterns, and the models trained with an
 * assignment that puts every Linear layer in a recipe (bit for bit the
 * whole-model recipe) or none (bit for bit bf16). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "internal.h"

static const char *const recipes[] = {"fp8-delayed", "fp8-current", "mxfp8", "nvfp4"};

static void syntax(void) {
    const long mark = check_failures;
    mp_precision p;
    CHECK(mp_precision_parse("nvfp4+bf16=transformer.h.3.*+bf16=lm_head", &p) == MP_OK, "%s", mp_last_error());
    CHECK(!strcmp(p.layers, "+bf16=transformer.h.3.*+bf16=lm_head") && p.recipe == MP_RECIPE_NVFP4, "%s", p.layers);
    CHECK(!strcmp(p.label, "nvfp4+bf16=transformer.h.3.*+bf16=lm_head"), "label %s", p.label);
    CHECK(mp_precision_parse("bf16+mxfp8=transformer.h.0-2.mlp.c_fc+master-weights=fp32", &p) == MP_OK, "%s",
          mp_last_error());
    CHECK(!strcmp(p.label, "bf16+mxfp8=transformer.h.0-2.mlp.c_fc") && mp_precision_layers_quantize(&p), "%s", p.label);
    CHECK(mp_precision_set_master_weights(&p, MP_MASTER_NONE) == MP_EINVAL, "master-weights none under a recipe");
    CHECK(mp_precision_parse("nvfp4+bf16=*", &p) == MP_OK && !mp_precision_layers_quantize(&p), "bf16 only");
    const struct {
        const char *spec, *says;
    } bad[] = {
        {"fp16+nvfp4=lm_head", "bf16 compute"},
        {"bf16+nvfp4=", "empty pattern"},
        {"bf16+nvfp4=h,3", "pattern"},
        {"bf16+fp4=lm_head", "unknown switch"},
        {"bf16+master-weights=none+fp8-current=*", "fp32 master"},
        {"bf16+nvfp4=transformer.h.0.attn.c_attn+nvfp4=transformer.h.1.attn.c_attn+nvfp4=transformer.h.2.attn.c_attn",
         "too long"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(mp_precision_parse(bad[i].spec, &p) == MP_EINVAL, "%s taken", bad[i].spec);
        CHECK(strstr(mp_last_error(), bad[i].says) && !strchr(mp_last_error(), '\n'), "%s: %s", bad[i].spec,
              mp_last_error());
    }
    const struct {
        const char *pat, *name;
        int m;
    } mt[] = {{"transformer.h.3.*", "transformer.h.3.mlp.c_fc", 1},
              {"transformer.h.3.*", "transformer.h.13.mlp.c_fc", 0},
              {"transformer.h.0-2.mlp.c_fc", "transformer.h.2.mlp.c_fc", 1},
              {"transformer.h.0-2.mlp.c_fc", "transformer.h.3.mlp.c_fc", 0},
              {"transformer.h.0-2.mlp.c_fc", "transformer.h.1.mlp.c_proj", 0},
              {"*c_proj", "transformer.h.1.attn.c_proj", 1},
              {"*", "lm_head", 1},
              {"lm_head", "lm_head", 1},
              {"lm_hea", "lm_head", 0},
              {"fc1-2", "fc2", 1},
              {"fc1-2", "fc0", 0}};
    for (size_t i = 0; i < sizeof mt / sizeof mt[0]; i++)
        CHECK(mp_layer_match(mt[i].pat, mt[i].name) == mt[i].m, "%s against %s", mt[i].pat, mt[i].name);
    /* resolution: the later assignment wins; patterns that match nothing, or a recipe on lm_head alone */
    const char *names[] = {"transformer.h.0.attn.c_attn", "transformer.h.0.mlp.c_fc", "lm_head"};
    mp_recipe out[2];
    CHECK(mp_precision_parse("bf16+nvfp4=*+mxfp8=*mlp*", &p) == MP_OK, "%s", mp_last_error());
    CHECK(mp_precision_layer_recipes(&p, names, 3, 2, out) == MP_OK && out[0].kind == MP_RECIPE_NVFP4 &&
              out[1].kind == MP_RECIPE_MXFP8 && out[1].mx_rule == MP_MX_RCEIL,
          "resolved");
    CHECK(mp_precision_parse("bf16+nvfp4=transformer.h.9.*", &p) == MP_OK, "parse");
    CHECK(mp_precision_layer_recipes(&p, names, 3, 2, out) == MP_EINVAL && strstr(mp_last_error(), "matches no layer"),
          "%s", mp_last_error());
    CHECK(mp_precision_parse("bf16+nvfp4=lm_head", &p) == MP_OK, "parse");
    CHECK(mp_precision_layer_recipes(&p, names, 3, 2, out) == MP_EINVAL && strstr(mp_last_error(), "lm_head stays"),
          "%s", mp_last_error());
    CHECK(mp_precision_parse("nvfp4+bf16=lm_head", &p) == MP_OK, "parse");
    CHECK(mp_precision_layer_recipes(&p, names, 3, 2, out) == MP_OK && out[0].kind == MP_RECIPE_NVFP4, "keep lm_head");
    CHECK_SAY(mark, "syntax: modes with assignments, labels, patterns with * and ranges, one-line errors\n");
}

static void file_with(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void files(void) {
    const long mark = check_failures;
    char dir[] = "/tmp/mixprec_test_layers_XXXXXX", path[64];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(path, sizeof path, "%s/keep.txt", dir);
    file_with(path, "# the NVFP4 paper's rule\n\ntransformer.h.3.* = bf16   # the last block\n  lm_head=bf16\n");
    mp_precision p;
    CHECK(mp_precision_parse("nvfp4", &p) == MP_OK && mp_precision_load_layers(&p, path) == MP_OK, "%s",
          mp_last_error());
    CHECK(!strcmp(p.layers, "+bf16=transformer.h.3.*+bf16=lm_head") && !strcmp(p.label, "nvfp4+layers=keep"), "%s / %s",
          p.layers, p.label);
    const struct {
        const char *text, *says;
    } bad[] = {{"# ok\ntransformer.h.3.*\n", "keep.txt:2: 'transformer.h.3.*' is not 'pattern = recipe'"},
               {"lm_head = bf16\nfc1 = fp4\n", "keep.txt:2: layers in 'fp4': the recipe is"},
               {"a b = nvfp4\n", "keep.txt:1: layer pattern 'a b'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        file_with(path, bad[i].text);
        CHECK(mp_precision_parse("bf16", &p) == MP_OK && mp_precision_load_layers(&p, path) == MP_EINVAL, "taken");
        CHECK(strstr(mp_last_error(), bad[i].says) && !strcmp(p.label, "bf16"), "%s", mp_last_error());
    }
    CHECK(mp_precision_load_layers(&p, "/nonexistent/layers.txt") == MP_EIO, "missing file");
    unlink(path), rmdir(dir);
    CHECK_SAY(mark, "files: pattern = recipe lines, comments, FILE:LINE errors\n");
}

/* The GPT's names as the run gives them (run_gpt.c). */
static void gpt_names(int L, char (*text)[48], const char **names) {
    static const char *const w[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    for (int i = 0; i <= 4 * L; i++) {
        if (i < 4 * L) snprintf(text[i], 48, "transformer.h.%d.%s", i / 4, w[i % 4]);
        else snprintf(text[i], 48, "lm_head");
        names[i] = text[i];
    }
}

/* The GPT trained 3 steps in mode spec (or with the whole recipe `whole`),
 * its master weights into w (n floats). */
static void gpt_train(const char *spec, const char *whole, float *w, size_t n) {
    mp_gpt_config c = {2, 2, 32, 16, 256, MP_GELU_TANH};
    enum { B = 2, T = 16 };
    int32_t in[B * T], tg[B * T];
    const char *s = "the quick brown fox jumps over the lazy dog ";
    for (int i = 0; i < B * T; i++) in[i] = (int32_t)s[i % 44], tg[i] = (int32_t)s[(i + 1) % 44];
    mp_optim *opt;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 3e-3;
    mp_optim_adamw(&opt, &ac);
    mp_gpt *g;
    CHECK(mp_gpt_create(&g, &c, MP_BF16, MP_MASTER_FP32, B, opt, 5) == MP_OK, "create");
    mp_recipe each[8], r;
    char text[9][48];
    const char *names[9];
    gpt_names(2, text, names);
    mp_precision p;
    if (whole) {
        mp_recipe_parse(whole, &r);
        CHECK(mp_gpt_set_recipe(g, &r, 1) == MP_OK, "%s", mp_last_error());
    } else if (spec && mp_precision_parse(spec, &p) == MP_OK &&
               mp_precision_layer_recipes(&p, names, 9, 8, each) == MP_OK)
        CHECK(mp_gpt_set_layer_recipes(g, each, 1) == MP_OK, "%s", mp_last_error());
    else if (spec) CHECK(0, "%s: %s", spec, mp_last_error());
    float l;
    for (int k = 0; k < 3; k++) {
        CHECK(mp_gpt_train_batch(g, in, tg, B, T, 1.0f, 0, &l) == MP_OK, "train: %s", mp_last_error());
        CHECK(mp_optim_step(opt) == MP_OK, "step");
    }
    size_t k = 0;
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *pp = mp_optim_param(opt, i);
        for (size_t j = 0; j < pp->n && k < n; j++) w[k++] = pp->master[j];
    }
    CHECK(k == n, "%zu weights, %zu expected", k, n);
    mp_gpt_free(g);
    mp_optim_free(opt);
}

static size_t gpt_params(void) {
    const size_t C = 32, V = 256, T = 16, L = 2;
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
}

static void gpt(void) {
    const long mark = check_failures;
    const size_t n = gpt_params();
    float *a = malloc(n * 4), *b = malloc(n * 4), *bf = malloc(n * 4);
    gpt_train(NULL, NULL, bf, n);
    for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++) {
        char spec[64];
        snprintf(spec, sizeof spec, "bf16+%s=*", recipes[k]);
        gpt_train(NULL, recipes[k], a, n);
        gpt_train(spec, NULL, b, n);
        CHECK(!memcmp(a, b, n * 4), "%s: every layer in the recipe is not the whole recipe", spec);
        CHECK(memcmp(a, bf, n * 4) != 0, "%s: the same as bf16", recipes[k]);
        snprintf(spec, sizeof spec, "%s+bf16=transformer.h.*", recipes[k]);
        gpt_train(spec, NULL, b, n);
        CHECK(!memcmp(bf, b, n * 4), "%s: no layer in the recipe is not bf16", spec);
    }
    gpt_train("nvfp4+bf16=transformer.h.1.*", NULL, b, n);
    gpt_train(NULL, "nvfp4", a, n);
    CHECK(memcmp(a, b, n * 4) && memcmp(bf, b, n * 4), "half the layers: neither nvfp4 nor bf16");
    free(a), free(b), free(bf);
    CHECK_SAY(mark, "gpt: all layers in a recipe = the whole recipe, none = bf16, bit for bit\n");
}

/* The MLP 784-less: 3 layers, 5 steps in mode spec or the whole recipe; its weights into w. */
static void mlp_train(const char *spec, const char *whole, float *w, size_t n) {
    mp_mlp_config c = {3, {50, 64, 40, 10}, MP_ACT_RELU, 0};
    enum { B = 24 };
    float x[B * 50];
    int32_t y[B];
    for (size_t i = 0; i < B; i++) {
        y[i] = (int32_t)(i % 10);
        for (size_t k = 0; k < 50; k++)
            x[i * 50 + k] = (float)((k % 10 == (size_t)y[i]) + 0.01 * (double)((i * 7 + k) % 13));
    }
    mp_optim *opt;
    mp_adamw_config ac = mp_adamw_defaults();
    ac.lr = 1e-2;
    mp_optim_adamw(&opt, &ac);
    mp_mlp *m;
    CHECK(mp_mlp_create(&m, &c, MP_BF16, MP_MASTER_FP32, B, opt, 3) == MP_OK, "mlp");
    const char *names[3] = {"fc0", "fc1", "fc2"};
    mp_recipe each[3], r;
    mp_precision p;
    if (whole) {
        mp_recipe_parse(whole, &r);
        CHECK(mp_mlp_set_recipe(m, &r, 1) == MP_OK, "%s", mp_last_error());
    } else if (spec && mp_precision_parse(spec, &p) == MP_OK &&
               mp_precision_layer_recipes(&p, names, 3, 3, each) == MP_OK)
        CHECK(mp_mlp_set_layer_recipes(m, each, 1) == MP_OK, "%s", mp_last_error());
    float l;
    for (int s = 0; s < 5; s++) {
        CHECK(mp_mlp_train_batch(m, x, y, B, 1.0f, 0, &l) == MP_OK, "train: %s", mp_last_error());
        mp_optim_step(opt);
    }
    size_t k = 0;
    for (size_t i = 0; i < mp_optim_count(opt); i++) {
        const mp_param *pp = mp_optim_param(opt, i);
        for (size_t j = 0; j < pp->n && k < n; j++) w[k++] = pp->master[j];
    }
    mp_mlp_free(m);
    mp_optim_free(opt);
}

static void mlp(void) {
    const long mark = check_failures;
    enum { N = 50 * 64 + 64 + 64 * 40 + 40 + 40 * 10 + 10 };
    static float a[N], b[N], bf[N];
    mlp_train(NULL, NULL, bf, N);
    for (size_t k = 0; k < sizeof recipes / sizeof recipes[0]; k++) {
        char spec[64];
        snprintf(spec, sizeof spec, "bf16+%s=fc*", recipes[k]);
        mlp_train(NULL, recipes[k], a, N);
        mlp_train(spec, NULL, b, N);
        CHECK(!memcmp(a, b, sizeof a), "%s: not the whole recipe", spec);
        snprintf(spec, sizeof spec, "%s+bf16=fc0-2", recipes[k]);
        mlp_train(spec, NULL, b, N);
        CHECK(!memcmp(bf, b, sizeof b), "%s: not bf16", spec);
    }
    CHECK_SAY(mark, "mlp: all layers in a recipe = the whole recipe, none = bf16, bit for bit\n");
}

int main(int argc, char **argv) {
    (void)test_quick(argc, argv);
    syntax();
    files();
    gpt();
    mlp();
    return check_report("test_layers");
}
