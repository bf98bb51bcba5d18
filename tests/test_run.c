/* test_run.c - output locks (io.h: one writer per output, across processes),
 * then a run as a library call (run.h): the options by their CLI
 * names and their errors, the spec's checks, the help from the mode table,
 * and mp_run itself on a small GPT: its results against its own CSV log and
 * summary, the same bits twice, a resumed run against a straight one, a
 * failure's status and message, and a spec that cannot work. Files live in a
 * mkdtemp directory, removed at the end. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "check.h"

static char root[] = "/tmp/mixprec_test_run_XXXXXX";
static char paths[8][600];

static const char *p(int k, const char *name) {
    snprintf(paths[k], sizeof paths[k], "%s/%s", root, name);
    return paths[k];
}

static void options(void) {
    const long mark = check_failures;
    mp_run_spec s;
    mp_run_defaults(&s);
    CHECK(!strcmp(s.model, "mlp:784-1024-1024-10") && !strcmp(s.precision, "fp32") && s.lr == 1e-3 &&
              s.optimizer == MP_RUN_ADAMW && s.master_weights == -1 && s.shuffle == 1,
          "defaults");
    CHECK(mp_run_option(&s, "lr", "3e-3") == MP_OK && s.lr == (double)3e-3f, "--lr read as a float: %.17g", s.lr);
    CHECK(mp_run_option(&s, "optimizer", "sgd") == MP_OK && s.optimizer == MP_RUN_SGD, "--optimizer");
    CHECK(mp_run_option(&s, "betas", "0.8,0.95") == MP_OK && s.beta1 == 0.8 && s.beta2 == 0.95, "--betas");
    CHECK(mp_run_option(&s, "no-shuffle", NULL) == MP_OK && s.shuffle == 0, "--no-shuffle");
    CHECK(mp_run_option(&s, "layernorm", NULL) == MP_OK && s.layernorm == 1, "--layernorm");
    CHECK(mp_run_option(&s, "master-weights", "none") == MP_OK && s.master_weights == MP_MASTER_NONE, "switch");
    CHECK(mp_run_option(&s, "save-dtype", "bf16") == MP_OK && s.save_dtype == MP_BF16, "--save-dtype");
    CHECK(mp_run_option(&s, "growth-interval", "7") == MP_OK && s.scaler.growth_interval == 7, "scaler int");
    CHECK(mp_run_option(&s, "init-scale", "1024") == MP_OK && s.scaler.init_scale == 1024.0f, "scaler float");
    CHECK(mp_run_option(&s, "threads", "3") == MP_OK && s.threads == 3, "--threads");
    CHECK(mp_run_option(&s, "model", "gpt:1-2-16-16") == MP_OK && !strcmp(s.model, "gpt:1-2-16-16"), "--model");
    /* errors: MP_EINVAL, the CLI's message, nothing changed */
    const mp_run_spec before = s;
    static const struct {
        const char *name, *value, *msg;
    } bad[] = {
        {"lr", "x", "--lr wants a number in [0, 1e+06], not 'x'"},
        {"lr", "2e6", "--lr wants a number in [0, 1e+06], not '2e6'"},
        {"steps", "0", "--steps wants 1 .. 100000000, not '0'"},
        {"act", "tanh", "--act is relu or gelu, not 'tanh'"},
        {"save-dtype", "fp8", "--save-dtype is fp32, fp16 or bf16, not 'fp8'"},
        {"betas", "0.9", "--betas wants B1,B2 in [0, 1), not '0.9'"},
        {"hysteresis", "0", "--hysteresis wants a whole number >= 1, not '0'"},
        {"nope", "1", "unknown option '--nope'"},
        {"layernorm", "1", "--layernorm takes no value"},
        {"lr", NULL, "option --lr needs a value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const mp_status st = mp_run_option(&s, bad[i].name, bad[i].value);
        CHECK(st == MP_EINVAL && !strcmp(mp_last_error(), bad[i].msg), "--%s %s: %d '%s'", bad[i].name,
              bad[i].value ? bad[i].value : "", (int)st, mp_last_error());
    }
    CHECK(mp_run_option(&s, "frozen-every", NULL) == MP_EINVAL && strstr(mp_last_error(), "is gone"), "gone");
    CHECK(!memcmp(&s, &before, sizeof s), "a refused option changed the spec");
    CHECK(mp_run_option_takes_value("lr") == 1 && mp_run_option_takes_value("no-shuffle") == 0 &&
              mp_run_option_takes_value("frozen-every") == 0 && mp_run_option_takes_value("nope") == -1,
          "takes_value");
    /* the help: every option the table sets, every mode of the mode table */
    const char *h = mp_run_options_help();
    CHECK(strstr(h, "  --lr LR ") && strstr(h, "  --no-shuffle ") && strstr(h, "  --allreduce fp32|bf16|fp16") &&
              !strstr(h, "frozen-every"),
          "help options");
    size_t n;
    const mp_precision *m = mp_precisions(&n);
    for (size_t i = 0; i < n; i++) {
        char line[160];
        snprintf(line, sizeof line, " %s", m[i].help);
        CHECK(strstr(h, line), "the help lacks mode %s", m[i].name);
    }
    CHECK_SAY(mark, "options: CLI names, ranges, messages, help from the mode table\n");
}

