"""Disk fault injector: damaged, truncated, swapped, forged and foreign
KV cache files, litter in the cache folder, SIGKILLs during writes, two
servers on one folder, a read-only folder and a full disk.

Every scenario ends with the same requests (greedy, temperature 0, with
logprobs) answered by a server on the damaged folder; the answers must be
byte-identical to a cold server's (no prefix cache at all). A different
answer, a server that does not start, or a damaged file that was not
quarantined (or a foreign one that was) is a bad load; a server that dies
or prints a sanitizer report is a crash or sanitizer finding.
Mounting needs root with CAP_SYS_ADMIN (tmpfs for the full disk and the
read-only folder); without it a non-root user gets a chmod'ed folder and
the full disk is reported as not run."""
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import blockfile as bf
import harness

BLOCK_TOKENS = 16
SERVE_ARGS = ["--ctx", "512", "--parallel", "2", "-t", "1", "--cache-block-tokens", str(BLOCK_TOKENS)]
WORDS = ("cache block layer token budget model reply stream file index chain hash quarantine "
         "writer reader eviction prefix tail header payload").split()


def prompts(rng, n):
    """n prompts of ~60-120 words; the second continues the first (a
    partial match over whole blocks plus a tail)."""
    out = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(60, 120))) for _ in range(n)]
    if n > 1:
        out[1] = out[0] + " and then " + out[1][:200]
    return out


