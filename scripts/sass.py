#!/usr/bin/env python3
"""Reads the machine code (SASS) of one CUDA file of tessera without a GPU: the kernel lab's
first look at a kernel before any device time is spent on it.

    scripts/sass.py kernels/common/cuda/bsconv_sm90_halo.cu                # every kernel: registers, spills, ...
    scripts/sass.py FILE.cu --kernel 'halo_kernelI13__nv_bfloat16S4_Li32'  # + its loops that hold a key instruction
    scripts/sass.py FILE.cu --kernel NAME --key UTMALDG --show             # loops around the TMA copies, listed

It compiles FILE.cu with the build's own command for it (`ninja -t compdb` of --build, default
build/; a configured CUDA build) into a cubin for that command's first architecture, with
`-Xptxas -v`, and prints per kernel: registers, stack and spill bytes, whether ptxas serialized
its wgmmas (C7510-C7520 notes: 'serial'), and its count of HGMMA, LDSM, local-memory (LDL/STL)
and bulk-copy (UTMALDG) instructions. With --kernel (a substring of the mangled name that picks
one kernel) it lists the loops (backward branches) whose body holds the --key instruction
(HGMMA by default): their instruction counts and opcode histograms, the number the halo kernels'
step cost was read off (docs/convolution.md). Loops are found by address, so a retry loop of an
mbarrier wait placed at the end of the function shows up as a long loop around everything; the
short loop is the step.

cuobjdump (and the nvdisasm it runs) come from PATH or the CUDA toolkit; where neither has them
(the toolkit here ships without them), from NVIDIA's PyPI wheels nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm, fetched once into ~/.cache/tessera/nvtools. Exit codes: 0; 1 on an error (one line); 2 on bad arguments.
"""
import argparse
import collections
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import zipfile

CACHE = os.path.expanduser("~/.cache/tessera/nvtools")


def fail(msg):
    print(f"sass.py: {msg}", file=sys.stderr)
    sys.exit(1)


def nv_tool(name):
    """The path of NVIDIA tool `name` (cuobjdump, nvdisasm): PATH, the toolkit, or its PyPI wheel."""
    for cand in (shutil.which(name), f"/usr/local/cuda/bin/{name}"):
        if cand and os.access(cand, os.X_OK):
            return cand
    pattern = os.path.join(CACHE, "**", "bin", name)
    found = glob.glob(pattern, recursive=True)
    if not found:
        os.makedirs(CACHE, exist_ok=True)
        wheel = f"nvidia-cuda-{name}"
        r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", CACHE, wheel],
                           capture_output=True, text=True)
        wheels = glob.glob(os.path.join(CACHE, wheel.replace("-", "_") + "-*.whl"))
        if r.returncode != 0 or not wheels:
            fail(f"no {name} on PATH or in the toolkit, and pip could not fetch {wheel}: "
                 + (r.stderr.strip().splitlines() or ["?"])[-1])
        with zipfile.ZipFile(wheels[0]) as z:
            z.extractall(CACHE)
        found = glob.glob(pattern, recursive=True)
        if not found:
            fail(f"the wheel {wheels[0]} holds no bin/{name}")
    os.chmod(found[0], 0o755)
    return found[0]


def compile_command(build, source):
    r = subprocess.run(["ninja", "-C", build, "-t", "compdb"], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"ninja -t compdb failed in {build} (a configured Ninja build?): {r.stderr.strip()[:200]}")
    src = os.path.realpath(source)
    entries = [e for e in json.loads(r.stdout) if os.path.realpath(os.path.join(e["directory"], e["file"])) == src]
    if not entries:
        fail(f"{source} is not compiled in {build} (a CUDA build? the file's path?)")
    # the sm_90a target's command where there is one (its file is compiled only there anyway)
    entries.sort(key=lambda e: "compute_90a" not in e["command"])
    return entries[0]


def cubin_command(entry, out):
    args = shlex.split(entry["command"])
    if args[0] == "ccache":
        args = args[1:]
    keep, skip, gencode_seen = [], False, False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MT", "-MF"):
            skip = True
            continue
        if a in ("-c", "-MD"):
            continue
        if a.startswith("-gencode") or a.startswith("--generate-code"):
            if gencode_seen:
                continue  # one architecture per cubin: the first
            gencode_seen = True
            m = re.search(r"arch=(compute_\w+),code=\[?[^\],]*?,?(sm_\w+)", a) or re.search(r"arch=(compute_\w+),code=(sm_\w+)", a)
            if m:
                a = f"-gencode=arch={m.group(1)},code={m.group(2)}"
        keep.append(a)
    return keep + ["-cubin", "-Xptxas", "-v", "-o", out], entry["directory"]


