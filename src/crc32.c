/* crc32.c - CRC-32 (IEEE 802.3) for blobs, checkpoints and the ranks' state: zlib's crc32 on any length. */
#include <zlib.h>

#include "internal.h"

uint32_t mp_crc32(uint32_t crc, const void *data, size_t len) {
    for (const Bytef *p = data; len > 0;) { /* zlib takes uInt lengths */
        const uInt k = len > (size_t)1 << 30 ? 1u << 30 : (uInt)len;
        crc = (uint32_t)crc32(crc, p, k);
        p += k, len -= k;
    }
    return crc;
}