static void checks(void) {
    const long mark = check_failures;
    mp_run_spec s;
    mp_run_defaults(&s);
    mp_precision p;
    CHECK(mp_run_check(&s, &p) == MP_OK && !strcmp(p.label, "fp32"), "defaults check");
    s.precision = "fp16-dynamic", s.master_weights = MP_MASTER_NONE;
    CHECK(mp_run_check(&s, &p) == MP_OK && !strcmp(p.label, "fp16-dynamic+master-weights=none") &&
              p.master_weights == MP_MASTER_NONE,
          "switch applied: %s", p.label);
    s.precision = "fp32";
    CHECK(mp_run_check(&s, &p) == MP_EINVAL && strstr(mp_last_error(), "--master-weights none"), "%s", mp_last_error());
    mp_run_defaults(&s);
    s.epochs = 2, s.steps = 3;
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL && !strcmp(mp_last_error(), "--epochs and --steps exclude each other"),
          "%s", mp_last_error());
    mp_run_defaults(&s);
    s.model = "gpt:1-3-16-16";
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL && strstr(mp_last_error(), "3 heads"), "%s", mp_last_error());
    mp_run_defaults(&s);
    s.data = "text:x";
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL && strstr(mp_last_error(), "an MLP trains on Fashion-MNIST"), "%s",
          mp_last_error());
    mp_run_defaults(&s);
    s.precision = "fp16-dynamic", s.scaler.growth_factor = 0.5f;
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL, "a scaler that cannot work");
    s.precision = "fp16";
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL && strstr(mp_last_error(), "do nothing for fp16"),
          "loss-scaling options on a mode without loss scaling: %s", mp_last_error());
    s.scaler = mp_scaler_defaults();
    CHECK(mp_run_check(&s, NULL) == MP_OK, "no loss scaling, the scaler's defaults");
    mp_run_defaults(&s);
    s.precision = "fp16-static:512", s.scaler.init_scale = 8;
    CHECK(mp_run_check(&s, &p) == MP_EINVAL && strstr(mp_last_error(), "--init-scale does nothing"), "%s",
          mp_last_error());
    s.scaler = mp_scaler_defaults();
    CHECK(mp_run_check(&s, &p) == MP_OK && p.scaling == MP_SCALING_STATIC && p.static_scale == 512 &&
              !strcmp(p.label, "fp16-static:512"),
          "static");
    /* files: an output is never an input, nor another output */
    mp_run_defaults(&s);
    s.model = "gpt:1-2-16-16", s.data = "text:/etc/hostname", s.log = "/etc/hostname";
    CHECK(mp_run_check(&s, NULL) == MP_EINVAL &&
              strstr(mp_last_error(), "--log /etc/hostname is the file --data reads"),
          "%s", mp_last_error());
    s.log = "/tmp/../tmp/mixprec_x.csv", s.save = "/tmp/mixprec_x.csv";
    CHECK(mp_run_check_files(&s) == MP_EINVAL && strstr(mp_last_error(), "--log and --save name the same file"), "%s",
          mp_last_error());
    s.save = "/tmp/mixprec_y.ckpt", s.summary = "";
    CHECK(mp_run_check_files(&s) == MP_EINVAL && strstr(mp_last_error(), "--summary is empty"), "%s", mp_last_error());
    s.summary = NULL;
    CHECK(mp_run_check_files(&s) == MP_OK && mp_run_check_files(NULL) == MP_EINVAL, "distinct files");
    CHECK_SAY(mark, "check: modes with switches, options that exclude each other, models, data, scalers, files\n");
}

