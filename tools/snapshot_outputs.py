"""Run `amqpcap analyze --out` on every capture in the repository and record what it wrote.

    python tools/snapshot_outputs.py OUTDIR            # analyse, then write OUTDIR/manifest.json
    python tools/snapshot_outputs.py --compare A B     # which files differ between two snapshots

The manifest holds a SHA-256 per written file and each capture's findings (id, severity), so a
redesign step can show every output byte-identical, and a change of wording can show which
findings moved. Captures: fixtures/, the package's sample and ../shared/captures (when present).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CAPTURE_SUFFIXES = (".pcap", ".pcapng", ".pcap.gz")


def captures() -> list[Path]:
    found = [p for p in sorted((ROOT / "fixtures").iterdir()) if p.name.endswith(CAPTURE_SUFFIXES)]
    found.append(ROOT / "amqpcap" / "data" / "sample.pcap")
    shared = ROOT.parent / "shared" / "captures"
    if shared.is_dir():
        found += [p for p in sorted(shared.iterdir()) if p.name.endswith(CAPTURE_SUFFIXES)]
    return found


def analyse(capture: Path, out: Path) -> dict:
    args = [sys.executable, "-m", "amqpcap", "analyze", str(capture), "--out", str(out)]
    if capture.name == "tls.pcap":
        args += ["--tls-keylog", str(ROOT / "fixtures" / "tls.keylog")]
    run = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    files = {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in sorted(out.rglob("*")) if p.is_file()}
    summary = out / "summary.json"
    findings = ([[f["id"], f["severity"]] for f in json.loads(summary.read_text())["findings"]]
                if summary.exists() else [])
    return {"exit": run.returncode, "files": files, "findings": findings}


def snapshot(outdir: Path, jobs: int) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    caps = captures()
    with ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda c: analyse(c, outdir / c.name), caps))
    manifest = {c.name: r for c, r in zip(caps, results)}
    (outdir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"{len(caps)} captures analysed into {outdir}")


def compare(a: Path, b: Path) -> int:
    missing = [str(d) for d in (a, b) if not (d / "manifest.json").is_file()]
    if missing:
        sys.exit(f"no snapshot at {', '.join(missing)} (no manifest.json: make one with {Path(__file__).name} DIR)")
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    differ = 0
    for name in sorted(set(ma) | set(mb)):
        ra, rb = ma.get(name, {}), mb.get(name, {})
        fa, fb = ra.get("files", {}), rb.get("files", {})
        changed = sorted(f for f in set(fa) | set(fb) if fa.get(f) != fb.get(f))
        if ra.get("findings") != rb.get("findings"):
            print(f"{name}: findings {ra.get('findings')} -> {rb.get('findings')}")
        if changed:
            differ += 1
            print(f"{name}: {len(changed)} files differ: {', '.join(changed[:8])}{' ...' if len(changed) > 8 else ''}")
    print(f"{len(set(ma) | set(mb))} captures, {differ} with differing files")
    return 1 if differ else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dirs", nargs="+", type=Path)
    p.add_argument("--compare", action="store_true", help="compare two snapshots' manifests")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = p.parse_args()
    if a.compare:
        return compare(*a.dirs)
    snapshot(a.dirs[0], a.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
