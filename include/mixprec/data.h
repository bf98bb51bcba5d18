/* mixprec/data.h - datasets: IDX files (plain or gzip) and Fashion-MNIST. */
#ifndef MIXPREC_DATA_H
#define MIXPREC_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where Debian's dataset-fashion-mnist package puts the files. */
#define MP_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* An image classification set: n images of rows x cols uint8 pixels, labels. */
typedef struct mp_dataset {
    size_t n, rows, cols;
    uint8_t *pixels; /* (n, rows * cols) */
    uint8_t *labels; /* (n,) */
    int num_classes; /* max label + 1 */
} mp_dataset;

/* Reads an IDX file of unsigned bytes (type 0x08), gzip-compressed or plain:
 * *ndim dimensions into dims (at most 4), *data the values (malloc'd, caller
 * frees). MP_EIO if it cannot be opened or read, if it is not a regular file
 * (a FIFO, a device, a directory: refused before anything could block), or
 * if it changes while read (mp_read_file's rules, io.h), MP_ECORRUPT (message naming
 * the file and the problem) for a bad magic, type, dimension, a truncated
 * file or trailing bytes. Also MP_EINVAL for a NULL argument, MP_ENOMEM
 * naming the file; on any failure *data is NULL (nothing to free). */
mp_status mp_idx_read(const char *path, uint8_t **data, uint32_t dims[4], int *ndim);

/* Loads an images file (n x rows x cols) and a labels file (n) that must agree.
 * mp_idx_read's statuses for either file, and MP_ECORRUPT naming the file
 * for images that are not 3-d or labels that are not 1-d or not one per
 * image. On failure *d is left zeroed; on MP_OK d owns the pixels and labels:
 * free them with mp_dataset_free. */
mp_status mp_dataset_load(mp_dataset *d, const char *images_path, const char *labels_path);

/* Loads Fashion-MNIST's train (60000) and test (10000) sets from dir (NULL:
 * MP_FASHION_MNIST_DIR); each file may be named with or without ".gz".
 * mp_dataset_load's statuses (MP_EIO naming a missing file, MP_ECORRUPT,
 * MP_ENOMEM), and MP_ECORRUPT when the test images' size differs from the
 * training images'. On failure both are zeroed (mp_dataset_free on them is a
 * no-op). On MP_OK free both with mp_dataset_free. */
mp_status mp_fashion_mnist_load(mp_dataset *train, mp_dataset *test, const char *dir);

void mp_dataset_free(mp_dataset *d); /* NULL-safe; leaves d zeroed */

/* Gathers examples idx[0..B) as fp32 pixel / 255 into x and their labels into y. */
void mp_dataset_batch(const mp_dataset *d, const uint32_t *idx, size_t B,
                      float *x,    // (B, rows * cols)
                      int32_t *y); // (B,)

#ifdef __cplusplus
}
#endif
#endif
