# allocsoak: the user-facing verbs. `just setup` is safe to run twice.

set shell := ["bash", "-euo", "pipefail", "-c"]

allocsoak := "cargo run -q --release -p soak --"

# Install what is missing: clang matching nightly's LLVM, honggfuzz's libraries, cargo-fuzz, honggfuzz, Miri.
setup:
    ./scripts/setup

# What `setup` installs, and the tools only the tests use (chromium, shellcheck, actionlint, zip).
setup-test:
    ./scripts/setup --test

# Build the fuzz targets (ASan + coverage; C allocators instrumented), and honggfuzz's when a slot runs it.
build *ARGS: setup
    {{allocsoak}} build {{ARGS}}

# State in ./soak-state, reports in soak-state/crashes/*/REPORT.md; more flags after
# SECS (`--allocator zoo:double-issue`).
# The main job: soak every slot in soak.toml for SECS seconds (`just soak 28800` overnight).
# It fuzzes as soon as the first target's binary links and builds the rest beside it.
soak SECS="600" *ARGS: setup
    {{allocsoak}} soak --build --duration {{SECS}} {{ARGS}}

# A running (or finished) soak's progress, from its state dir.
status STATE="soak-state":
    {{allocsoak}} status --state {{STATE}}

# The dashboard on http://127.0.0.1:8077/ (read-only; `--export DIR` writes it as files).
dash STATE="soak-state" *ARGS:
    {{allocsoak}} dash --state {{STATE}} {{ARGS}}

# Filters: --allocator, --target, --kind, --status. `just triage verify` re-runs every
# group on the current build; `just triage export <id>` bundles one for upstream.
# Crash groups a soak filed, newest first.
triage *ARGS:
    {{allocsoak}} triage {{ARGS}}

# Exits 1 while it reproduces; --emit-test FILE writes the program as a Rust #[test].
# Replay a crash group (its id) or an input file (--target, --allocator) on the current build.
repro WHAT *ARGS:
    {{allocsoak}} repro {{WHAT}} {{ARGS}}

# The CI gate: every slot one slice of SECS through the soak's pipeline; exits 1 on a
# new finding. More flags after SECS (`--known allocsoak-known.toml`, `--corpus DIR`).
quick SECS="10" *ARGS: setup
    {{allocsoak}} build
    {{allocsoak}} quick --secs {{SECS}} {{ARGS}}

# Fuzz one target on one allocator, e.g. `just fuzz alloc_ops mimalloc 60`.
fuzz TARGET ALLOCATOR="system" SECS="60": setup
    {{allocsoak}} fuzz --target {{TARGET}} --allocator {{ALLOCATOR}} --secs {{SECS}}

# Every planted bug through its target, and the correct allocators as controls.
zoo SECS="60": setup
    {{allocsoak}} zoo --secs {{SECS}}

# The build, then unit, integration and end-to-end soak tests, the instrumentation
# check, honggfuzz's build and a planted bug found by it, OSS-Fuzz's and
# ClusterFuzzLite's build scripts in a simulated OSS-Fuzz environment, the plain
# reproductions of corpus/findings (no allocsoak in them), then the zoo.
# The tests build in release, as `allocsoak build` did (overflow checks and
# debug assertions on: Cargo.toml), so its whole dependency tree is reused;
# shadow's own tests run apart, with its C allocators, which the CLI is
# built without (a workspace-wide run would build the CLI's tree again).
# All the tests.
test: setup-test
    {{allocsoak}} build
    cargo fmt --all --check
    cargo clippy --release --workspace --all-targets -- -D warnings
    cargo test --release --workspace --exclude shadow
    cargo test --release -p shadow
    cargo test --release -p shadow --features mimalloc-secure --test clean --test hardening mimalloc
    cargo test --release -p shadow --features mimalloc-debug --test clean --test mimalloc_debug mimalloc
    cargo test --release -p shadow --no-default-features --features jemalloc,mimalloc-v3 --test clean --test mimalloc_v3 mimalloc
    {{allocsoak}} instrumentation
    ./scripts/hfuzz-build
    ./scripts/hfuzz-zoo
    ./scripts/oss-fuzz-check
    ./corpus/findings/repro/check
    # large-reuse-dirty takes 2 to 5 minutes to find, crowded-reissue (a
    # workload's) 17 s to 3 minutes, hook-reentry-reissue 10 s to a minute,
    # cache-trusts-span, cache-trusts-header and cache-guards-header (an
    # attack of one kind in one class) 16 s to 5 minutes (BENCHMARKS.md); their programs are
    # checked in shadow/tests/zoo.rs and shadow/tests/hardening.rs.
    {{allocsoak}} zoo --secs 6 --minimize-secs 3 --skip large-reuse-dirty --skip crowded-reissue --skip hook-reentry-reissue --skip cache-trusts-span --skip cache-trusts-header --skip cache-guards-header

# exec/s with and without the shadow model, per target × allocator (see BENCHMARKS.md).
bench SECS="20": setup
    {{allocsoak}} bench --secs {{SECS}}
