"""Compiled kernels for the per-record work of the Spark source and sink, loaded with ctypes.

Python costs about a microsecond per record and field; a Spark pipeline moves hundreds of
thousands of records a second, so the loops over records (varint decoding, batch encoding,
murmur2 partitioning) are plain C functions over buffers. Each ``<name>.c`` next to this file is
compiled on first use with the system C compiler into a cache directory, under a name that
includes the source's hash, so a changed source is rebuilt and never mixed with an old binary.
``make install`` builds them ahead of time (``python -m strom.native``).

Without a compiler ``load`` returns None and callers use their pure-Python implementations,
which give the same results (the property tests compare both); see docs/decisions/0018.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger("strom.native")

SOURCE_DIR = Path(__file__).resolve().parent
CFLAGS = ("-O3", "-std=c11", "-shared", "-fPIC", "-fvisibility=default", "-Wall", "-Werror")

_LOADED: dict[str, ctypes.CDLL | None] = {}


def cache_dir() -> Path:
    """Next to the sources when writable (a checkout), else the user's cache directory."""
    env = os.environ.get("STROM_NATIVE_CACHE")
    if env:
        return Path(env)
    local = SOURCE_DIR / "_build"
    try:
        local.mkdir(exist_ok=True)
        if os.access(local, os.W_OK):
            return local
    except OSError:
        pass
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "strom" / "native"


def compiler() -> str | None:
    """The C compiler to use ($CC, cc or gcc), or None when the machine has none."""
    for name in (os.environ.get("CC"), "cc", "gcc"):
        if name and shutil.which(name):
            return name
    return None


def library_path(name: str) -> Path:
    digest = hashlib.sha256((SOURCE_DIR / f"{name}.c").read_bytes() + " ".join(CFLAGS).encode()).hexdigest()[:16]
    return cache_dir() / f"{name}-{digest}.so"


def build(name: str) -> Path:
    """Compile ``<name>.c`` unless an up-to-date binary exists; the rename makes concurrent builds safe."""
    target = library_path(name)
    if target.exists():
        return target
    cc = compiler()
    if cc is None:
        raise OSError("no C compiler found (set CC, or install gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([cc, *CFLAGS, "-o", tmp, str(SOURCE_DIR / f"{name}.c")],
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise OSError(f"compiling {name}.c failed:\n{proc.stderr}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def load(name: str) -> ctypes.CDLL | None:
    """The compiled ``<name>`` library, or None (logged once) when it cannot be built or loaded.

    STROM_NATIVE=0 forces the pure-Python paths, as on a machine without a compiler."""
    if name in _LOADED:
        return _LOADED[name]
    lib: ctypes.CDLL | None = None
    if os.environ.get("STROM_NATIVE", "1") != "0":
        try:
            lib = ctypes.CDLL(str(build(name)))
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("native %s kernels unavailable, using the pure-Python path: %s", name, exc)
    _LOADED[name] = lib
    return lib


def main() -> None:
    """Build every kernel now (``make install``), printing where each went."""
    failed = False
    for source in sorted(SOURCE_DIR.glob("*.c")):
        try:
            print(f"{source.stem}: {build(source.stem)}")
        except (OSError, subprocess.SubprocessError) as exc:
            failed = True
            print(f"{source.stem}: not built ({exc}); the pure-Python path will be used", file=sys.stderr)
    if failed:
        print("Strom works without the kernels, only its Spark source and sink are slower.", file=sys.stderr)


if __name__ == "__main__":
    main()
