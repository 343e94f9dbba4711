/* fs.h - small file-system helpers shared by the tiers and the server. */
#ifndef STRATA_BASE_FS_H
#define STRATA_BASE_FS_H

/* mkdir -p with mode 0755: 0, or -1 with errno set (an existing directory
 * is fine). Paths longer than 4095 bytes fail with ENAMETOOLONG. */
int fs_mkdir_p(const char *path);

#endif
