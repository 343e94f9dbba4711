#!/usr/bin/env python3
"""A .cu file as C++ for tools/cuda_emu: every kernel launch
`NAME<<<grid, block[, smem[, stream]]>>>(args)` becomes
`emu_launch(dim3(grid), dim3(block), smem, [=] { NAME(args); })` (the
arguments captured by value, as a launch or a recorded graph takes them),
and `extern __shared__ T name[];` a pointer to the emulator's buffer.
Launches may span lines and sit in macros (backslash-newlines are kept).

    python3 tools/cuda_emu/convert.py IN.cu OUT.cpp
"""
import re
import sys


def matching(s, i, open_ch, close_ch):
    """Index of the bracket closing the one at s[i]."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_ch:
            depth += 1
        elif s[j] == close_ch:
            depth -= 1
            if depth == 0:
                return j
    raise SystemExit(f"convert: unbalanced {open_ch} at offset {i}")


def split_top(s):
    """s split at the commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    return parts


def kernel_name_start(s, i):
    """Start of the kernel name (with template arguments) ending at s[i - 1]."""
    j = i
    if s[j - 1] == ">":
        depth = 0
        while True:
            j -= 1
            if s[j] == ">":
                depth += 1
            elif s[j] == "<":
                depth -= 1
                if depth == 0:
                    break
    while j > 0 and (s[j - 1].isalnum() or s[j - 1] == "_"):
        j -= 1
    return j


def convert(s):
    s = re.sub(r"extern __shared__ (\w+) (\w+)\[\];", r"\1 *\2 = (\1 *)emu_dyn_smem();", s)
    out, pos = [], 0
    while True:
        i = s.find("<<<", pos)
        if i < 0:
            break
        start = kernel_name_start(s, i)
        end_cfg = s.find(">>>", i)
        cfg = split_top(s[i + 3:end_cfg])
        paren = end_cfg + 3
        while s[paren].isspace():
            paren += 1
        close = matching(s, paren, "(", ")")
        name, args = s[start:i], s[paren + 1:close]
        smem = cfg[2] if len(cfg) > 2 else "0"
        out.append(s[pos:start])
        out.append(f"emu_launch(dim3({cfg[0]}), dim3({cfg[1]}), {smem}, [=] {{ {name}({args}); }})")
        pos = close + 1
    out.append(s[pos:])
    return "".join(out)


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[1]) as f:
        src = f.read()
    with open(sys.argv[2], "w") as f:
        f.write(f"/* {sys.argv[1]} for tools/cuda_emu (convert.py): do not edit */\n" + convert(src))


if __name__ == "__main__":
    main()
