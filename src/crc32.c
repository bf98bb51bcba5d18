/* crc32.c - CRC-32 (IEEE 802.3, as zlib's crc32) for blobs and checkpoints. */
#include "internal.h"

uint32_t mp_crc32(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}
