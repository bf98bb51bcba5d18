/* layers.c - precision per layer: the assignments a mode carries
 * ("+RECIPE=PATTERN", train.h), read from a --layer-precision file, and
 * resolved against a model's Linear layers by name. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

/* What an assignment may name: a recipe, or the compute format. */
static int known_target(const mp_precision *p, const char *t, size_t len) {
    static const char *const recipes[] = {"fp8-delayed", "fp8-current", "mxfp8", "nvfp4"};
    for (size_t i = 0; i < sizeof recipes / sizeof recipes[0]; i++)
        if (strlen(recipes[i]) == len && !strncmp(t, recipes[i], len)) return 1;
    const char *c = mp_format(p->compute)->name;
    return strlen(c) == len && !strncmp(t, c, len) ? 2 : 0;
}

int mp_precision_is_layer_target(const mp_precision *p, const char *t, size_t len) {
    return p && t && known_target(p, t, len) != 0;
}

int mp_precision_layers_quantize(const mp_precision *p) {
    for (const char *s = p ? p->layers : ""; (s = strchr(s, '+')) != NULL; s++) {
        const char *eq = strchr(s, '=');
        if (eq && known_target(p, s + 1, (size_t)(eq - s - 1)) == 1) return 1;
    }
    return 0;
}

mp_recipe_kind mp_precision_layers_kind(const mp_precision *p) {
    mp_recipe_kind k = p->recipe;
    for (const char *s = p->layers; (s = strchr(s, '+')) != NULL; s++) {
        const char *eq = strchr(s, '=');
        char t[32];
        mp_recipe r;
        snprintf(t, sizeof t, "%.*s", eq ? (int)(eq - s - 1) : 0, s + 1);
        if (!eq || known_target(p, t, strlen(t)) != 1 || mp_recipe_parse(t, &r) != MP_OK) continue;
        if (k == MP_RECIPE_NONE) k = r.kind;
        else if (r.kind != k) return MP_RECIPE_NONE; /* several */
    }
    return k;
}

mp_status mp_precision_add_layers(mp_precision *p, const char *target, const char *pattern) {
    if (!p || !target || !pattern) return mp_error(MP_EINVAL, "mp_precision_add_layers: NULL argument");
    const int kind = known_target(p, target, strlen(target));
    if (!kind)
        return mp_error(MP_EINVAL,
                        "layers in '%s': the recipe is fp8-delayed, fp8-current, mxfp8, nvfp4 or %s "
                        "(the compute format)",
                        target, mp_format(p->compute)->name);
    if (kind == 1 && (p->compute != MP_BF16 || p->master_weights != MP_MASTER_FP32))
        return mp_error(MP_EINVAL, "layers in %s: the recipe runs with bf16 compute and fp32 master weights, not in %s",
                        target, p->label);
    if (!*pattern) return mp_error(MP_EINVAL, "layers in %s: an empty pattern", target);
    for (const char *c = pattern; *c; c++)
        if (!isalnum((unsigned char)*c) && !strchr("._*-", *c))
            return mp_error(MP_EINVAL, "layer pattern '%s': '%c' (a pattern is a layer name with * and ranges N-M)",
                            pattern, *c);
    const size_t k = strlen(p->layers), add = strlen(target) + strlen(pattern) + 2;
    if (k + add >= sizeof p->layers)
        return mp_error(MP_EINVAL, "layer assignment '%s=%s': the mode's assignments are too long (%zu bytes at most)",
                        target, pattern, sizeof p->layers - 1);
    snprintf(p->layers + k, sizeof p->layers - k, "+%s=%s", target, pattern);
    const mp_status st = mp_precision_relabel(p);
    if (st != MP_OK) p->layers[k] = '\0';
    return st;
}

static void trim(char *s) {
    char *a = s;
    while (isspace((unsigned char)*a)) a++;
    size_t n = strlen(a);
    while (n && isspace((unsigned char)a[n - 1])) n--;
    memmove(s, a, n);
    s[n] = '\0';
}

/* One line of a --layer-precision file into q (comments and blanks skip). */
static mp_status load_line(mp_precision *q, char *line, const char *path, long no) {
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    trim(line);
    if (!*line) return MP_OK;
    char *eq = strchr(line, '=');
    if (!eq) return mp_error(MP_EINVAL, "%s:%ld: '%s' is not 'pattern = recipe'", path, no, line);
    *eq = '\0';
    char *pat = line, *rec = eq + 1;
    trim(pat), trim(rec);
    const mp_status st = mp_precision_add_layers(q, rec, pat);
    if (st == MP_OK) return st;
    char why[512];
    snprintf(why, sizeof why, "%s", mp_last_error());
    return mp_error(st, "%s:%ld: %s", path, no, why);
}

