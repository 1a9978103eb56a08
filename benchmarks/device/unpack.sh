# Source on the device machine, in the checkout's root: unpacks the bundle that
# benchmarks/device/bundle.sh made here (carried as .device-bundle) and puts it, and this
# checkout, on PYTHONPATH, so `python3 -m pipeline run ...` and `import ray` work there.
#
#   source benchmarks/device/unpack.sh
feedline_site="${FEEDLINE_SITE:-/tmp/feedline-site}"
if [ ! -f .device-bundle/site.tar.xz ]; then
  echo "no .device-bundle/site.tar.xz: run benchmarks/device/bundle.sh here and carry" \
       ".device-bundle" >&2
  return 1 2>/dev/null || exit 1
fi
if [ ! -d "$feedline_site/ray" ]; then
  mkdir -p "$feedline_site"
  tar -xJf .device-bundle/site.tar.xz -C "$feedline_site"
fi
export PYTHONPATH="$feedline_site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