def ask(server, prompt):
    """The answer that must match: text and every logprob, as JSON text."""
    body = {"model": harness.TINY_MODEL_ID, "prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 1, "seed": 7}
    status, raw = server.request("POST", "/v1/completions", body, timeout=120)
    if status != 200:
        return f"HTTP {status}: {raw[:200]!r}"
    choice = json.loads(raw)["choices"][0]
    return json.dumps([choice["text"], choice.get("logprobs")], sort_keys=True)


class Lab:
    """The strata binary, a work folder, the prompts and the cold answers."""

    def __init__(self, strata, seed, out_dir, n_prompts=3):
        self.strata = strata
        self.rng = harness.seeded(seed, "disk")
        self.work = tempfile.mkdtemp(prefix="strata-fuzz-disk-")
        self.logs = os.path.join(out_dir, "disk")
        os.makedirs(self.logs, exist_ok=True)
        self.prompts = prompts(self.rng, n_prompts)
        self.n_logs = 0
        cold = self.serve(os.path.join(self.work, "unused"), "--no-prefix-cache", "--no-cache-disk")
        self.cold = [ask(cold, p) for p in self.prompts]
        cold.stop()
        if any(c.startswith("HTTP") for c in self.cold):
            raise RuntimeError(f"disk faults: the cold server did not answer: {self.cold}")
        self.pristine = os.path.join(self.work, "pristine")
        warm = self.serve(self.pristine)
        for p in self.prompts:
            ask(warm, p)
        warm.stop()
        if not self.blocks(self.pristine):
            raise RuntimeError(f"disk faults: no block files were written to {self.pristine}")

    def serve(self, cache_dir, *extra):
        self.n_logs += 1
        log = os.path.join(self.logs, f"serve-{self.n_logs:04d}.log")
        args = [*SERVE_ARGS, *extra] if "--no-cache-disk" in extra else [*SERVE_ARGS, "--cache-dir", cache_dir, *extra]
        return harness.Server(self.strata, harness.TINY_MODEL, log, *args)

    def fresh_copy(self, name):
        d = os.path.join(self.work, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.pristine, d, symlinks=True)
        return d

    def blocks(self, d):
        return sorted(glob.glob(os.path.join(d, "??", "*.kv")))

    def close(self):
        subprocess.run(["chmod", "-R", "u+w", self.work], check=False)
        shutil.rmtree(self.work, ignore_errors=True)


def answers_match(tally, index, lab, server, what):
    """Asks every prompt; counts a crash, sanitizer report or bad load."""
    try:
        got = [ask(server, p) for p in lab.prompts]
    except OSError as e:
        kind = "crashes" if not server.alive() else "hangs"
        tally.fail(kind, index, f"{what}: {type(e).__name__}: {e} (log {server.log_path})")
        return False
    rep = harness.sanitizer_report(server.new_log_text())
    if rep:
        tally.fail("sanitizer", index, f"{what}: {rep} (log {server.log_path})")
    for i, (g, c) in enumerate(zip(got, lab.cold)):
        if g != c:
            kind = "http_5xx" if g.startswith("HTTP 5") else "bad_loads"
            tally.fail(kind, index, f"{what}: prompt {i} differs from a cold server: {g[:120]} vs {c[:120]}")
            return False
    return True


def stop_checked(tally, index, server, what):
    rc = server.stop()
    rep = harness.sanitizer_report(server.new_log_text())
    if rep:
        tally.fail("sanitizer", index, f"{what}: at exit: {rep} (log {server.log_path})")
    if rc != 0:
        tally.fail("crashes", index, f"{what}: exit status {rc} on SIGTERM (log {server.log_path})")


# ---- damage to one file: each returns (victims, expect) ----------------------
# expect: "quarantine" (moved to DIR/quarantine), "left" (kept in place,
# not used: another model's or version's), "gone" (removed), "any".

def rewrite(path, fn):
    with open(path, "rb") as f:
        b = bytearray(f.read())
    b = fn(b)
    with open(path, "wb") as f:
        f.write(b)


def truncate_to(size_of):
    def apply(lab, d, victim):
        rewrite(victim, lambda b: b[:max(0, size_of(b))])
        return [victim], "quarantine"
    return apply


def flip_field(field, expect="quarantine", delta=0):
    def apply(lab, d, victim):
        rewrite(victim, lambda b: bf.flip(b, bf.OFF[field] + delta, lab.rng.randrange(8)))
        return [victim], expect
    return apply


def flip_at(where):
    """A bit of the token ids or payload (where(b) gives the offset)."""
    def apply(lab, d, victim):
        rewrite(victim, lambda b: bf.flip(b, where(b), lab.rng.randrange(8)))
        return [victim], "quarantine"
    return apply


def forge(field, value, expect):
    """A field changed and both CRCs recomputed: passes the checksums."""
    def apply(lab, d, victim):
        def change(b):
            off = bf.OFF[field]
            b[off:off + len(value)] = value
            return bf.reseal(b)
        rewrite(victim, change)
        return [victim], expect
    return apply


def forge_tokens(lab, d, victim):
    def change(b):
        off = bf.HDR + 4 * lab.rng.randrange(bf.n_tokens(b))
        b[off:off + 4] = (int.from_bytes(b[off:off + 4], "little") ^ 1).to_bytes(4, "little")
        return bf.reseal(b)
    rewrite(victim, change)
    return [victim], "any"  # checksums pass: the answers decide


def fill_bytes(kind):
    def apply(lab, d, victim):
        size = os.path.getsize(victim)
        if kind == "zero":
            rewrite(victim, lambda b: bytearray(size))
        elif kind == "random":
            rewrite(victim, lambda b: bytearray(lab.rng.randrange(256) for _ in range(size)))
        else:  # payload zeroed, header kept
            rewrite(victim, lambda b: b[:bf.tokens_end(b)] + bytearray(size - bf.tokens_end(b)))
        return [victim], "quarantine"
    return apply


def append_garbage(lab, d, victim):
    rewrite(victim, lambda b: b + b"garbage")
    return [victim], "quarantine"


def swap_two(lab, d, victim):
    other = next(p for p in lab.blocks(d) if p != victim)
    tmp = victim + ".swap"
    os.rename(victim, tmp)
    os.rename(other, victim)
    os.rename(tmp, other)
    return [victim, other], "quarantine"


def copy_over_other(lab, d, victim):
    other = next(p for p in lab.blocks(d) if p != victim)
    shutil.copyfile(victim, other)
    return [other], "quarantine"


def rename_to_unused(lab, d, victim):
    name = "ff" * 32 + ".kv" if not os.path.basename(victim).startswith("ff") else "ee" * 32 + ".kv"
    sub = os.path.join(d, name[:2])
    os.makedirs(sub, exist_ok=True)
    dst = os.path.join(sub, name)
    os.rename(victim, dst)
    return [dst], "quarantine"


def replace_with(kind):
    def apply(lab, d, victim):
        other = next(p for p in lab.blocks(d) if p != victim)
        os.unlink(victim)
        if kind == "fifo":
            os.mkfifo(victim)
        elif kind == "dir":
            os.mkdir(victim)
        elif kind == "devzero":
            os.symlink("/dev/zero", victim)
        else:
            os.symlink(other, victim)
        return [victim], "quarantine" if kind in ("fifo", "devzero", "symlink") else "any"
    return apply


def stale_tmp(lab, d, victim):
    path = os.path.join(os.path.dirname(victim), ".tmp-999999-1")
    with open(path, "wb") as f:
        f.write(b"half a block")
    return [path], "gone"


def junk_files(lab, d, victim):
    sub = os.path.dirname(victim)
    for name in ("zz.kv", "README", os.path.basename(victim).upper(), "0" * 63 + ".kv", ".kv"):
        with open(os.path.join(sub, name), "wb") as f:
            f.write(b"junk")
    os.makedirs(os.path.join(d, "zz"), exist_ok=True)
    with open(os.path.join(d, "zz", "a" * 64 + ".kv"), "wb") as f:
        f.write(b"junk in a wrong fan-out folder")
    return [], "any"


def damage_usage(how):
    def apply(lab, d, victim):
        for u in glob.glob(os.path.join(d, "usage-*.bin")):
            if how == "truncate":
                rewrite(u, lambda b: b[:len(b) // 2])
            elif how == "flip":
                rewrite(u, lambda b: bf.flip(b, lab.rng.randrange(len(b))) if b else b)
            else:
                rewrite(u, lambda b: bytearray(b"STRKU\0\0\2") + bytearray(b"\xff" * 64))
        return [], "any"
    return apply


def damage_side_file(pattern, how):
    """The replay store or fingerprint file: truncated or flipped."""
    def apply(lab, d, victim):
        for path in glob.glob(os.path.join(d, pattern)):
            if how == "truncate":
                rewrite(path, lambda b: b[:len(b) // 3])
            else:
                rewrite(path, lambda b: bf.flip(b, lab.rng.randrange(len(b))) if b else b)
        return [], "any"
    return apply


def quarantine_is_file(lab, d, victim):
    q = os.path.join(d, "quarantine")
    shutil.rmtree(q, ignore_errors=True)
    with open(q, "wb") as f:
        f.write(b"not a folder")
    rewrite(victim, lambda b: bf.flip(b, 0))
    return [victim], "any"  # deleted, then computed and written again


def fanout_is_file(lab, d, victim):
    sub = os.path.dirname(victim)
    shutil.rmtree(sub)
    with open(sub, "wb") as f:
        f.write(b"not a folder")
    return [], "any"


FAULTS = [
    ("trunc-empty", truncate_to(lambda b: 0)),
    ("trunc-in-header", truncate_to(lambda b: 100)),
    ("trunc-in-tokens", truncate_to(lambda b: bf.HDR + 2)),
    ("trunc-in-payload", truncate_to(lambda b: (bf.tokens_end(b) + len(b)) // 2)),
    ("trunc-last-byte", truncate_to(lambda b: len(b) - 1)),
    ("append-garbage", append_garbage),
    ("flip-magic", flip_field("magic")),
    ("flip-version", flip_field("version")),
    ("flip-dtype", flip_field("dtype")),
    ("flip-n-tokens", flip_field("n_tokens")),
    ("flip-reserved1", flip_field("reserved1")),
    ("flip-payload-bytes", flip_field("payload_bytes")),
    ("flip-model-fp", flip_field("model_fp", delta=5)),
    ("flip-hash", flip_field("hash", delta=9)),
    ("flip-parent", flip_field("parent", delta=3)),
    ("flip-header-crc", flip_field("header_crc")),
    ("flip-reserved2", flip_field("reserved2", expect="quarantine")),
    ("flip-token-id", flip_at(lambda b: bf.HDR + 1)),
    ("flip-payload-first", flip_at(lambda b: bf.tokens_end(b))),
    ("flip-payload-mid", flip_at(lambda b: (bf.tokens_end(b) + len(b)) // 2)),
    ("flip-payload-last", flip_at(lambda b: len(b) - 5)),
    ("flip-trailing-crc", flip_at(lambda b: len(b) - 2)),
    ("zero-payload", fill_bytes("payload")),
    ("zero-file", fill_bytes("zero")),
    ("random-file", fill_bytes("random")),
    ("swap-two-blocks", swap_two),
    ("copy-over-other", copy_over_other),
    ("rename-to-unused", rename_to_unused),
    ("forge-n-tokens", forge("n_tokens", (1).to_bytes(4, "little"), "quarantine")),
    ("forge-payload-bytes", forge("payload_bytes", (64).to_bytes(8, "little"), "quarantine")),
    ("forge-dtype", forge("dtype", (2).to_bytes(4, "little"), "left")),
    ("forge-parent", forge("parent", b"\x5a" * 32, "any")),
    ("forge-tokens", forge_tokens),
    ("foreign-model", forge("model_fp", b"\xa5" * 32, "left")),
    ("future-version", forge("version", (2).to_bytes(4, "little"), "left")),
    ("fifo-as-block", replace_with("fifo")),
    ("dir-as-block", replace_with("dir")),
    ("devzero-as-block", replace_with("devzero")),
    ("symlink-to-other", replace_with("symlink")),
    ("stale-tmp", stale_tmp),
    ("junk-files", junk_files),
    ("usage-truncated", damage_usage("truncate")),
    ("usage-flipped", damage_usage("flip")),
    ("usage-forged-count", damage_usage("forge")),
    ("replay-truncated", damage_side_file("replay-*.bin", "truncate")),
    ("replay-flipped", damage_side_file("replay-*.bin", "flip")),
    ("fingerprint-flipped", damage_side_file("fingerprint-*.txt", "flip")),
    ("quarantine-is-file", quarantine_is_file),
    ("fanout-is-file", fanout_is_file),
]


def in_quarantine(d, victim):
    names = os.listdir(os.path.join(d, "quarantine")) if os.path.isdir(os.path.join(d, "quarantine")) else []
    return any(n.startswith(os.path.basename(victim) + ".") for n in names)


def expectation_met(d, victims, expect):
    """None, or why the folder is not as it should be after the run."""
    for v in victims:
        there = os.path.lexists(v)
        # A quarantined block is computed again and rewritten under its
        # name, so only the quarantine folder tells.
        if expect == "quarantine" and not in_quarantine(d, v):
            return f"{os.path.relpath(v, d)} was not quarantined"
        if expect == "left" and (not there or in_quarantine(d, v)):
            return f"{os.path.relpath(v, d)} (another model's or version's) was not left alone"
        if expect == "gone" and there:
            return f"{os.path.relpath(v, d)} was not removed"
    return None


def run_fault(tally, lab, name, apply):
    index = tally.case()
    d = lab.fresh_copy(f"case-{index}")
    victim = lab.rng.choice(lab.blocks(d))
    victims, expect = apply(lab, d, victim)
    server = lab.serve(d)
    what = f"fault {name} ({os.path.relpath(victim, d)})"
    if not server.ready:
        tally.fail("crashes" if server.proc.poll() not in (0, 1) else "bad_loads", index,
                   f"{what}: server did not start (log {server.log_path})")
        server.stop()
        return
    answers_match(tally, index, lab, server, what)
    stop_checked(tally, index, server, what)
    why = expectation_met(d, victims, expect)
    if why:
        tally.fail("bad_loads", index, f"{what}: {why}")
    shutil.rmtree(d, ignore_errors=True)


# ---- whole-folder scenarios ---------------------------------------------------

def run_sigkills(tally, lab, rounds):
    """SIGKILL a server while it writes new blocks, rounds times on one
    folder; then every answer must match and `strata cache verify` pass."""
    d = lab.fresh_copy("sigkill")
    for r in range(rounds):
        index = tally.case()
        server = lab.serve(d)
        if not server.ready:
            tally.fail("bad_loads", index, f"sigkill round {r}: server did not start (log {server.log_path})")
            server.stop()
            continue
        body = {"model": harness.TINY_MODEL_ID, "prompt": " ".join(lab.rng.choice(WORDS) for _ in range(300)), "max_tokens": 4,
                "temperature": 0}
        client = threading.Thread(target=post_ignoring_errors, args=(server, body))
        client.start()
        time.sleep(lab.rng.uniform(0.05, 1.5))
        server.stop(sig=signal.SIGKILL)
        client.join(timeout=60)
        after = lab.serve(d)
        if not after.ready:
            tally.fail("bad_loads", index, f"sigkill round {r}: restart failed (log {after.log_path})")
        else:
            answers_match(tally, index, lab, after, f"after SIGKILL round {r}")
        stop_checked(tally, index, after, f"after SIGKILL round {r}")
    rc, out, err, hung = harness.run_cmd([lab.strata, "cache", "verify", "--cache-dir", d], 300)
    if rc != 0 or hung or harness.sanitizer_report(err):
        tally.fail("bad_loads", tally.counts["cases"] - 1, f"cache verify after SIGKILLs: exit {rc}: {err[-300:]}")


def post_ignoring_errors(server, body):
    try:
        server.request("POST", "/v1/completions", body, timeout=60)
    except OSError:
        pass  # killed mid-request: expected


def run_two_servers(tally, lab):
    index = tally.case()
    d = lab.fresh_copy("two")
    a, b = lab.serve(d), lab.serve(d)
    for s, what in ((a, "first of two servers"), (b, "second of two servers")):
        if s.ready:
            answers_match(tally, index, lab, s, what)
        else:
            tally.fail("bad_loads", index, f"{what} did not start (log {s.log_path})")
    stop_checked(tally, index, a, "first of two servers")
    stop_checked(tally, index, b, "second of two servers")


def serve_and_compare(tally, lab, d, what):
    """One case: a server on folder d answers like a cold one and stops cleanly."""
    index = tally.case()
    s = lab.serve(d)
    if s.ready:
        answers_match(tally, index, lab, s, what)
    else:
        tally.fail("bad_loads", index, f"{what}: server did not start (log {s.log_path})")
    stop_checked(tally, index, s, what)


def mount_tmpfs(path, size_kb):
    """0 when mounted (root with CAP_SYS_ADMIN only)."""
    if os.geteuid() != 0:
        return 1
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", path],
                          capture_output=True).returncode


def run_full_disk(tally, lab, notes):
    d = os.path.join(lab.work, "full")
    os.makedirs(d)
    if mount_tmpfs(d, 48):
        notes.append("full disk: not run (needs root with mount)")
        return
    try:
        serve_and_compare(tally, lab, d, "full disk")
    finally:
        subprocess.run(["umount", d], check=False)


def run_read_only(tally, lab, notes):
    d = os.path.join(lab.work, "ro")
    os.makedirs(d)
    mounted = mount_tmpfs(d, 4096) == 0
    if mounted:
        shutil.copytree(lab.pristine, d, dirs_exist_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", d], check=True)
    elif os.geteuid() != 0:
        shutil.copytree(lab.pristine, d, dirs_exist_ok=True)
        subprocess.run(["chmod", "-R", "a-w", d], check=True)
    else:
        notes.append("read-only folder: not run (root without mount)")
        return
    try:
        serve_and_compare(tally, lab, d, "read-only folder")
    finally:
        if mounted:
            subprocess.run(["umount", d], check=False)


def run(strata, seed, count, seconds, out_dir, sigkills=2, folders=True):
    """count damaged-file cases (cycling through FAULTS), then the
    whole-folder scenarios."""
    tally = harness.Tally("disk", out_dir)
    lab = Lab(strata, seed, out_dir)
    notes = []
    try:
        budget = harness.Budget(count, seconds)
        for i in budget.cases():
            name, apply = FAULTS[i % len(FAULTS)]
            run_fault(tally, lab, name, apply)
        run_sigkills(tally, lab, sigkills)
        if folders:
            run_two_servers(tally, lab)
            run_full_disk(tally, lab, notes)
            run_read_only(tally, lab, notes)
    finally:
        lab.close()
    tally.failures += [f"disk note: {n}" for n in notes]
    return tally
