"""Stand-in driver libraries: just enough for the real GPU wheels to be imported on a machine
without an NVIDIA driver, so that their API can be read. Built at test time into a folder
that only the conformance environment's ``LD_LIBRARY_PATH`` names: never visible to a real
run.

For every shared object the wheels ship, each library it needs that this machine does not
have (``libcuda.so.1``, ``libnvinfer.so.11``, ...) becomes a small C library with that
``SONAME`` defining every symbol the wheel's objects take from it, each returning 0 (CUDA's
success), as do the libraries they open by name at run time (``libnvcuvid.so.1``,
``libnvidia-encode.so.1``: the names of the functions they look up are in their strings).
Three answer more than 0, because importing asks them: the driver's version,
``cuGetProcAddress`` (it finds the stand-in's own functions) and NVENC's highest version.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

# libraries the wheels dlopen, and what the functions they look up there are called
OPENED = {"libnvidia-encode.so.1": r"^NvEnc\w+$", "libnvcuvid.so.1": r"^cuvid\w+$",
          "libcuda.so.1": r"^cu[A-Z]\w*$"}
PRELUDE = """#include <dlfcn.h>
#include <stdio.h>
static long standin_any(void) { return 0; }
"""
PROC_ADDRESS = """int NAME(const char *symbol, void **pfn, int version, unsigned long long flags,
         int *status) {
    char versioned[256];
    void *found = dlsym(RTLD_DEFAULT, symbol);
    if (!found) {
        snprintf(versioned, sizeof versioned, "%s_v2", symbol);
        found = dlsym(RTLD_DEFAULT, versioned);
    }
    *pfn = found ? found : (void *)standin_any;
    if (status) *status = 0;
    return 0;
}
"""
ANSWERS = {
    "cuDriverGetVersion": "int cuDriverGetVersion(int *v) { *v = 13000; return 0; }\n",
    "cuGetProcAddress": PROC_ADDRESS.replace("NAME", "cuGetProcAddress"),
    "cuGetProcAddress_v2": PROC_ADDRESS.replace("NAME", "cuGetProcAddress_v2"),
    "NvEncodeAPIGetMaxSupportedVersion":
        "int NvEncodeAPIGetMaxSupportedVersion(unsigned *v) { *v = 13u << 4; return 0; }\n",
}
C_NAME = re.compile(r"^[A-Za-z_]\w*$")


def _run(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _needed(path: Path) -> list[str]:
    return re.findall(r"Shared library: \[(.+?)\]", _run("readelf", "-d", str(path)))


def _symbols(path: Path, which: str) -> set[str]:
    rows = [line.split() for line in _run("nm", "-D", which, str(path)).splitlines()]
    if which == "--undefined-only":
        return {row[-1].split("@")[0] for row in rows if row and row[0] == "U"}
    return {row[-1].split("@")[0] for row in rows if len(row) >= 3}


def build(site_packages: Path, out: Path) -> dict[str, int]:
    """Stand-ins for what the shared objects under ``site_packages`` need and this machine
    lacks, in ``out``; the symbols each defines, by library."""
    objects = [p for p in site_packages.rglob("*.so*") if p.is_file() and not p.is_symlink()]
    folders = {p.parent for p in objects}
    known = _run("/sbin/ldconfig", "-p")

    def resolve(name: str) -> Path | None:
        for folder in folders:
            if (folder / name).exists():
                return folder / name
        found = re.search(rf"\s{re.escape(name)} \(.*\) => (\S+)", known)
        return Path(found.group(1)) if found else None

    wanted: dict[str, set[str]] = {}
    for path in objects:
        provided: set[str] = set()
        missing = []
        for name in _needed(path):
            library = resolve(name)
            if library is None:
                missing.append(name)
            else:
                provided |= _symbols(library, "--defined-only")
        for name in missing:
            wanted.setdefault(name, set()).update(_symbols(path, "--undefined-only") - provided)
        strings = _run("strings", str(path)).split()
        for name, pattern in OPENED.items():
            if name in missing or any(name in s for s in strings):
                wanted.setdefault(name, set()).update(s for s in strings if re.match(pattern, s))
    out.mkdir(parents=True, exist_ok=True)
    for name, symbols in wanted.items():
        source = out / f"{name}.c"
        source.write_text(PRELUDE + "".join(
            ANSWERS.get(s, f"long {s}(void) {{ return 0; }}\n")
            for s in sorted(symbols) if C_NAME.match(s)))
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out / name),
                        f"-Wl,-soname,{name}", str(source), "-ldl"], check=True)
    return {name: len(symbols) for name, symbols in wanted.items()}
