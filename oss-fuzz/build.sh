#!/usr/bin/env bash
# Builds allocsoak's fuzz targets for OSS-Fuzz and ClusterFuzzLite, and puts
# into $OUT, for each target, what ClusterFuzz reads:
#   <target>                   the libFuzzer binary (on the system allocator), and
#   <target>__<allocator>      the same binary on each allocator of soak.toml
#   <target>_seed_corpus.zip   corpus/<target>/seeds
#   <target>.dict              corpus/<target>/dict
#   <target>.options           libFuzzer's per-input limits (soak.toml's), the dict,
#                              and the ASan options the harness needs
# The checkout is at $SRC/allocsoak: both Dockerfiles put it there. Everything
# else is OSS-Fuzz's environment: $CC and $CFLAGS (sanitizer and coverage
# flags, which the cc crate passes to the bundled C allocators), $RUSTFLAGS,
# $SANITIZER, $OUT, $WORK. scripts/oss-fuzz-check runs it with that
# environment simulated.
set -euo pipefail

src="$SRC/allocsoak"
# Every [[bin]] of fuzz_targets/Cargo.toml but `drift` (a plain replay tool).
targets=(alloc_ops heap_api mt_ops diff_mimalloc)

# soak.toml's top-level setting KEY (above its first table), which the soak
# passes to libFuzzer as -FLAG: a ClusterFuzz run gets the same limits.
soak_setting() {
    local value
    value=$(awk -v key="$1" '/^\[/ { exit } $1 == key && $2 == "=" { print $3; exit }' "$src/soak.toml")
    if [ -z "$value" ]; then
        echo "build.sh: $src/soak.toml has no top-level $1; it sets libFuzzer's -$2 in <target>.options" >&2
        exit 1
    fi
    echo "$value"
}
timeout=$(soak_setting timeout_secs timeout)
rss_limit_mb=$(soak_setting rss_limit_mb rss_limit_mb)

# The C allocators get $CFLAGS (coverage and ASan from OSS-Fuzz) plus what
# allocsoak's own builds add (soak/src/project.rs): mimalloc tells ASan its
# block boundaries, and both sides use ASan's recover mode, so a crash found
# here replays the same way in `allocsoak repro`.
if [ "$SANITIZER" = address ]; then
    export CFLAGS="$CFLAGS -fsanitize-recover=address -DMI_TRACK_ASAN=1"
    export RUSTFLAGS="$RUSTFLAGS -Zsanitizer-recover=address"
fi

# The C side's instrumentation should come from the LLVM the Rust side's
# does (DESIGN.md); OSS-Fuzz pins both, so a mismatch is only reported.
rust_llvm=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
cc_llvm=$($CC --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
if [ "$rust_llvm" != "$cc_llvm" ]; then
    echo "build.sh: warning: \$CC ($CC) is LLVM ${cc_llvm:-?}, rustc is LLVM ${rust_llvm:-?}" >&2
fi

# Build output goes to $WORK, scratch by OSS-Fuzz's contract, not into $SRC.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WORK/cargo-target}"
# From inside fuzz_targets/: in coverage builds OSS-Fuzz's cargo wrapper
# replaces `cargo fuzz build` with a `cargo build --bins` in the current
# directory (or ./fuzz), which must be the fuzz package.
cd "$src/fuzz_targets"
cargo fuzz build -O --fuzz-dir .
bin="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"

# soak.toml's allocators: each target is in $OUT once per allocator,
# `<target>__<allocator>` (a hard link of one binary; the harness takes the
# allocator from its name, as ClusterFuzz sets no environment of ours), and
# as plain `<target>` (system). Names ClusterFuzz does not take (a dylib:
# path) are left out, and so are the allocators soak.toml declares
# ([[allocator]]: `allocsoak build` links those through a glue crate, which
# this build does not make).
mapfile -t declared < <(awk '/^\[\[allocator\]\]/ { a = 1; next } /^\[/ { a = 0 } a && $1 == "name" { gsub(/"/, "", $3); print $3 }' "$src/soak.toml")
mapfile -t allocators < <(awk '/^\[/ { exit } $1 == "allocators" { sub(/^[^[]*\[/, ""); sub(/\].*/, ""); gsub(/[",]/, " "); print }' "$src/soak.toml" |
    tr -s ' ' '\n' | grep -v '^$' | grep -vx system | grep -E '^[A-Za-z0-9_-]+$' |
    grep -vxF -f <(printf '%s\n' "${declared[@]}" system) || true)

# emit NAME TARGET: the dict, seed zip and options of fuzzer NAME, a build of TARGET.
emit() {
    local name=$1 t=$2 leaks=1
    cp "$src/corpus/$t/dict" "$OUT/$name.dict"
    rm -f "$OUT/${name}_seed_corpus.zip"
    zip -q -j "$OUT/${name}_seed_corpus.zip" "$src/corpus/$t/seeds"/*
    # [asan] overrides ClusterFuzz's ASAN_OPTIONS, which would otherwise win
    # over the defaults the binaries bake in (fuzz_targets/src/lib.rs): an
    # impossible size must come back null, and LeakSanitizer misreads mt_ops'
    # worker threads that outlive an input as leaks.
    if [ "$t" = mt_ops ]; then leaks=0; fi
    cat >"$OUT/$name.options" <<EOF
[libfuzzer]
timeout = $timeout
rss_limit_mb = $rss_limit_mb
dict = $name.dict
detect_leaks = $leaks

[asan]
allocator_may_return_null = 1
detect_leaks = $leaks
EOF
}

for t in "${targets[@]}"; do
    cp "$bin/$t" "$OUT/$t"
    emit "$t" "$t"
    for a in "${allocators[@]}"; do
        ln -f "$OUT/$t" "$OUT/${t}__$a"
        emit "${t}__$a" "$t"
    done
done
echo "build.sh: ${targets[*]} built into $OUT, each also as <target>__<allocator> for ${allocators[*]}"
