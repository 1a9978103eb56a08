#!/usr/bin/env bash
# The device bundle (issue 27, part 1): what the GPU machine lacks to run `pipeline run`, made
# here, where the package registries are reachable. The device image has torch, pyarrow,
# pandas, numpy, pillow and ~190 other packages (benchmarks/device/image-packages.txt, from the
# device tool's KINDS.md) on Python 3.12, but no Ray, and nothing can be fetched there.
#
#   bash benchmarks/device/bundle.sh        # -> .device-bundle/site.tar.xz (git ignores it)
#
# It downloads Ray 2.60's cp312 manylinux wheel with the wheels ray[data,train] needs, keeps
# those the image does not hold, unpacks them into one site-packages tree without ray/jars
# (Java) and ray/rllib, and packs the tree with xz. Ray's wheel alone (79 MB) is over the
# 64 MiB a device call carries; the bundle must stay under BUNDLE_MAX_MB (45). On the device:
#
#   source benchmarks/device/unpack.sh      # PYTHONPATH gets the tree and this checkout
#
# Feedline itself travels as the checkout (no install): `python -m pipeline ...`.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.device-bundle
max_mb=${BUNDLE_MAX_MB:-45}
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

pip download "ray[data,train]==2.60.0" --only-binary=:all: --python-version 3.12 \
  --implementation cp --abi cp312 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$tmp/wheels" -q

python3 - "$tmp/wheels" "$tmp/site" benchmarks/device/image-packages.txt <<'PY'
"""Unpack every downloaded wheel the image does not already hold into one tree."""
import re
import sys
import zipfile
from pathlib import Path

wheels, site, image = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()  # noqa: E731 (PEP 503)
have = {norm(line.strip()) for line in image.read_text().splitlines() if line.strip()}
site.mkdir(parents=True)
for wheel in sorted(wheels.glob("*.whl")):
    name = norm(wheel.name.split("-")[0])
    if name in have:
        print(f"  in the image: {name}")
        continue
    print(f"  bundled:      {wheel.name}")
    with zipfile.ZipFile(wheel) as zf:
        for member in zf.infolist():
            path = Path(zf.extract(member, site))
            mode = member.external_attr >> 16  # zipfile drops it: Ray's binaries need +x
            if mode and not member.is_dir():
                path.chmod(mode & 0o777)
PY

rm -rf "$tmp/site/ray/jars" "$tmp/site/ray/rllib" "$tmp"/site/*.data
find "$tmp/site" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out"
XZ_OPT=-6 tar -C "$tmp/site" -cJf "$out/site.tar.xz" .
size=$(du -m "$out/site.tar.xz" | cut -f1)
echo "bundle: $out/site.tar.xz, ${size} MB (limit ${max_mb} MB)"
if [ "$size" -gt "$max_mb" ]; then
  echo "the bundle is over ${max_mb} MB: a device call carries 64 MiB with the checkout" >&2
  exit 1
fi
