#!/usr/bin/env bash
# ClusterFuzzLite's build: the same as OSS-Fuzz's (oss-fuzz/build.sh), which
# builds every fuzz target and writes its seed zip, dict and options to $OUT.
set -euo pipefail
exec "$SRC/allocsoak/oss-fuzz/build.sh"