/* The lines of a file (0 when it cannot be read). */
static long lines_of(const char *path) {
    FILE *f = fopen(path, "r");
    long n = 0;
    for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
    if (f) fclose(f);
    return n;
}

static void gpt_spec(mp_run_spec *s, const char *corpus) {
    mp_run_defaults(s);
    s->model = "gpt:1-2-16-16", s->data = corpus, s->batch = 4, s->lr = 3e-3, s->threads = 2, s->eval_windows = 4;
    s->precision = "fp16-dynamic";
}

static void runs(void) {
    const long mark = check_failures;
    FILE *c = fopen(p(0, "c.txt"), "w");
    CHECK(c, "corpus");
    if (!c) return;
    for (int i = 1; i <= 40; i++) fprintf(c, "The cat sat on the mat, and the dog sat on the log number %d.\n", i);
    fclose(c);
    char corpus[700];
    snprintf(corpus, sizeof corpus, "text:%s", p(0, "c.txt"));

    /* a run with its files: the result, the log and the summary agree */
    mp_run_spec s;
    gpt_spec(&s, corpus);
    s.steps = 6, s.eval_every = 3, s.log = p(1, "a.csv"), s.summary = p(2, "a.json"), s.save = p(3, "a.ckpt");
    mp_run_result a;
    mp_status st = mp_run(&s, NULL, &a);
    CHECK(st == MP_OK, "run: %s", mp_last_error());
    CHECK(a.nsteps == 6 && !strcmp(a.model_kind, "gpt") && !strcmp(a.precision.label, "fp16-dynamic") &&
              !strcmp(a.compute_format, "fp16") && !a.invalid,
          "result");
    CHECK(a.neval == 2 && a.eval_steps[0] == 3 && a.eval_steps[1] == 6 && a.eval_losses[1] == a.eval_loss &&
              isfinite(a.eval_loss) && a.eval_loss > 0,
          "evaluations: %ld", a.neval);
    for (long i = 0; i < a.nsteps; i++) CHECK(isfinite(a.loss[i]) && a.scale[i] == 65536.0f, "step %ld", i);
    CHECK(a.last_loss == a.loss[5] && a.final_scale == 65536.0, "last");
    CHECK(a.ntensors > 0 && a.tensor_names[0][0] && a.tensor_totals[0].bwd_elements > 0, "tensors");
    CHECK(lines_of(s.log) == 7, "log lines %ld", lines_of(s.log));
    CHECK(a.summary && access(s.summary, R_OK) == 0 && access(s.save, R_OK) == 0, "files");
    FILE *f = fopen(s.summary, "r");
    char text[1 << 16];
    const size_t nt = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[nt] = 0;
    CHECK(a.summary && !strcmp(text, a.summary), "the summary written is the result's");
    cJSON *j = a.summary ? cJSON_Parse(a.summary) : NULL;
    const cJSON *prec = cJSON_GetObjectItem(j, "precision"), *steps = cJSON_GetObjectItem(j, "steps"),
                *vl = cJSON_GetObjectItem(j, "val_loss");
    CHECK(cJSON_IsString(prec) && !strcmp(prec->valuestring, "fp16-dynamic") && cJSON_IsNumber(steps) &&
              steps->valuedouble == 6 && cJSON_IsNumber(vl) && vl->valuedouble == a.eval_loss,
          "summary fields");
    cJSON_Delete(j);

    /* silent, without files: the same bits; then a resumed run equals a straight one */
    mp_run_spec q;
    gpt_spec(&q, corpus);
    q.steps = 6, q.eval_every = 3;
    mp_run_result b;
    CHECK(mp_run(&q, NULL, &b) == MP_OK && b.nsteps == 6 && !memcmp(a.loss, b.loss, 6 * sizeof *a.loss) &&
              b.eval_loss == a.eval_loss && b.summary,
          "the same spec, the same bits");
    mp_run_result_free(&b);
    gpt_spec(&q, corpus);
    q.steps = 3, q.save = p(4, "half.ckpt");
    CHECK(mp_run(&q, NULL, &b) == MP_OK && b.nsteps == 3, "first half: %s", mp_last_error());
    mp_run_result_free(&b);
    gpt_spec(&q, corpus);
    q.steps = 6, q.resume = p(4, "half.ckpt");
    CHECK(mp_run(&q, NULL, &b) == MP_OK && b.nsteps == 3 && !memcmp(a.loss + 3, b.loss, 3 * sizeof *a.loss) &&
              b.eval_loss == a.eval_loss,
          "resumed: %s", mp_last_error());
    mp_run_result_free(&b);
    mp_run_result_free(&a);

    /* progress on out, failures on err */
    FILE *out = tmpfile(), *err = tmpfile();
    const mp_run_io io = {.out = out, .err = err, .prefix = "test"};
    gpt_spec(&q, corpus);
    q.steps = 2;
    CHECK(mp_run(&q, &io, &b) == MP_OK, "with io");
    mp_run_result_free(&b);
    char buf[4096];
    rewind(out);
    const size_t no = fread(buf, 1, sizeof buf - 1, out);
    buf[no] = 0;
    CHECK(strstr(buf, "train: gpt:1-2-16-16, fp16-dynamic, adamw lr 0.003") && strstr(buf, "result: validation loss"),
          "out: %s", buf);
    gpt_spec(&q, corpus);
    q.steps = 2, q.data = "text:/nonexistent/corpus";
    st = mp_run(&q, &io, &b);
    CHECK(st != MP_OK && st != MP_EINVAL && !b.invalid && b.nsteps == 0 && strstr(mp_last_error(), "/nonexistent"),
          "a corpus that is not there: %d %s", (int)st, mp_last_error());
    mp_run_result_free(&b);
    rewind(err);
    const size_t ne = fread(buf, 1, sizeof buf - 1, err);
    buf[ne] = 0;
    CHECK(!strncmp(buf, "test: ", 6) && strstr(buf, "/nonexistent") && strchr(buf, '\n') == buf + ne - 1,
          "one line on err: %s", buf);
    fclose(out), fclose(err);

    /* a spec that cannot work: MP_EINVAL, r->invalid, nothing run or written */
    gpt_spec(&q, corpus);
    q.steps = 2, q.epochs = 1, q.log = p(5, "never.csv");
    CHECK(mp_run(&q, NULL, &b) == MP_EINVAL && b.invalid && b.nsteps == 0 && access(q.log, F_OK) != 0, "invalid");
    mp_run_result_free(&b);
    CHECK(mp_run(NULL, NULL, &b) == MP_EINVAL && mp_run(&q, NULL, NULL) == MP_EINVAL, "NULL");
    mp_run_result_free(NULL);
    CHECK_SAY(mark, "mp_run: results = log = summary, same bits twice, resumed = straight, failures, invalid specs\n");
}

