/* devmem.c - what every device-memory implementation shares (devmem.h). */
#include "backend/devmem.h"

int devmem_copy_sync(const devmem *d, int stream, void *dst, const void *src, size_t bytes, devmem_dir dir,
                     strata_err *err) {
    int rc = devmem_copy(d, stream, dst, src, bytes, dir, err);
    return rc ? rc : devmem_sync(d, stream, err);
}
