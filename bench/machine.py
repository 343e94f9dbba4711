"""What machine a benchmark ran on, for its report: CPU model and SIMD
flags, cores, memory, kernel, load average. Shared by the bench scripts."""
import os
import platform

SIMD_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni")


def _cpuinfo_field(name):
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(name):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model():
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def cpu_flags():
    """The SIMD levels Strata's kernels care about, as the CPU lists them."""
    flags = _cpuinfo_field("flags")
    if flags is None:
        return "?"
    have = set(flags.split())
    return " ".join(x for x in SIMD_FLAGS if x in have)


def mem_gib():
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        return f"{kb / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "?"


def describe(with_flags=True):
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpu = f"{cpu_model()} ({cpu_flags()})" if with_flags else cpu_model()
    return f"{cpu}, {cores} cores available, {mem_gib()} RAM, {platform.system()} {platform.release()}"


def loadavg():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
