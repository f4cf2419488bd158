use super::*;

fn parse(text: &str) -> Result<Vec<Slot>> {
    toml::from_str::<Config>(text)
        .map_err(anyhow::Error::from)?
        .slots()
}

#[test]
fn a_single_threaded_allocator_has_no_mt_ops_slot_and_says_why() {
    let entry = "[[allocator]]\nname = \"heap\"\ncrate = \"h\"\npath = \".\"\nnew = \"h::H\"\n";
    let text = format!("targets = [\"alloc_ops\", \"mt_ops\"]\n{entry}threads = 1\n");
    let config: Config = toml::from_str(&text).unwrap();
    let slots: Vec<String> = config
        .slots()
        .unwrap()
        .iter()
        .map(|s| s.target.name().to_string())
        .collect();
    assert_eq!(slots, ["alloc_ops"]);
    let why = config.left_out();
    assert!(
        why.len() == 1 && why[0].contains("mt_ops left out for `heap`"),
        "{why:?}"
    );
    for (threads, says) in [
        ("threads = 2", "threads = 2"),
        ("threads = 1\napi = \"allocator-api2\"", "one lock"),
    ] {
        let d: crate::foundation::declared::Declared = toml::from_str(&format!(
            "{}{threads}\n",
            entry.trim_start_matches("[[allocator]]\n")
        ))
        .unwrap();
        let e = d.check().unwrap_err().to_string();
        assert!(e.contains(says), "{e}");
    }
}

#[test]
fn the_committed_config_crosses_targets_and_allocators_on_both_engines() {
    let config = Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml")).unwrap();
    let slots = config.slots().unwrap();
    let on = |engine: &str| slots.iter().filter(|s| s.engine == engine).count();
    assert_eq!(
        on("libfuzzer"),
        config.targets.len() * config.allocators().len()
    );
    // honggfuzz on every target.
    assert_eq!(on("honggfuzz") % Target::ALL.len(), 0);
    assert!(on("honggfuzz") > 0);
    assert_eq!(on("libfuzzer") + on("honggfuzz"), slots.len());
    assert!(slots.iter().all(|s| s.weight == 1.0));
}

#[test]
fn a_slot_entry_crosses_its_lists() {
    let slots = parse(
        "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
         [[slot]]\nengine = \"honggfuzz\"\ntargets = [\"alloc_ops\", \"mt_ops\"]\nallocators = [\"system\", \"mimalloc\"]\nweight = 0.5\n",
    )
    .unwrap();
    let labels: Vec<String> = slots
        .iter()
        .map(|s| format!("{} {} {}", s.label(), s.engine, s.weight))
        .collect();
    assert_eq!(
        labels,
        [
            "alloc_ops/system libfuzzer 1",
            "alloc_ops/system honggfuzz 0.5",
            "alloc_ops/mimalloc honggfuzz 0.5",
            "mt_ops/system honggfuzz 0.5",
            "mt_ops/mimalloc honggfuzz 0.5"
        ]
    );
}

#[test]
fn honggfuzz_slots_refuse_what_its_plain_build_lacks() {
    for allocator in [
        "mimalloc-debug",
        "dylib:/usr/lib/x86_64-linux-gnu/libc.so.6",
    ] {
        let e = parse(&format!(
            "allocators = [\"system\"]\n[[slot]]\nengine = \"honggfuzz\"\ntarget = \"alloc_ops\"\nallocator = \"{allocator}\"\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(allocator) && e.contains("engine = \"libfuzzer\""),
            "{e}"
        );
    }
}

