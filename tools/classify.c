/* classify.c - cast one value and say what happened to it. */
#include <math.h>
#include <string.h>

#include "classify.h"

cast_result cast_one(float x, mp_dtype t, int sat) {
    cast_result r = {0, x, ""};
    mp_convert_stats st = {0, 0, 0, 0, 0.0f};
    /* the code (a uint8_t, uint16_t or uint32_t element) and its value, widened exactly */
    union {
        uint8_t b;
        uint16_t h;
        uint32_t w;
    } code = {0};
    mp_convert(&code, t, &x, MP_F32, 1, &st);
    if (sat && t == MP_E4M3) code.b = mp_f32_to_e4m3_sat(x);
    mp_convert(&r.value, MP_F32, &code, t, 1, NULL);
    const size_t size = mp_format(t) ? mp_format(t)->size : 4;
    r.bits = size == 1 ? code.b : size == 2 ? code.h : code.w;
    if (isnan(x)) r.status = "nan";
    else if (t == MP_E8M0 && !(x > 0)) r.status = "invalid"; /* no zero, no negatives: NaN */
    else if (st.overflow || (isinf(x) && r.value != x))
        r.status = (sat && t == MP_E4M3) || t == MP_E2M1 ? "saturated" : "overflow";
    else if (st.underflow) r.status = "underflow";
    else if (st.subnormal) r.status = "subnormal";
    else r.status = r.value == x ? "exact" : "rounded";
    return r;
}