/* A model of its own that fails at its second training batch, with a loader of one fixed batch. */
typedef struct {
    mp_param *w;
    int calls;
    mp_tensor_stats st;
} failing;

static mp_status f_train(void *impl, const mp_batch *b, float scale, int acc, float *loss) {
    failing *m = impl;
    (void)b, (void)scale, (void)acc;
    if (++m->calls == 2) return mp_set_error(MP_EIO, "the model's disk is gone");
    memset(m->w->grad, 0, 4 * sizeof *m->w->grad);
    *loss = 1.0f;
    return MP_OK;
}
static mp_status f_eval(void *impl, const mp_batch *b, double *sum, double *count, double *correct) {
    (void)impl, (void)correct;
    *sum += 1.0 * (double)b->n, *count += (double)b->n;
    return MP_OK;
}
static size_t f_nstats(const void *impl) { return (void)impl, 1; }
static const mp_tensor_stats *f_stats(const void *impl, size_t i) { return (void)i, &((const failing *)impl)->st; }
static void f_reset(void *impl) { (void)impl; }
static mp_status f_load(void *impl, const mp_safetensors *st) { return (void)impl, (void)st, MP_EUNSUPPORTED; }
static size_t f_tensors(const void *impl, mp_tensor *out, size_t cap) { return (void)impl, (void)out, (void)cap, 0; }
static void f_free(void *impl) { free(impl); }
static const mp_model_ops failing_ops = {.kind = "failing",
                                         .train_batch = f_train,
                                         .eval_batch = f_eval,
                                         .nstats = f_nstats,
                                         .stats = f_stats,
                                         .reset_stats = f_reset,
                                         .load = f_load,
                                         .tensors = f_tensors,
                                         .free = f_free};