mp_status mp_precision_load_layers(mp_precision *p, const char *path) {
    if (!p || !path) return mp_error(MP_EINVAL, "mp_precision_load_layers: NULL argument");
    FILE *f = fopen(path, "r");
    if (!f) return mp_error(MP_EIO, "--layer-precision %s: %s", path, strerror(errno));
    mp_precision q = *p;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    snprintf(q.layers_from, sizeof q.layers_from, "%.*s", (int)strcspn(base, "."), base);
    if (!q.layers_from[0]) snprintf(q.layers_from, sizeof q.layers_from, "file");
    char line[512];
    mp_status st = MP_OK;
    for (long no = 1; st == MP_OK && fgets(line, sizeof line, f); no++) st = load_line(&q, line, path, no);
    if (st == MP_OK && ferror(f)) st = mp_error(MP_EIO, "--layer-precision %s: read error", path);
    fclose(f);
    if (st == MP_OK) *p = q;
    return st;
}

/* The decimal number at *s (advanced past it); -1 when none. */
static long number(const char **s) {
    if (!isdigit((unsigned char)**s)) return -1;
    long v = 0;
    while (isdigit((unsigned char)**s)) v = v * 10 + (**s - '0'), (*s)++;
    return v;
}

/* name matches pat: '*' any run of characters (dots too), "N-M" a number in [N, M]. */
static int match(const char *pat, const char *name) {
    for (;;) {
        if (*pat == '*') {
            for (const char *s = name;; s++) {
                if (match(pat + 1, s)) return 1;
                if (!*s) return 0;
            }
        }
        const char *q = pat;
        const long lo = number(&q);
        if (lo >= 0 && *q == '-' && isdigit((unsigned char)q[1])) {
            q++;
            const long hi = number(&q);
            const long v = number(&name);
            if (v < lo || v > hi) return 0;
            pat = q;
            continue;
        }
        if (*pat != *name) return 0;
        if (!*pat) return 1;
        pat++, name++;
    }
}

int mp_layer_match(const char *pattern, const char *name) { return pattern && name && match(pattern, name); }

/* One assignment "+TARGET=PATTERN" of s applied to out; *next past it. */
static mp_status apply_one(const mp_precision *p, const char *s, const char **next, const char *const *names, size_t n,
                           size_t nq, mp_recipe *out) {
    const char *eq = strchr(s, '='), *end = strchr(s + 1, '+');
    if (!end) end = s + strlen(s);
    *next = end;
    char target[32] = "", pat[160] = "";
    snprintf(target, sizeof target, "%.*s", (int)(eq - s - 1), s + 1);
    snprintf(pat, sizeof pat, "%.*s", (int)(end - eq - 1), eq + 1);
    mp_recipe r = {.kind = MP_RECIPE_NONE};
    if (known_target(p, target, strlen(target)) == 1) {
        const mp_status st = mp_recipe_parse(target, &r);
        if (st != MP_OK) return st;
        r.mx_rule = p->recipe == MP_RECIPE_MXFP8 ? p->mx_rule : MP_MX_RCEIL; /* the mode's, or TE's */
    }
    size_t hits = 0, fixed = 0;
    for (size_t i = 0; i < n; i++) {
        if (!match(pat, names[i])) continue;
        if (i < nq) out[i] = r, hits++;
        else fixed++;
    }
    if (!hits && fixed && r.kind != MP_RECIPE_NONE)
        return mp_error(MP_EINVAL,
                        "layer pattern '%s': %s stays in the compute format in every mode (its GEMM takes "
                        "no recipe)",
                        pat, names[nq]);
    if (!hits && !fixed)
        return mp_error(MP_EINVAL, "layer pattern '%s' matches no layer of the model (its layers: %s ... %s)", pat,
                        names[0], names[n - 1]);
    return MP_OK;
}

mp_status mp_precision_layer_recipes(const mp_precision *p, const char *const *names, size_t n, size_t nq,
                                     mp_recipe *out) {
    if (!p || (n && (!names || !out)) || nq > n) return mp_error(MP_EINVAL, "mp_precision_layer_recipes: bad argument");
    mp_recipe whole;
    mp_status st = mp_precision_recipe(p, &whole);
    for (size_t i = 0; st == MP_OK && i < nq; i++) out[i] = whole;
    if (st == MP_OK && p->layers[0] && n == 0)
        return mp_error(MP_EINVAL, "%s: the model names no layers, so it takes no per-layer assignment", p->label);
    for (const char *s = p->layers; st == MP_OK && *s;) st = apply_one(p, s, &s, names, n, nq, out);
    return st;
}
