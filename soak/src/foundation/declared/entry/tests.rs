use super::*;

fn entry(extra: &str) -> Declared {
    toml::from_str(&format!("name = \"mine\"\n{extra}")).unwrap()
}

#[test]
fn a_version_requirement_picks_from_its_compatible_series() {
    for (version, series) in [
        ("0.1", Some("0.1")),
        ("=0.1.4", Some("0.1")),
        ("^0.2.14", Some("0.2")),
        ("0.0.3", Some("0.0.3")),
        ("4", Some("4")),
        (">=3.1, <4", Some("3")),
        ("not a version", None),
    ] {
        let d = entry(&format!("crate = \"x\"\nversion = \"{version}\"\n"));
        assert_eq!(d.series().as_deref(), series, "{version}");
    }
}

/// The shim's C array and the Rust struct it is read as agree.
#[test]
fn the_shim_hands_over_as_many_functions_as_cfunctions_holds() {
    assert_eq!(
        std::mem::size_of::<shadow::allocator::CFunctions>(),
        allocsoak_declared_c::FUNCTIONS.len() * std::mem::size_of::<usize>()
    );
}

#[test]
fn init_runs_on_the_allocator_where_it_stays() {
    let d = entry("crate = \"mine\"\npath = \".\"\nnew = \"mine::Heap::empty()\"\ninit = \"unsafe { heap.init() }\"\narena = 4096\n");
    d.check().unwrap();
    let line = d.registration(Path::new("/r"));
    let placed =
        line.find("GlobalAllocAdapter::new(\"mine\", mine::Heap::empty()).with_arena(4096)");
    let bound = line.find("let heap = adapter.allocator();");
    let init = line.find("unsafe { heap.init() }");
    assert!(
        placed < bound && bound < init && placed.is_some(),
        "init must run after the value is placed:\n{line}"
    );
}

#[test]
fn a_c_allocator_gets_its_declared_properties() {
    let d = entry("arena = 65536\nmax_align = 64\n[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n");
    d.check().unwrap();
    let line = d.registration(Path::new("/r"));
    assert!(
        line.contains("linked_c(\"mine\", unsafe { allocsoak_c_mine() }).with_arena(65536).with_max_align(64)"),
        "{line}"
    );
}

#[test]
fn a_c_allocator_declares_where_its_zeroed_realloc_zeroes_from() {
    let c = "[c]\nsources = [\"a.c\"]\nprefix = \"mi_\"\n";
    let default = entry(c).registration(Path::new("/r"));
    assert!(!default.contains("with_zeroed_from"), "{default}");
    let usable = entry(&format!("{c}zeroed_realloc = \"usable\"\n")).registration(Path::new("/r"));
    assert!(
        usable.contains(".with_zeroed_from(shadow::allocator::ZeroedFrom::Usable {"),
        "{usable}"
    );
}

#[test]
fn a_librarys_declared_walk_is_registered_by_its_symbol() {
    let walked = entry("[dylib]\npath = \"a.so\"\nwalk = \"umm_walk\"\n");
    walked.check().unwrap();
    let line = walked.registration(Path::new("/r"));
    assert!(line.contains(".with_walk(\"umm_walk\")"), "{line}");
}

#[test]
fn a_library_is_loaded_from_beside_the_config_with_its_declared_properties() {
    let d = entry("arena = 131072\nmax_align = 4\nthreads = 1\n[dylib]\npath = \"lib/libumm.so\"\nprefix = \"umm_\"\n");
    d.check().unwrap();
    let line = d.registration(Path::new("/r"));
    assert!(
        line.contains("declare_library(\"mine\", \"/r/lib/libumm.so:umm_\", |library| library.with_arena(131072).with_max_align(4).with_single_thread())"),
        "{line}"
    );
    let forks = entry("fork_safe = true\n[dylib]\npath = \"lib/libmi.so\"\nprefix = \"mi_\"\n");
    let line = forks.registration(Path::new("/r"));
    assert!(
        line.contains("|library| library.with_fork_safe())"),
        "{line}"
    );
    let hardened = entry("stops = [\"double-free\", \"freed-write\"]\n[dylib]\npath = \"a.so\"\n");
    hardened.check().unwrap();
    let line = hardened.registration(Path::new("/r"));
    assert!(
        line.contains("|library| library.with_stops(&[shadow::allocator::Attack::DoubleFree, shadow::allocator::Attack::FreedWrite]))"),
        "{line}"
    );
    let e =
        toml::from_str::<Declared>("name = \"mine\"\nstops = [\"use-after-free\"]\n").unwrap_err();
    assert!(
        e.message()
            .contains("stops: unknown attack `use-after-free`; expected one of double-free, foreign-free, freed-write, interior-free, overflow, header-write"),
        "{e}"
    );
}