static mp_status f_create(void *ctx, const mp_precision *p, mp_optim *opt, size_t rows, uint64_t seed, mp_model *out) {
    (void)ctx, (void)rows, (void)seed;
    failing *m = calloc(1, sizeof *m);
    const float w0[4] = {0};
    mp_status st = m ? mp_optim_add_as(opt, "w", w0, 4, p->compute, p->master_weights, p->compute, &m->w) : MP_ENOMEM;
    if (st != MP_OK) return free(m), st;
    snprintf(m->st.name, sizeof m->st.name, "w");
    *out = (mp_model){&failing_ops, m};
    return MP_OK;
}
static const float fx[4] = {0};
static const int32_t fy[1] = {0};
static mp_status f_batch(void *impl, uint64_t s, mp_batch *b) {
    (void)impl, (void)s;
    *b = (mp_batch){.n = 1, .t = 1, .x = fx, .targets = fy, .features = 4};
    return MP_OK;
}
static mp_status f_eval_batch(void *impl, size_t i, mp_batch *b) {
    (void)impl;
    *b = (mp_batch){.n = i == 0, .t = 1, .x = fx, .targets = fy, .features = 4};
    return MP_OK;
}
static void f_loader_free(void *impl) { (void)impl; }
static mp_status f_loader(void *ctx, size_t rows, int shuffle, uint64_t seed, mp_loader *out, long *per) {
    (void)ctx, (void)rows, (void)shuffle, (void)seed;
    *out = (mp_loader){NULL, f_batch, f_eval_batch, f_loader_free};
    *per = 100;
    return MP_OK;
}

static void compares(void) {
    const long mark = check_failures;
    char corpus[700];
    snprintf(corpus, sizeof corpus, "text:%s", p(0, "c.txt"));
    mp_compare_spec c = {.precisions = "fp32,fp16-dynamic+master-weights=none", .out = p(1, "cmp")};
    gpt_spec(&c.run, corpus);
    c.run.precision = NULL, c.run.steps = 3;
    mp_compare_result r;
    mp_status st = mp_compare(&c, NULL, &r);
    CHECK(st == MP_OK && r.n == 2 && !r.invalid && !strcmp(r.modes[1].name, "fp16-dynamic+master-weights=none") &&
              r.modes[0].result.nsteps == 3 && r.modes[1].result.precision.master_weights == MP_MASTER_NONE,
          "compare: %s", mp_last_error());
    static const char *const files[] = {
        "fp32.csv", "fp32.json", "fp32.txt", "fp16-dynamic+master-weights=none.json", "summary.json", "report.html"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[800];
        snprintf(path, sizeof path, "%s/%s", c.out, files[i]);
        CHECK(access(path, R_OK) == 0, "%s", path);
    }
    cJSON *j = r.summary ? cJSON_Parse(r.summary) : NULL;
    const cJSON *runs = cJSON_GetObjectItem(j, "runs");
    CHECK(cJSON_GetArraySize(runs) == 2 && r.reading && strstr(r.reading, "Every mode trained the same network"),
          "summary and reading");
    const cJSON *first = cJSON_GetArrayItem(runs, 0), *loss = cJSON_GetObjectItem(first, "last_train_loss");
    CHECK(cJSON_IsNumber(loss) && loss->valuedouble == r.modes[0].result.last_loss, "the summary holds the runs'");
    cJSON_Delete(j);
    mp_compare_result_free(&r);
    c.precisions = "fp32,bogus";
    CHECK(mp_compare(&c, NULL, &r) == MP_EINVAL && r.invalid && r.n == 0, "a bad mode");
    mp_compare_result_free(&r);
    c.precisions = "fp32", c.run.log = "x.csv";
    CHECK(mp_compare(&c, NULL, &r) == MP_EINVAL && r.invalid, "a field compare sets");
    mp_compare_result_free(&r);
    /* a mode whose run fails after a step: the comparison goes on, fails, and summary.json names it */
    const mp_run_model fm = {.create = f_create, .loader = f_loader};
    mp_compare_defaults(&c);
    c.run.model = "failing", c.run.custom = &fm, c.run.steps = 3, c.run.batch = 1, c.precisions = "fp32,bf16";
    c.out = p(2, "cmpfail");
    CHECK(mp_compare(&c, NULL, &r) == MP_EIO && r.n == 2 && r.modes[0].result.nsteps == 1 && r.summary &&
              strstr(r.summary, "\"failed\"") && strstr(r.summary, "the model's disk is gone"),
          "a failed mode in summary.json: %s", mp_last_error());
    mp_compare_result_free(&r);
    CHECK_SAY(mark,
              "mp_compare: modes side by side, their files, summary.json, the reading, bad specs, failed modes\n");
}

