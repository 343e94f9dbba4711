/* fs.h - small file-system helpers shared by the tiers and the server. */
#ifndef STRATA_BASE_FS_H
#define STRATA_BASE_FS_H

#include <stddef.h>
#include <stdint.h>

/* mkdir -p with mode 0755: 0, or -1 with errno set (an existing directory
 * is fine). Paths longer than 4095 bytes fail with ENAMETOOLONG. */
int fs_mkdir_p(const char *path);

/* The small state files kept beside the disk tier (exact-replay map,
 * Responses store) share one frame: magic[8] | model fp[32] | body |
 * SHA-256 of everything before it.
 * fs_save_framed writes it to a temp file, syncs and renames it over
 * path, so a crash leaves the old file or the new one, never half of
 * one. 0, or -1 (the temp file removed). */
int fs_save_framed(const char *path, const char magic[8], const uint8_t model_fp[32], const void *body, size_t len);
/* Reads such a file whole (at most max_len bytes) and checks magic, model
 * and checksum: a malloc'd copy of the body, or NULL for a missing,
 * oversized, truncated or mismatched file (callers ignore it whole). */
uint8_t *fs_load_framed(const char *path, const char magic[8], const uint8_t model_fp[32], size_t max_len,
                        size_t *body_len);

#endif
