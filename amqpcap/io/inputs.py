"""Which files make one capture: a file, several, a glob, or a directory such as a tcpdump ring.

The files are read as one capture, merged by time the way `mergecap` merges them (the native
core, rust/src/capture/merge.rs); this module only lists them, in the order that breaks ties
(the order given, or ring order for a glob or a directory), and tells what a ring is missing.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..model.errors import UnreadableCaptureError, UsageError

#: first bytes of the files a directory contributes: pcap (µs and ns, either byte order),
#: pcapng, gzip (tested again by the core, which says what a named file is when it is neither)
CAPTURE_MAGICS = (b"\xa1\xb2\xc3\xd4", b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\x3c\x4d", b"\x4d\x3c\xb2\xa1",
                  b"\x0a\x0d\x0d\x0a", b"\x1f\x8b")

#: a ring file's name: what tcpdump -C/-W appends to the -w name, a number (zero-padded with
#: -W), then what may have been added since: `-z gzip`'s .gz, a conversion's .pcapng
_RING_NAME = re.compile(r"^(?P<base>.*?)(?P<number>\d+)(?P<suffix>(\.pcap|\.pcapng|\.cap)?(\.gz)?)$")
#: numbers that fill less than this share of their range are not a ring's sequence (tcpdump -G
#: names files by strftime: 2350, 2355, 0000, ...), so their holes are not missing files
RING_MIN_DENSITY = 0.5


def _ring_key(path: str) -> tuple:
    """Sort key: names compared with their numbers as numbers, so `ring.pcap10` follows
    `ring.pcap9` (tcpdump -C without -W does not pad), and `ring.pcap` (tcpdump's first file
    of a -C ring has no number) comes before `ring.pcap1`."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path))


def _looks_like_capture(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4).startswith(CAPTURE_MAGICS)
    except OSError:
        return True  # unreadable: listed, so that the core names it and why


def _expand(item: str) -> list[str]:
    if os.path.isdir(item):
        names = [os.path.join(item, n) for n in os.listdir(item)]
        files = [p for p in names if os.path.isfile(p) and _looks_like_capture(p)]
        if not files:
            raise UnreadableCaptureError(f"cannot read a capture from the directory {item}: no file in it starts like a capture")
        return sorted(files, key=_ring_key)
    if glob.has_magic(item) and not os.path.exists(item):
        files = [p for p in glob.glob(item) if os.path.isfile(p)]
        if not files:
            raise UnreadableCaptureError(f"cannot open {item}: no file matches it")
        return sorted(files, key=_ring_key)
    return [item]