/* Whether a child process (another writer) gets MP_EIO with a message holding
 * want from mp_output_lock(path) (write 0) or mp_write_file_atomic(path) (1). */
static int refused_in_child(const char *path, int write, const char *want) {
    const pid_t c = fork();
    if (c == 0) {
        const mp_status st =
            write ? mp_write_file_atomic(path, &(mp_chunk){"child\n", 6}, 1) : mp_output_lock("--log", path);
        if (st == MP_OK && !write) mp_output_unlock(path);
        _exit(st == MP_EIO && strstr(mp_last_error(), want) ? 0 : 1);
    }
    int ws = 0;
    return c > 0 && waitpid(c, &ws, 0) == c && WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
}

static long file_text(const char *path, char *text, size_t cap) {
    FILE *f = fopen(path, "r");
    const size_t n = f ? fread(text, 1, cap - 1, f) : 0;
    text[n] = 0;
    if (f) fclose(f);
    return f ? (long)n : -1;
}

/* mp_output_lock: one writer per output. Its thread takes it again freely and
 * writes the output under it; another process is refused, by the lock and by
 * a one-piece write, naming this process; unlocked, PATH.lock is gone and the
 * other process gets it; a file of someone else's at PATH.lock is refused and
 * kept. */
static void locks(void) {
    const long mark = check_failures;
    const char *out = p(0, "locked.csv");
    char lk[700], text[128], want[64];
    snprintf(lk, sizeof lk, "%s.lock", out);
    snprintf(want, sizeof want, "another mixprec process (pid %ld) is writing it", (long)getpid());
    CHECK(mp_output_lock("--log", out) == MP_OK, "lock: %s", mp_last_error());
    CHECK(mp_output_lock("--log", out) == MP_OK, "the lock taken again by its thread: %s", mp_last_error());
    snprintf(text, sizeof text, "mixprec lock, pid %ld\n", (long)getpid());
    char got[128];
    CHECK(file_text(lk, got, sizeof got) > 0 && !strcmp(got, text), "the lock file holds '%s'", got);
    CHECK(refused_in_child(out, 0, want), "a second process took the lock");
    CHECK(refused_in_child(out, 1, want), "a second process wrote a locked output");
    CHECK(mp_write_file_atomic(out, &(mp_chunk){"mine\n", 5}, 1) == MP_OK, "the holder's write: %s", mp_last_error());
    CHECK(file_text(out, got, sizeof got) == 5 && !strcmp(got, "mine\n"), "the output holds '%s'", got);
    mp_output_unlock(out);
    CHECK(access(lk, F_OK) != 0, "the lock file is still there after the unlock");
    CHECK(!refused_in_child(out, 0, "writing it"), "the lock refused after it was let go");
    CHECK(access(lk, F_OK) != 0, "the child's lock file is still there after it ended");
    FILE *f = fopen(lk, "w");
    if (f) fputs("someone's notes\n", f), fclose(f);
    CHECK(mp_output_lock("--log", out) == MP_EIO && strstr(mp_last_error(), "is a file mixprec did not write"),
          "a file of someone else's at PATH.lock: %s", mp_last_error());
    CHECK(file_text(lk, got, sizeof got) > 0 && !strcmp(got, "someone's notes\n"), "the file at PATH.lock changed");
    CHECK(mp_write_file_atomic(out, &(mp_chunk){"x", 1}, 1) == MP_EIO && file_text(out, got, sizeof got) == 5,
          "a write under someone else's PATH.lock");
    unlink(lk);
    CHECK_SAY(mark, "output locks: one writer per output (a second process refused, naming the first), a foreign "
                    "PATH.lock kept\n");
}

int main(void) {
    if (!mkdtemp(root)) return perror("mkdtemp"), 1;
    locks();
    options();
    checks();
    runs();
    compares();
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
    return check_report("test_run");
}