#[test]
fn slot_entries_reweigh_or_add() {
    let slots = parse(
        "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
         [[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\nweight = 3.0\n\
         [[slot]]\ntarget = \"mt_ops\"\nallocator = \"zoo:double-issue\"\n",
    )
    .unwrap();
    assert_eq!(slots.len(), 2);
    assert_eq!((slots[0].weight, slots[0].cores), (3.0, 1));
    assert_eq!(slots[1].label(), "mt_ops/zoo:double-issue");
    let slots = parse(
        "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
         [[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\ncores = 2\n",
    )
    .unwrap();
    assert_eq!((slots.len(), slots[0].cores, slots[0].weight), (1, 2, 1.0));
    let e = parse("[[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\ncores = 0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("cores must be 1 or more"), "{e}");
}

fn drift(text: &str) -> Result<Vec<Series>> {
    let config: Config = toml::from_str(text)?;
    config.drift_series(&config.slots()?)
}

#[test]
fn drift_is_off_unless_given_a_share() {
    assert!(drift("allocators = [\"system\"]").unwrap().is_empty());
    let mut config =
        Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml")).unwrap();
    config.drift.cpu_share = 0.25;
    let series = config.drift_series(&config.slots().unwrap()).unwrap();
    assert!(!series.is_empty());
}

#[test]
fn drift_series_default_to_the_slots_allocators_the_drift_build_runs() {
    let series = drift(
        "targets = [\"alloc_ops\", \"mt_ops\"]\n\
         allocators = [\"system\", \"glibc\", \"mimalloc-debug\", \"zoo:leak-on-shrink\", \"system\", \"dylib:/usr/lib/x86_64-linux-gnu/libc.so.6\"]\n\
         [drift]\ncpu_share = 0.5\ntargets = [\"alloc_ops\", \"heap_api\"]\n",
    )
    .unwrap();
    let labels: Vec<String> = series.iter().map(Series::label).collect();
    assert_eq!(
        labels,
        [
            "alloc_ops/system",
            "alloc_ops/zoo:leak-on-shrink",
            "heap_api/system",
            "heap_api/zoo:leak-on-shrink"
        ]
    );
    // Without `system` beside it, `glibc` is watched.
    let series =
        drift("targets = [\"alloc_ops\"]\nallocators = [\"glibc\"]\n[drift]\ncpu_share = 0.5\n")
            .unwrap();
    let labels: Vec<String> = series.iter().map(Series::label).collect();
    assert_eq!(labels, ["alloc_ops/glibc"]);
}

#[test]
fn bad_drift_settings_say_what_to_use() {
    let e = drift("[drift]\ncpu_share = 1\ntargets = [\"diff_mimalloc\"]").unwrap_err();
    assert!(
        e.to_string()
            .contains("alloc_ops, heap_api, mt_ops or workload"),
        "{e}"
    );
    let e = drift("[drift]\ncpu_share = 1\nallocators = [\"mimalloc-secure\"]").unwrap_err();
    assert!(
        e.to_string().contains("without the mimalloc flavors"),
        "{e}"
    );
    let e = drift("[drift]\ncpu_share = -1").unwrap_err();
    assert!(e.to_string().contains("cpu_share"), "{e}");
    let e = drift("[drift]\ncpu_share = 1\ninterval_secs = 0").unwrap_err();
    assert!(e.to_string().contains("interval_secs"), "{e}");
    assert!(drift("[drift]\ncpu_shares = 1").is_err());
    let e = drift("[drift]\ncpu_share = 1\ntraces = [\"Cargo.toml\"]").unwrap_err();
    assert_eq!(
        e.to_string(),
        "[drift] traces: ./Cargo.toml is not a trace this allocsoak records; record one with `allocsoak trace record`"
    );
}

#[test]
fn a_trace_is_a_series_per_drift_allocator() {
    let dir = tempfile::tempdir().unwrap();
    let mut trace = shadow::op::trace::Writer::new();
    trace.record(1, 7, 24, 0, 0x1000);
    std::fs::write(dir.path().join("app.trace"), &trace.out).unwrap();
    let path = dir.path().join("soak.toml");
    std::fs::write(
        &path,
        "allocators = [\"system\", \"jemalloc\"]\n[drift]\ncpu_share = 1\ntargets = []\ntraces = [\"app.trace\"]\n",
    )
    .unwrap();
    let config = Config::load(&path).unwrap();
    let series = config.drift_series(&config.slots().unwrap()).unwrap();
    let labels: Vec<String> = series.iter().map(Series::label).collect();
    assert_eq!(
        labels,
        ["trace:app.trace/system", "trace:app.trace/jemalloc"]
    );
    assert_eq!(
        series[0].trace.as_deref(),
        Some(dir.path().join("app.trace").as_path())
    );
}

#[test]
fn declared_allocators_are_the_default_slots_and_known_names() {
    let config: Config = toml::from_str(
        "targets = [\"alloc_ops\"]\n\
         [[allocator]]\nname = \"mine\"\ncrate = \"mine\"\npath = \".\"\nstatic = \"mine::A\"\n",
    )
    .unwrap();
    let slots = config.slots().unwrap();
    assert_eq!(slots.len(), 1);
    assert_eq!(slots[0].label(), "alloc_ops/mine");
    assert!(config.check_allocator("system").is_ok());
    let e = config.check_allocator("yours").unwrap_err().to_string();
    assert!(e.contains("yours") && e.contains("mine"), "{e}");
    assert!(config.test_setup("mine").contains("declare(\"mine\""));
    assert_eq!(config.test_setup("system"), "");
}

#[test]
fn bad_names_say_what_is_known() {
    let e = parse("targets = [\"alloc_opz\"]").unwrap_err().to_string();
    assert!(e.contains("alloc_opz"), "{e}");
    let e = parse("allocators = [\"tcmalloc\"]")
        .unwrap_err()
        .to_string();
    assert!(e.contains("tcmalloc") && e.contains("system"), "{e}");
    let e = parse("engine = \"afl\"").unwrap_err().to_string();
    assert!(e.contains("unknown engine `afl`"), "{e}");
    assert!(parse("slice_minutes = 0").is_err());
    assert!(toml::from_str::<Config>("slice_minute = 1").is_err());
}

#[test]
fn a_declared_library_must_exist_and_stays_off_honggfuzz() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("allocsoak.toml");
    let entry = "[[allocator]]\nname = \"umm\"\n[allocator.dylib]\npath = \"libumm.so\"\n";
    std::fs::write(&config, entry).unwrap();
    let e = format!("{:#}", Config::load(&config).unwrap_err());
    assert!(
        e.contains("`umm`") && e.contains("libumm.so does not exist"),
        "{e}"
    );
    std::fs::write(dir.path().join("libumm.so"), b"").unwrap();
    std::fs::write(
        &config,
        format!("{entry}[[slot]]\nengine = \"honggfuzz\"\ntargets = [\"alloc_ops\"]\nallocators = [\"umm\"]\n"),
    )
    .unwrap();
    let e = format!("{:#}", Config::load(&config).unwrap().slots().unwrap_err());
    assert!(e.contains("honggfuzz runs the plain build"), "{e}");
}

#[test]
fn a_trace_slot_is_a_drift_series_and_says_what_it_needs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("soak.toml");
    let load = |text: &str| {
        std::fs::write(
            &path,
            format!("targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n{text}"),
        )
        .unwrap();
        Config::load(&path).map_err(|e| format!("{e:#}"))
    };
    let config = load("[[slot]]\ntrace = \"app.trace\"\n[drift]\ncpu_share = 0.5\n").unwrap();
    assert_eq!(config.drift.traces, [PathBuf::from("app.trace")]);
    assert!(config.slots.is_empty(), "no fuzzing slot of it");
    for (text, says) in [
        ("[[slot]]\ntrace = \"app.trace\"\n", "[drift] cpu_share is 0; give it a share"),
        (
            "[[slot]]\ntrace = \"app.trace\"\nallocators = [\"mimalloc\"]\n[drift]\ncpu_share = 0.5\n",
            "`allocators` does not apply to a trace",
        ),
    ] {
        let e = load(text).unwrap_err();
        assert!(e.contains(says) && e.lines().count() == 1, "{e}");
    }
}

#[test]
fn miri_passes_are_on_by_default_off_at_zero_and_a_bad_interval_is_refused() {
    let config: Config = toml::from_str("").unwrap();
    assert!(config.miri.on().unwrap());
    assert_eq!((config.miri.every_hours, config.miri.most), (2.0, 10));
    let off: Config = toml::from_str("[miri]\nevery_hours = 0\n").unwrap();
    assert!(!off.miri.on().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[miri]\nevery_hours = -1\n").unwrap();
    let e = format!("{:#}", Config::load(&path).unwrap_err());
    assert!(e.contains("[miri] every_hours must be 0"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}