def short(name):
    r = subprocess.run(["c++filt", name], capture_output=True, text=True)
    s = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() else name
    s = re.sub(r"tessera::cuda::(sm90::|sm80::)?\(anonymous namespace\)::", "", s)
    s = s.replace("__nv_bfloat16", "bf16").replace("__half", "f16").replace("tessera::", "")
    if s.endswith(")"):  # drop the parameter list: from the parenthesis that matches the last one
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(s[i], 0)
            if depth == 0:
                return s[:i]
    return s


def ptxas_report(log):
    """Per mangled kernel: registers, stack, spill stores + loads, serialized wgmma."""
    out, cur = collections.OrderedDict(), None
    for line in log.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, {"regs": None, "stack": 0, "spill": 0, "serial": False})
            continue
        m = re.search(r"in the function '([\w$]+)'", line)
        if m and re.search(r"C75\d\d", line):
            out.setdefault(m.group(1), {"regs": None, "stack": 0, "spill": 0, "serial": False})["serial"] = True
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            out[cur]["stack"], out[cur]["spill"] = int(m.group(1)), int(m.group(2)) + int(m.group(3))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            out[cur]["regs"] = int(m.group(1))
    return out


def functions(sass):
    """Mangled name -> [(address, opcode, text)]."""
    result = {}
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        name, body = part.split("\n", 1)
        ins = []
        for line in body.splitlines():
            m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m:
                text = m.group(2).strip()
                op = re.sub(r"^@!?U?P[T0-9]+\s+", "", text).split()[0]
                ins.append((int(m.group(1), 16), op, text))
        result[name.strip()] = ins
    return result


def loops(ins, key):
    index = {a: i for i, (a, _, _) in enumerate(ins)}
    found = []
    for i, (a, op, text) in enumerate(ins):
        if op.startswith("BRA"):
            m = re.search(r"0x([0-9a-f]+)", text)
            if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
                body = ins[index[int(m.group(1), 16)]:i + 1]
                if any(o.startswith(key) for _, o, _ in body):
                    found.append(body)
    return sorted(found, key=len)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a .cu file of the build")
    ap.add_argument("--build", default="build", help="the configured CUDA build folder (default: build)")
    ap.add_argument("--kernel", help="a substring of one kernel's mangled name: list its loops")
    ap.add_argument("--key", default="HGMMA", help="the loops to list hold this opcode (default HGMMA)")
    ap.add_argument("--show", action="store_true", help="print the loops' instructions")
    ap.add_argument("--keep", help="also write the cubin, ptxas log and SASS into this folder")
    a = ap.parse_args()
    if not os.path.isfile(a.source):
        print(f"sass.py: no file {a.source}", file=sys.stderr)
        sys.exit(2)
    tool = nv_tool("cuobjdump")
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(nv_tool("nvdisasm")))
    entry = compile_command(a.build, a.source)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        cmd, cwd = cubin_command(entry, cubin)
        r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            fail("the compile failed: " + (r.stderr.strip().splitlines() or ["?"])[-1])
        log = r.stdout + r.stderr
        d = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, env=env)
        if d.returncode != 0:
            fail("cuobjdump failed: " + d.stderr.strip()[:200])
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            shutil.copy(cubin, a.keep)
            open(os.path.join(a.keep, "ptxas.log"), "w").write(log)
            open(os.path.join(a.keep, "k.sass"), "w").write(d.stdout)
    report, funcs = ptxas_report(log), functions(d.stdout)
    print(f"{'regs':>4} {'stack':>5} {'spill':>5} {'serial':>6} {'HGMMA':>5} {'LDSM':>4} {'LDL/STL':>7} {'UTMALDG':>7}  kernel")
    for name, ins in funcs.items():
        rep = report.get(name, {"regs": None, "stack": 0, "spill": 0, "serial": False})
        ops = collections.Counter(op.split(".")[0] for _, op, _ in ins)
        print(f"{rep['regs'] or '?':>4} {rep['stack']:>5} {rep['spill']:>5} {'yes' if rep['serial'] else '':>6} "
              f"{ops['HGMMA']:>5} {ops['LDSM']:>4} {ops['LDL'] + ops['STL']:>7} {ops['UTMALDG']:>7}  {short(name)}")
    if a.kernel:
        hits = [n for n in funcs if a.kernel in n]
        if len(hits) != 1:
            fail(f"--kernel '{a.kernel}' matches {len(hits)} kernels" + (": " + ", ".join(hits[:4]) if hits else ""))
        print(f"\nloops of {short(hits[0])} holding {a.key} (shortest first):")
        for body in loops(funcs[hits[0]], a.key):
            h = collections.Counter(op.split(".")[0] for _, op, _ in body)
            print(f"  {body[0][0]:#06x}..{body[-1][0]:#06x}: {len(body)} instructions, {a.key} {h[a.key]}")
            print("    " + ", ".join(f"{k} {v}" for k, v in h.most_common(16)))
            if a.show:
                for addr, _, text in body:
                    print(f"      {addr:#06x}  {text}")


if __name__ == "__main__":
    main()