#[test]
fn a_c_allocators_wrong_declaration_is_one_line() {
    for (extra, says) in [
        (
            "[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n[dylib]\npath = \"a.so\"\n",
            "one of",
        ),
        (
            "new = \"x\"\n[dylib]\npath = \"a.so\"\n",
            "C allocator takes no",
        ),
        ("[dylib]\npath = \"a.so\"\nprefix = \"my-\"\n", "prefix"),
        (
            "[dylib]\npath = \"a.so\"\nheap_check = \"check()\"\n",
            "not a C symbol",
        ),
        (
            "[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\nheap_check = \"a\"\nfunctions = { heap_check = \"b\" }\n",
            "give heap_check once",
        ),
        (
            "[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\nin_use = \"a\"\nfunctions = { in_use = \"b\" }\n",
            "give in_use once",
        ),
        (
            "[dylib]\npath = \"a.so\"\nin_use = \"used()\"\n",
            "not a C symbol",
        ),
        (
            "in_use = \"heap.used()\"\n[dylib]\npath = \"a.so\"\n",
            "is a function: give it as c.in_use or dylib.in_use",
        ),
        (
            "crate = \"b\"\nversion = \"1\"\napi = \"allocator-api2\"\nnew = \"b::B::new()\"\nin_use = \"heap.used()\"\n",
            "`in_use` is for a GlobalAlloc",
        ),
        (
            "walk = \"heap.blocks()\"\n[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n",
            "is a function: give it as c.walk or dylib.walk",
        ),
        (
            "[dylib]\npath = \"a.so\"\nwalk = \"heap.blocks()\"\n",
            "walk = \"heap.blocks()\" is not a C symbol",
        ),
        (
            "[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\nwalk = \"a\"\nfunctions = { walk = \"b\" }\n",
            "give walk once",
        ),
        (
            "crate = \"b\"\nversion = \"1\"\napi = \"allocator-api2\"\nnew = \"b::B::new()\"\nwalk = \"heap.blocks()\"\n",
            "`walk` is for a GlobalAlloc",
        ),
    ] {
        let e = entry(extra).check().unwrap_err().to_string();
        assert!(e.contains("`mine`") && e.contains(says), "{e}");
    }
}

/// A library's heap check is looked up by the name declared, a C
/// allocator's is mapped as its other functions are; either is read
/// as `bool` when declared so.
#[test]
fn a_declared_heap_check_reaches_the_adapter() {
    let lib = entry("[dylib]\npath = \"libumm.so\"\nprefix = \"uh_\"\nheap_check = \"umm_integrity_check\"\nheap_check_returns = \"bool\"\n");
    lib.check().unwrap();
    let line = lib.registration(Path::new("/r"));
    assert!(
        line.contains("|library| library.with_heap_check(\"umm_integrity_check\").with_heap_check_returns(shadow::allocator::HeapCheckReturns::Bool))"),
        "{line}"
    );
    let c =
        entry("[c]\nsources = [\"a.c\"]\nprefix = \"uh_\"\nheap_check = \"umm_integrity_check\"\n");
    c.check().unwrap();
    let src = c.c.as_ref().unwrap();
    assert_eq!(src.mapped(), [("heap_check", "umm_integrity_check")]);
    let line = c.registration(Path::new("/r"));
    assert!(!line.contains("heap_check"), "the default reading: {line}");
    let e = toml::from_str::<Declared>("name = \"mine\"\n[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\nheap_check_returns = \"yes\"\n").unwrap_err();
    assert!(e.to_string().contains("expected `errors` or `bool`"), "{e}");
}

