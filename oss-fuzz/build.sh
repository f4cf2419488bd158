#!/usr/bin/env bash
# Builds allocsoak's fuzz targets for OSS-Fuzz and ClusterFuzzLite, with the
# allocators of a config (soak.toml, or $ALLOCSOAK_CONFIG: an allocator
# author's, whose declared allocators are built in), and puts into $OUT, for
# each fuzzer, what ClusterFuzz reads:
#   <target>                   the libFuzzer binary (on the system allocator), and
#   <target>__<allocator>      the same binary on each allocator of the config's slots
#   <name>_seed_corpus.zip     corpus/<target>/seeds
#   <name>.dict                corpus/<target>/dict
#   <name>.options             libFuzzer's per-input limits (the config's), the dict,
#                              and the ASan options the harness needs
# The checkout is at $SRC/allocsoak: the Dockerfiles put it there. Everything
# else is OSS-Fuzz's environment: $CC and $CFLAGS (sanitizer and coverage
# flags, which the cc crate passes to the bundled and declared C allocators),
# $RUSTFLAGS, $SANITIZER, $OUT, $WORK. scripts/oss-fuzz-check runs it with
# that environment simulated.
set -euo pipefail

src="$SRC/allocsoak"
# The config whose allocators are built: soak.toml, or an allocator
# author's (its [[allocator]] entries, Rust crates and C sources alike, are
# built here as `allocsoak build` builds them at home).
config="${ALLOCSOAK_CONFIG:-$src/soak.toml}"
[ -f "$config" ] || { echo "build.sh: no config at $config; set ALLOCSOAK_CONFIG to your allocsoak.toml" >&2; exit 1; }

# The allocsoak command, a plain host build (none of OSS-Fuzz's sanitizer
# or coverage flags; unoptimized, as it only reads the config), writes the
# glue crate of the config's declared allocators. What it prints
# (soak/src/cmd/oss_fuzz.rs): the fuzz package to build, libFuzzer's
# per-input limits, and each fuzzer's binary and name.
# $ALLOCSOAK_BIN, when set, is such a command already built from this
# checkout (scripts/oss-fuzz-check passes the one `just test` built).
allocsoak="${ALLOCSOAK_BIN:-$WORK/allocsoak/debug/allocsoak}"
if [ -z "${ALLOCSOAK_BIN:-}" ]; then
    (cd "$src" && env -u RUSTFLAGS -u CFLAGS -u CXXFLAGS CARGO_TARGET_DIR="$WORK/allocsoak" \
        cargo build --locked -p soak)
fi
layout=$(ALLOCSOAK_ROOT="$src" "$allocsoak" --config "$config" oss-fuzz)
package=$(awk '$1 == "package" { print $2 }' <<<"$layout")
read -r timeout rss_limit_mb < <(awk '$1 == "limits" { print $2, $3 }' <<<"$layout")

# The C allocators get $CFLAGS (coverage and ASan from OSS-Fuzz) plus what
# allocsoak's own builds add (soak/src/engines/project.rs): mimalloc tells ASan its
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

# The harness's crates are built without sanitizer coverage, as in
# allocsoak's own builds: the fuzzer counts the allocator's code alone.
export RUSTC_WRAPPER="$src/fuzz_targets/rustc-wrapper"
ALLOCSOAK_UNCOVERED=$(awk '$1 == "uncovered" { $1 = ""; print }' <<<"$layout")
export ALLOCSOAK_UNCOVERED

# Build output goes to $WORK, scratch by OSS-Fuzz's contract, not into $SRC.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$WORK/cargo-target}"
# From inside the fuzz package (fuzz_targets/, or the glue): in coverage
# builds OSS-Fuzz's cargo wrapper replaces `cargo fuzz build` with a `cargo
# build --bins` in the current directory (or ./fuzz), which must be it.
cd "$package"
cargo fuzz build -O --fuzz-dir .
bin="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release"

# emit NAME TARGET: the dict, seed zip and options of fuzzer NAME, a build of TARGET.
emit() {
    local name=$1 t=$2 leaks=1
    cp "$src/corpus/$t/dict" "$OUT/$name.dict"
    rm -f "$OUT/${name}_seed_corpus.zip"
    zip -q -j "$OUT/${name}_seed_corpus.zip" "$src/corpus/$t/seeds"/*
    # [asan] overrides ClusterFuzz's ASAN_OPTIONS, which would otherwise win
    # over the defaults the binaries bake in (shadow::sanitizer::asan_defaults):
    # an impossible size must come back null; LeakSanitizer misreads mt_ops'
    # worker threads that outlive an input as leaks, and a fake stack per
    # thread is a third of what mt_ops' (and workload's) thread starts and
    # exits cost.
    local uar=""
    if [ "$t" = mt_ops ] || [ "$t" = workload ]; then
        leaks=0
        uar="detect_stack_use_after_return = 0"
    fi
    cat >"$OUT/$name.options" <<EOF
[libfuzzer]
timeout = $timeout
rss_limit_mb = $rss_limit_mb
dict = $name.dict
detect_leaks = $leaks

[asan]
allocator_may_return_null = 1
detect_leaks = $leaks
$uar
EOF
}

# Each target as plain `<target>` (system), then `<target>__<allocator>`
# for the config's slots: a hard link of the same binary.
fuzzers=0
while read -r _ t binary name; do
    if [ "$name" = "$t" ]; then
        cp "$bin/$binary" "$OUT/$name"
    else
        ln -f "$OUT/$t" "$OUT/$name"
    fi
    emit "$name" "$t"
    fuzzers=$((fuzzers + 1))
done < <(awk '$1 == "fuzzer"' <<<"$layout")
if [ "$fuzzers" -eq 0 ]; then
    echo "build.sh: \`allocsoak oss-fuzz\` listed no fuzzers for $config" >&2
    exit 1
fi
echo "build.sh: $fuzzers fuzzers built into $OUT for $config"