def capture_files(spec: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[str]:
    """The files of a capture, in tie-breaking order: each item is a file, a glob pattern or a
    directory (its files that start like a capture), expanded in ring order; items keep the
    order given. A file listed twice is read once."""
    items = [spec] if isinstance(spec, (str, os.PathLike)) else list(spec)
    if not items:
        raise UsageError("no capture file given")
    # dict keys: the order given, each file once (a ring of thousands of files stays linear)
    out: dict[str, None] = {}
    for item in items:
        out.update(dict.fromkeys(_expand(os.fspath(item))))
    return list(out)


def describe(spec, files: list[str]) -> str:
    """How the capture is named in messages and the report: the path given, or for a set the
    directory or pattern given, else the first file and how many more."""
    if len(files) == 1:
        return files[0]
    if isinstance(spec, (str, os.PathLike)):
        return os.fspath(spec)
    return f"{files[0]} and {len(files) - 1} more files"


def _rings(files: list[str]) -> dict[str, dict[int, str]]:
    """The rings among `files`: for each group of names that differ only in the number tcpdump
    -C/-W appends (and a .gz or .pcapng added since), its files by number, when they are two
    or more and fill at least `RING_MIN_DENSITY` of the range between the lowest and highest."""
    groups: dict[str, dict[int, str]] = {}
    for path in files:
        m = _RING_NAME.match(path)
        if m:  # a file converted or compressed since still holds its place in the ring
            groups.setdefault(m["base"], {})[int(m["number"])] = path
    return {base: numbers for base, numbers in groups.items()
            if len(numbers) >= 2 and len(numbers) >= RING_MIN_DENSITY * (max(numbers) - min(numbers) + 1)}


def missing_ring_files(files: list[str]) -> list[str]:
    """Warnings for ring files that are not in the set (`_rings`): the numbers between the
    lowest and highest present that are absent. A -G ring (names from strftime) cannot be
    checked by name; its holes show as capture gaps in the connections that crossed them."""
    out = []
    for base, numbers in _rings(files).items():
        lo, hi = min(numbers), max(numbers)
        absent = [n for n in range(lo, hi + 1) if n not in numbers]
        if absent:
            shown = ", ".join(map(str, absent[:10])) + (f" and {len(absent) - 10} more" if len(absent) > 10 else "")
            out.append(f"ring {Path(base).name}N: file number {shown} of {lo}-{hi} is missing; "
                       "connections that crossed it have a capture gap there")
    return out


def ring_holes(files: list[dict]) -> list[dict]:
    """Where a ring read as this capture has no packets because files are missing: for each run
    of absent numbers of a ring (`_rings`) among the files read (`files`: the summary's, each with
    ``name``, ``error``, ``first_ts``, ``last_ts``; a file skipped unread is absent too), its
    ``files`` (the missing names, spelled as their neighbours are: same padding and suffix),
    ``after`` and ``before`` (the neighbours' names) and ``from_ts`` / ``to_ts``: the last packet
    of the file before and the first of the file after, between which the missing files' packets
    were. A run whose neighbours hold no packet is left out (no time to place it)."""
    read = {f["name"]: f for f in files if f.get("error") is None}
    out = []
    for base, numbers in _rings(list(read)).items():
        present = sorted(numbers)
        for a, b in zip(present, present[1:]):
            if b == a + 1:
                continue
            after, before = read[numbers[a]], read[numbers[b]]
            if after.get("last_ts") is None or before.get("first_ts") is None:
                continue
            m = _RING_NAME.match(numbers[a])
            width = len(m["number"]) if m["number"].startswith("0") and len(m["number"]) > 1 else 0
            out.append({"files": [f"{Path(base).name}{str(n).zfill(width)}{m['suffix']}" for n in range(a + 1, b)],
                        "after": Path(numbers[a]).name, "before": Path(numbers[b]).name,
                        "from_ts": after["last_ts"], "to_ts": before["first_ts"]})
    return sorted(out, key=lambda h: h["from_ts"])


#: `amqpcap analyze CAPTURE` decodes a capture up to this size in memory, where its memory
#: follows its packets, not its bytes: ~100 MB plus 1-4 KB per packet (benchmarks/memory_factor.py:
#: 9x the capture for small messages, 0.5x for 1-4 MiB ones; README.md); a larger one
#: goes through a temporary dataset on a local Dask cluster (`amqpcap.cli.analyze`). Bytes on disk, a
#: gzip file's counted GZIP_RATIO times (what pcap typically shrinks by: 3-5x)
IN_MEMORY_MAX_BYTES = 512 << 20
GZIP_RATIO = 4


def capture_bytes(capture) -> int:
    """What a capture (anything `amqpcap.load` reads but a dataset) weighs for
    IN_MEMORY_MAX_BYTES: its files' bytes, gzip ones GZIP_RATIO times; 0 for a file that cannot
    be read (the decode says why)."""
    total = 0
    for f in capture_files(capture):
        try:
            with open(f, "rb") as fh:
                gz = fh.read(2) == b"\x1f\x8b"
            total += os.path.getsize(f) * (GZIP_RATIO if gz else 1)
        except OSError:
            pass
    return total


def is_large(capture) -> bool:
    """Whether `amqpcap analyze` takes `capture` through a temporary dataset (IN_MEMORY_MAX_BYTES)."""
    return too_large_for_memory(capture_bytes(capture))


def too_large_for_memory(capture_bytes: int) -> bool:
    """Whether a capture of that many bytes is analysed on a local cluster (IN_MEMORY_MAX_BYTES)."""
    return capture_bytes > IN_MEMORY_MAX_BYTES
