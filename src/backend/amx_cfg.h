/* amx_cfg.h - the AMX tile configuration block (LDTILECFG's 64-byte
 * operand, palette 1), shared by the AMX attention and matmul kernels.
 * Each kernel loads its own tile shapes per call (the tile state is per
 * thread, and the kinds of kernel interleave on one thread). */
#ifndef STRATA_AMX_CFG_H
#define STRATA_AMX_CFG_H

#include <immintrin.h>
#include <stdint.h>

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16]; /* bytes per row of tile i */
    uint8_t rows[16];
} amx_cfg;

/* LDTILECFG of c. The barrier makes every byte of c be stored first: GCC
 * 12 does not see that the instruction reads all 64 (it dropped the
 * memset of the unused tiles' fields, and the load faulted). */
static inline __attribute__((target("amx-tile"))) void amx_cfg_load(const amx_cfg *c) {
    __asm__ volatile("" : : "r"(c) : "memory");
    _tile_loadconfig(c);
}

#endif
