/* classify.c - cast one value and say what happened to it. */
#include <math.h>
#include <string.h>

#include "classify.h"

cast_result cast_one(float x, mp_dtype t, int sat) {
    cast_result r = {0, x, ""};
    mp_convert_stats st = {0, 0, 0, 0};
    uint16_t h = 0;
    uint8_t b = 0;
    switch (t) {
    case MP_F16:
        mp_convert(&h, t, &x, MP_F32, 1, &st);
        r.bits = h, r.value = mp_f16_to_f32(h);
        break;
    case MP_BF16:
        mp_convert(&h, t, &x, MP_F32, 1, &st);
        r.bits = h, r.value = mp_bf16_to_f32(h);
        break;
    case MP_E4M3:
        mp_convert(&b, t, &x, MP_F32, 1, &st);
        if (sat) b = mp_f32_to_e4m3_sat(x);
        r.bits = b, r.value = mp_e4m3_to_f32(b);
        break;
    case MP_E5M2:
        mp_convert(&b, t, &x, MP_F32, 1, &st);
        r.bits = b, r.value = mp_e5m2_to_f32(b);
        break;
    case MP_E8M0:
        mp_convert(&b, t, &x, MP_F32, 1, &st);
        r.bits = b, r.value = mp_e8m0_to_f32(b);
        break;
    case MP_E2M1:
        mp_convert(&b, t, &x, MP_F32, 1, &st);
        r.bits = b, r.value = mp_e2m1_to_f32(b);
        break;
    case MP_F32:
        mp_convert(&r.value, t, &x, MP_F32, 1, &st);
        memcpy(&r.bits, &r.value, 4);
        break;
    }
    if (isnan(x)) r.status = "nan";
    else if (t == MP_E8M0 && !(x > 0)) r.status = "invalid"; /* no zero, no negatives: NaN */
    else if (st.overflow || (isinf(x) && r.value != x))
        r.status = (sat && t == MP_E4M3) || t == MP_E2M1 ? "saturated" : "overflow";
    else if (st.underflow) r.status = "underflow";
    else if (st.subnormal) r.status = "subnormal";
    else r.status = r.value == x ? "exact" : "rounded";
    return r;
}
