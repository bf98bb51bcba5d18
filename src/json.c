/* json.c - the library's JSON text (summaries, safetensors headers) printed
 * one way: cJSON's text with every byte sequence that is not UTF-8 replaced
 * by the escape \ufffd (U+FFFD, the replacement character). cJSON copies a
 * string's bytes as they are (a path holding 0xFF, say), and JSON is UTF-8
 * (RFC 8259): json.loads and the safetensors readers refuse such text. The
 * bytes outside strings are ASCII, so each replacement lands in a string. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "internal.h"

/* The length of the UTF-8 sequence at s (1-4), or 0 when it is not one:
 * no overlong forms, no surrogates, nothing above U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *s) {
    const unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xbf) return 0;
    return n;
}

char *mp_utf8_repair(const char *text, const char *replacement) {
    const size_t rl = strlen(replacement);
    size_t len = 0, bad = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        const size_t n = utf8_len(p);
        if (n) p += n, len += n;
        else p++, bad++; /* one replacement for each byte that starts no sequence */
    }
    char *out = malloc(len + bad * rl + 1);
    if (!out) return NULL;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        const size_t n = utf8_len(p);
        if (n) memcpy(o, p, n), o += n, p += n;
        else memcpy(o, replacement, rl), o += rl, p++;
    }
    *o = '\0';
    return out;
}

char *mp_json_print(const cJSON *j, int formatted) {
    char *raw = formatted ? cJSON_Print(j) : cJSON_PrintUnformatted(j);
    if (!raw) return NULL;
    char *text = mp_utf8_repair(raw, "\\ufffd");
    cJSON_free(raw);
    return text;
}
