"""Shared parts of the fuzz and fault harnesses (tests/fuzz/README.md).

Each harness runs a bounded number of seeded cases within a time limit and
keeps a Tally: cases, crashes (a process died by a signal or a sanitizer
abort), sanitizer reports (ASan/UBSan/LSan text in a process's stderr),
hangs (a case past its timeout), bad loads (a result that is wrong without
a crash: a 5xx, an unclear error, a reply that differs from a cold
server's). Every failing case is saved under the output folder with how to
reproduce it. Only the standard library; servers listen on 127.0.0.1 only
and every process started here is stopped here.
"""
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
GEN = os.environ.get("TEST_DATA_DIR", os.path.join(ROOT, "tests", "data", "gen"))
TINY_MODEL = os.path.join(GEN, "models", "llama-q4_1.gguf")
TINY_MODEL_ID = "llama-q4_1"  # what the server calls it (the file name)
REAL_MODEL = os.environ.get("STRATA_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "UndefinedBehaviorSanitizer", "AddressSanitizer:DEADLYSIGNAL")

# Sanitizer runtime settings for every process started: report, keep the
# server running after a UBSan report (it is counted), no core files.
SAN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:disable_coredump=1:handle_abort=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=0",
}


def child_env(extra=None):
    env = dict(os.environ)
    env.update(SAN_ENV)
    env.update(extra or {})
    return env


def sanitizer_report(text):
    """The first sanitizer line in text, or None."""
    for line in text.splitlines():
        if any(m in line for m in SANITIZER_MARKERS):
            return line.strip()[:200]
    return None


class Tally:
    """What one harness saw; failures are kept with their reproduction."""

    FIELDS = ("cases", "crashes", "http_5xx", "sanitizer", "hangs", "bad_loads")

    def __init__(self, name, out_dir):
        self.name = name
        self.out_dir = os.path.join(out_dir, name)
        self.counts = dict.fromkeys(self.FIELDS, 0)
        self.failures = []
        self.started = time.time()
        self.ended = None  # set by done()

    def case(self):
        self.counts["cases"] += 1
        return self.counts["cases"] - 1

    def fail(self, kind, index, why, data=None, suffix=".bin"):
        """Counts a failure of kind (a FIELDS name) and saves its input."""
        self.counts[kind] += 1
        path = None
        if data is not None:
            os.makedirs(self.out_dir, exist_ok=True)
            path = os.path.join(self.out_dir, f"case-{index:06d}-{kind}{suffix}")
            with open(path, "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())
        self.failures.append(f"{self.name} case {index}: {kind}: {why}" + (f" (input: {path})" if path else ""))

    def bad(self):
        return sum(self.counts[k] for k in self.FIELDS if k != "cases")

    def done(self):
        self.ended = time.time()
        return self

    def seconds(self):
        return (self.ended or time.time()) - self.started


def print_table(tallies):
    head = f"{'harness':<12}{'cases':>8}{'crashes':>9}{'5xx':>6}{'sanitizer':>11}{'hangs':>7}{'bad loads':>11}{'seconds':>9}"
    print(head)
    print("-" * len(head))
    for t in tallies:
        c = t.counts
        print(f"{t.name:<12}{c['cases']:>8}{c['crashes']:>9}{c['http_5xx']:>6}{c['sanitizer']:>11}{c['hangs']:>7}"
              f"{c['bad_loads']:>11}{t.seconds():>9.1f}")
    for t in tallies:
        for f in t.failures[:20]:
            print("  " + f)
        if len(t.failures) > 20:
            print(f"  ... {len(t.failures) - 20} more in {t.out_dir}")


class Budget:
    """At most count cases and seconds of wall time."""

    def __init__(self, count, seconds):
        self.count, self.deadline = count, time.time() + seconds

    def cases(self):
        for i in range(self.count):
            if time.time() > self.deadline:
                return
            yield i


def run_cmd(argv, timeout, env=None):
    """Runs argv to completion or timeout. Returns (rc, stdout, stderr, hung);
    rc is negative for a signal. A hung process group is killed."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env(env),
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), True


def classify_exit(rc, err, hung):
    """The failure kind of a finished CLI run, or None when it was clean:
    exit 0, or a nonzero exit below 128 with an error message."""
    if hung:
        return "hangs", "timed out"
    rep = sanitizer_report(err)
    if rep:
        return "sanitizer", rep
    if rc < 0 or rc >= 128:
        return "crashes", f"exit status {rc}"
    if rc != 0 and not err.strip():
        return "bad_loads", f"exit status {rc} with no error message"
    return None


# ---- mutations ------------------------------------------------------------

INTERESTING_INTS = [0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000,
                    0xFFFFFFFF, 0x100000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF]


def mutate_bytes(rng, data, n_mut=None, region=None):
    """A few byte-level mutations (flip, set, interesting ints, insert,
    delete, duplicate, truncate) within region (start, end) of data."""
    b = bytearray(data)
    lo, hi = region or (0, len(b))
    for _ in range(n_mut or rng.randint(1, 4)):
        hi = min(hi, len(b))
        if hi <= lo:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            continue
        pos = rng.randrange(lo, hi)
        op = rng.randrange(7)
        if op == 0:
            b[pos] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[pos] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.randrange(256)])
        elif op == 2:
            width = rng.choice([4, 8])
            v = rng.choice(INTERESTING_INTS) & ((1 << (8 * width)) - 1)
            b[pos:pos + width] = v.to_bytes(width, "little")
        elif op == 3:
            b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4:
            del b[pos:pos + rng.randint(1, 16)]
        elif op == 5:
            n = rng.randint(1, 64)
            b[pos:pos] = b[pos:pos + n]
        else:
            del b[pos if rng.random() < 0.5 else rng.randrange(lo, hi):]
    return bytes(b)


# ---- servers ----------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `strata serve` on 127.0.0.1, its stderr in a log file."""

    def __init__(self, strata, model, log_path, *extra, wait_s=120):
        self.port = free_port()
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.log_seen = 0
        argv = [strata, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(self.port), *extra]
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, env=child_env())
        self.ready = self._wait_healthy(wait_s)

    def _wait_healthy(self, wait_s):
        deadline = time.time() + wait_s
        while time.time() < deadline and self.proc.poll() is None:
            try:
                if self.request("GET", "/health", None, timeout=2)[0] == 200:
                    return True
            except OSError:
                time.sleep(0.05)
        return False

    def alive(self):
        return self.proc.poll() is None

    def request(self, method, path, body, timeout=30, headers=None):
        """(status, body bytes). Raises OSError (socket.timeout included)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def new_log_text(self):
        """Log text written since the last call."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_seen)
            text = f.read()
        self.log_seen += len(text)
        return text.decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Stops the server; returns its exit status (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = None
        self.log.close()
        return rc


def seeded(seed, name):
    """A random generator per harness, reproducible from the run's seed."""
    return random.Random(f"{seed}:{name}")
