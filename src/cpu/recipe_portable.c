/* recipe_portable.c - recipe_kernels.h's one-pass quantizers for any CPU
 * (the scalar path's), on 4-lane vectors; the bits of the AVX2 build and of
 * the reference (tests/test_recipe.c). */
#define RK_LANES 4
#include "../recipe_kernels.h"

const mp_recipe_kernels mp_recipe_portable = MP_RECIPE_KERNELS;
