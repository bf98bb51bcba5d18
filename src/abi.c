/* abi.c - the sizes of the public structs, for bindings that mirror them
 * (the Python package checks each of its ctypes mirrors against these when
 * it loads the library; mixprec.h). */
#include <string.h>

#include "mixprec/mixprec.h"

size_t mp_struct_size(const char *name) {
    static const struct {
        const char *name;
        size_t size;
    } sizes[] = {
        {"mp_format_info", sizeof(mp_format_info)},
        {"mp_convert_stats", sizeof(mp_convert_stats)},
        {"mp_value_counts", sizeof(mp_value_counts)},
        {"mp_scale_counts", sizeof(mp_scale_counts)},
        {"mp_underflow", sizeof(mp_underflow)},
        {"mp_tensor_stats", sizeof(mp_tensor_stats)},
        {"mp_report_skip", sizeof(mp_report_skip)},
        {"mp_report_run", sizeof(mp_report_run)},
        {"mp_report", sizeof(mp_report)},
        {"mp_run_spec", sizeof(mp_run_spec)},
        {"mp_run_result", sizeof(mp_run_result)},
        {"mp_compare_spec", sizeof(mp_compare_spec)},
        {"mp_compare_result", sizeof(mp_compare_result)},
    };
    for (size_t i = 0; name && i < sizeof sizes / sizeof sizes[0]; i++)
        if (strcmp(name, sizes[i].name) == 0) return sizes[i].size;
    return 0;
}