/// A count of bytes in use: a crate's expression over `heap`, a library's
/// function by the name declared, a C allocator's mapped as its other
/// functions are.
#[test]
fn a_declared_count_of_bytes_in_use_reaches_the_adapter() {
    let rust = entry("crate = \"embedded-alloc\"\nversion = \"0.7\"\nnew = \"embedded_alloc::TlsfHeap::empty()\"\nin_use = \"heap.used()\"\n");
    rust.check().unwrap();
    let line = rust.registration(Path::new("/r"));
    assert!(
        line.contains(".with_in_use(|heap| -> usize { heap.used() })"),
        "{line}"
    );
    let walked = entry("crate = \"tlsf-pool\"\npath = \"tlsf-pool\"\nnew = \"tlsf_pool::TlsfPool::new()\"\nwalk = \"heap.blocks()\"\n");
    walked.check().unwrap();
    let line = walked.registration(Path::new("/r"));
    assert!(
        line.contains(".with_walk(|heap| -> Vec<(usize, usize)> { ::std::iter::IntoIterator::into_iter(heap.blocks()).collect() })"),
        "{line}"
    );
    let lib = entry("[dylib]\npath = \"libumm.so\"\nin_use = \"umm_used\"\n");
    lib.check().unwrap();
    let line = lib.registration(Path::new("/r"));
    assert!(line.contains(".with_in_use(\"umm_used\")"), "{line}");
    let c = entry("[c]\nsources = [\"a.c\"]\nprefix = \"uh_\"\nin_use = \"umm_used\"\n");
    c.check().unwrap();
    assert_eq!(c.c.as_ref().unwrap().mapped(), [("in_use", "umm_used")]);
}

#[test]
fn an_emitted_test_names_every_dependency_the_expression_needs() {
    let d = entry("crate = \"umm-malloc-sys\"\nversion = \"0.3\"\nnew = \"x()\"\ndependencies = { critical-section = { version = \"1\", features = [\"std\"] } }\n");
    d.check().unwrap();
    let setup = d.test_setup(Path::new("/r/allocsoak.toml"));
    for needed in [
        "// umm-malloc-sys = { version = \"0.3\" }",
        "// critical-section = ",
    ] {
        assert!(setup.contains(needed), "{needed} missing:\n{setup}");
    }
}

#[test]
fn a_crates_usable_size_is_asked_of_the_placed_allocator() {
    let d = entry("crate = \"mine\"\npath = \".\"\nstatic = \"mine::GLOBAL\"\nusable_size = \"unsafe { heap.usable_size(p) }\"\n");
    d.check().unwrap();
    let line = d.registration(Path::new("/r"));
    assert!(
        line.contains("of_static(\"mine\", &mine::GLOBAL).with_usable_size(|heap, p: *mut u8| -> usize { unsafe { heap.usable_size(p) } })"),
        "{line}"
    );
}

#[test]
fn init_and_usable_size_are_refused_where_nothing_would_run_them() {
    for (extra, says) in [
        ("crate = \"mine\"\npath = \".\"\napi = \"allocator-api2\"\nnew = \"mine::Bump::new()\"\ninit = \"x\"\n", "GlobalAlloc"),
        ("init = \"x\"\n[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n", "C allocator"),
        ("crate = \"mine\"\npath = \".\"\napi = \"allocator-api2\"\nnew = \"mine::Bump::new()\"\nusable_size = \"x\"\n", "slice"),
        ("usable_size = \"x\"\n[c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n", "malloc_usable_size"),
    ] {
        let e = entry(extra).check().unwrap_err().to_string();
        assert!(e.contains("`mine`") && e.contains(says), "{e}");
    }
}
