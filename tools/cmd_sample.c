/* cmd_sample.c - `mixprec sample`: text from a trained GPT, as nanoGPT's sample.py. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: mixprec sample --from CKPT [options]\n\n"
    "Generates text with a GPT trained by `mixprec train --model gpt:... --save CKPT`\n"
    "(or any safetensors file of nanoGPT's names, with --model). Prints the prompt and\n"
    "what follows it; bytes other than printable ASCII, newline and tab are shown as\n"
    "\\xNN. Past T tokens the context is the last T, as nanoGPT's generate.\n\n"
    "  --from FILE        checkpoint or weights (safetensors)\n"
    "  --model gpt:L-H-C-T  the architecture, when FILE does not say (checkpoints do)\n"
    "  --gelu tanh|erf    likewise (tanh)\n"
    "  --prompt TEXT      the start (a newline)\n"
    "  --tokens N         bytes to generate (200)\n"
    "  --temperature X    divides the logits, > 0 (1)\n"
    "  --top-k K          sample among the K most likely bytes only (0: all)\n"
    "  --seed S           (1)\n";

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One byte drawn from softmax(logits / temperature) over the top k. */
static int draw(const float *logits, int V, double temperature, int k, uint64_t *rng) {
    double p[1024];
    float kth = -INFINITY;
    if (k > 0 && k < V) { /* the k-th largest logit: keep logits >= it, as torch.topk then masking */
        float sorted[1024];
        memcpy(sorted, logits, (size_t)V * sizeof *sorted);
        for (int i = 0; i < k; i++)
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) {
                    const float t = sorted[i];
                    sorted[i] = sorted[j], sorted[j] = t;
                }
        kth = sorted[k - 1];
    }
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) mx = logits[i] >= kth && logits[i] > mx ? logits[i] : mx;
    for (int i = 0; i < V; i++) sum += p[i] = logits[i] >= kth ? exp(((double)logits[i] - mx) / temperature) : 0.0;
    double u = (double)(splitmix(rng) >> 11) * 0x1p-53 * sum;
    for (int i = 0; i < V; i++)
        if ((u -= p[i]) < 0) return i;
    for (int i = V - 1; i >= 0; i--)
        if (p[i] > 0) return i;
    return 0;
}

static void put_byte(int b) {
    if ((b >= 0x20 && b < 0x7f) || b == '\n' || b == '\t') putchar(b);
    else printf("\\x%02x", b);
}

static int run(int argc, char **argv) {
    const char *cmd = "sample", *from = NULL, *model = NULL, *prompt = "\n";
    long tokens = 200, topk = 0, seed = 1;
    float temperature = 1.0f;
    mp_gelu_form gelu = MP_GELU_TANH;
    int gelu_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (cli_is_help(&cmd_sample, a)) return 0;
        if (!(v = cli_value(cmd, argc, argv, &i))) return CLI_USAGE;
        if (!strcmp(a, "--from")) from = v;
        else if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--prompt")) prompt = v;
        else if (!strcmp(a, "--gelu")) {
            if (strcmp(v, "tanh") && strcmp(v, "erf")) return cli_usage_error(cmd, "--gelu is tanh or erf, not '%s'", v);
            gelu = strcmp(v, "erf") ? MP_GELU_TANH : MP_GELU_ERF, gelu_given = 1;
        } else if (!strcmp(a, "--tokens")) {
            if (cli_parse_long(v, 0, 100000000, &tokens)) return cli_usage_error(cmd, "--tokens wants 0 .. 1e8, not '%s'", v);
        } else if (!strcmp(a, "--top-k")) {
            if (cli_parse_long(v, 0, 1024, &topk)) return cli_usage_error(cmd, "--top-k wants 0 .. 1024, not '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_long(v, 0, 2147483647L, &seed)) return cli_usage_error(cmd, "--seed wants a whole number, not '%s'", v);
        } else if (!strcmp(a, "--temperature")) {
            if (cli_parse_float(v, &temperature) || !(temperature > 0) || !isfinite(temperature))
                return cli_usage_error(cmd, "--temperature wants a number > 0, not '%s'", v);
        } else return cli_usage_error(cmd, "unknown option '%s'", a);
    }
    if (!from) return cli_usage_error(cmd, "--from CKPT is required");
    mp_safetensors st;
    if (mp_safetensors_read(from, &st) != MP_OK) return fprintf(stderr, "mixprec sample: %s\n", mp_last_error()), 1;
    const char *mm = mp_safetensors_meta(&st, "model"), *mg = mp_safetensors_meta(&st, "gelu");
    if (!model) model = mm;
    if (!gelu_given && mg) gelu = strcmp(mg, "erf") ? MP_GELU_TANH : MP_GELU_ERF;
    int ret = 1;
    mp_gpt_config c;
    mp_optim *opt = NULL;
    mp_gpt *g = NULL;
    int32_t *ctx = NULL;
    float *logits = NULL;
    if (!model) {
        fprintf(stderr, "mixprec sample: %s does not say which model it holds: give --model gpt:L-H-C-T\n", from);
        goto done;
    }
    if (mp_gpt_parse(model, &c) != MP_OK) {
        ret = cli_usage_error(cmd, "%s", mp_last_error());
        goto done;
    }
    c.gelu = gelu;
    if (mp_optim_sgd(&opt, NULL) != MP_OK || mp_gpt_create(&g, &c, MP_F32, 0, 1, opt, 0) != MP_OK ||
        mp_gpt_load(g, &st) != MP_OK) {
        fprintf(stderr, "mixprec sample: %s: %s\n", from, mp_last_error());
        goto done;
    }
    const size_t T = (size_t)c.block_size, np = strlen(prompt), total = np + (size_t)tokens;
    ctx = malloc((total ? total : 1) * sizeof *ctx);
    logits = malloc((size_t)c.vocab_size * sizeof *logits);
    if (!ctx || !logits || c.vocab_size > 1024) {
        fprintf(stderr, "mixprec sample: out of memory\n");
        goto done;
    }
    if (np == 0) {
        fprintf(stderr, "mixprec sample: --prompt is empty\n");
        goto done;
    }
    for (size_t i = 0; i < np; i++) ctx[i] = (uint8_t)prompt[i], put_byte((uint8_t)prompt[i]);
    uint64_t rng = (uint64_t)seed;
    for (size_t n = np; n < total; n++) {
        const size_t len = n < T ? n : T;
        if (mp_gpt_next_logits(g, ctx + n - len, len, logits) != MP_OK) {
            fprintf(stderr, "\nmixprec sample: %s\n", mp_last_error());
            goto done;
        }
        ctx[n] = draw(logits, c.vocab_size, temperature, (int)topk, &rng);
        put_byte(ctx[n]);
    }
    putchar('\n');
    ret = fflush(stdout) == 0 ? 0 : 1;
done:
    free(ctx), free(logits);
    mp_gpt_free(g);
    mp_optim_free(opt);
    mp_safetensors_free(&st);
    return ret;
}

const cli_command cmd_sample = {"sample", "generate text with a trained GPT", usage, run};
