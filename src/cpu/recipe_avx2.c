/* recipe_avx2.c - recipe_kernels.h's one-pass quantizers on 8-lane vectors,
 * built with AVX2 flags; the bits of the portable build and of the reference
 * (tests/test_recipe.c). */
#define RK_LANES 8
#include "../recipe_kernels.h"

const mp_recipe_kernels mp_recipe_avx2 = MP_RECIPE_KERNELS;
