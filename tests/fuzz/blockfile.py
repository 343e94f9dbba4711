"""KV block files as the disk tier writes them (src/cache/disk_file.h):
read the fields, change them, and recompute both CRC-32Cs so a forged file
passes the checksums (what `forge` does), for the disk fault injector."""
import struct

MAGIC = b"STRKV\0\0\1"
HDR = 136
OFF = {"magic": 0, "version": 8, "dtype": 12, "n_tokens": 16, "reserved1": 20, "payload_bytes": 24,
       "model_fp": 32, "hash": 64, "parent": 96, "header_crc": 128, "reserved2": 132}


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t.append(c)
    return t


_T = _table()


def crc32c(data, crc=0):
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ _T[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def n_tokens(b):
    return struct.unpack_from("<I", b, 16)[0]


def tokens_end(b):
    return HDR + 4 * n_tokens(b)


def reseal(b):
    """Recomputes the header CRC and the trailing CRC of b (a bytearray)."""
    nt = min(n_tokens(b), max(0, (len(b) - HDR) // 4))
    hcrc = crc32c(bytes(b[HDR:HDR + 4 * nt]), crc32c(bytes(b[:128])))
    struct.pack_into("<I", b, 128, hcrc)
    if len(b) >= HDR + 4:
        struct.pack_into("<I", b, len(b) - 4, crc32c(bytes(b[:-4])))
    return b


def flip(b, off, bit=0):
    b[off] ^= 1 << bit
    return b
