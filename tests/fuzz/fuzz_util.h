/* fuzz_util.h - what the libFuzzer targets share: the entry point's
 * prototype and a file holding the fuzzer's bytes for the parsers that
 * take a path or a descriptor (gguf_open, disk_file_load).
 * Header-only so each target stays one .c file. */
#ifndef STRATA_FUZZ_UTIL_H
#define STRATA_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An anonymous in-memory file holding data (memfd: no disk writes, gone
 * on close); its path /proc/self/fd/N goes to path. Returns the fd or -1. */
static inline int fuzz_memfd(const uint8_t *data, size_t size, char *path, size_t cap) {
    int fd = memfd_create("strata-fuzz", MFD_CLOEXEC);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        off += (size_t)w;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
