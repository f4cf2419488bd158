#!/usr/bin/env bash
# ClusterFuzzLite's build for YOUR allocator's repository (Dockerfile beside
# it): allocsoak's build with your config. $OUT gets every fuzz target as
# <target> (system) and <target>__<allocator> for your config's allocators.
set -euo pipefail
export ALLOCSOAK_CONFIG="$SRC/myalloc/allocsoak.toml"
exec "$SRC/allocsoak/oss-fuzz/build.sh"
