//! The harness's settings: one typed value ([`Settings`]), read from the
//! environment once per process ([`Settings::from_env`]) or put in place
//! by whoever starts the harness ([`install`]), and held in one place
//! ([`get`]). The modules that act on a setting take it from there; the
//! variables' names and meanings are the interface the soak, triage and
//! a user's shell set them by.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::OnceLock;

/// Whether the shadow model runs (`Checked`) or only the allocator calls
/// (`Bare`, the cost floor `just bench` compares against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Checked,
    Bare,
}

/// What the harness is told to do, one field per `ALLOCSOAK_*` variable
/// the harness reads (the soak, triage and the repro commands set them for
/// the processes they start; unset, each has the default below):
///
/// - `ALLOCSOAK_ALLOCATOR` ([`allocator`](Self::allocator)): the allocator
///   under test, by name (default: what follows `__` in the binary's name,
///   `alloc_ops__mimalloc`, else `system`).
/// - `ALLOCSOAK_REFERENCE` ([`reference`](Self::reference)): the allocator
///   `diff_mimalloc` compares against (default: the mimalloc this build
///   links, `mimalloc` in a plain build).
/// - `ALLOCSOAK_MODE` ([`mode`](Self::mode)): `checked` (default) or
///   `bare` (no shadow model: the cost floor for `just bench`).
/// - `ALLOCSOAK_TEXT_INPUTS=1` ([`text_inputs`](Self::text_inputs)): an
///   input that is op program text (as `program.txt` and a minimized crash
///   hold it) runs as written; any other input decodes as fuzz bytes
///   (default `0`). Replays set it; fuzzing does not, so no fuzzer spends
///   its time in the text parser.
/// - `ALLOCSOAK_SERIAL_RACES=1` ([`serial_races`](Self::serial_races)):
///   `mt_ops`' race sections run one worker at a time (default `0`; the
///   serial replay of a race).
/// - `ALLOCSOAK_TOLERATE` ([`tolerate`](Self::tolerate)): a file of
///   violation keys (or `prefix*` patterns, or `save` lines) that are got
///   past instead of crashing: a violation that leaves the heap sound is
///   counted and the program goes on, any other ends its program quietly
///   (see [`crate::tolerance`]). Default: none; a file that does not read
///   ends the process.
/// - `ALLOCSOAK_FINDINGS` ([`findings`](Self::findings)): a folder where a
///   violation that leaves the heap sound is saved with its input, and the
///   process goes on; unset (or empty), it panics unless tolerated (see
///   [`crate::findings`]).
/// - `ALLOCSOAK_CLAIMS` ([`claims`](Self::claims)): a folder shared by
///   every process that fuzzes one allocator in a soak, where the first
///   to save a key claims it: the others count it without saving another
///   input (see [`crate::findings`]). Default: none; each process saves
///   its own first input per key.
/// - `ALLOCSOAK_RECORD` ([`record`](Self::record)): a file the violation
///   that ends the run is written to, typed (replays set it; unset or
///   empty, none is written). It also turns on the coverage probe that keys
///   a violation by its code path ([`crate::coverage`]).
/// - `ALLOCSOAK_END_IN_DOUBT=1` ([`end_in_doubt`](Self::end_in_doubt)):
///   past a violation that leaves memory in doubt (a sanitizer report, a
///   block handed out twice; tolerated, or saved while fuzzing), the
///   process exits at once with [`crate::tolerance::EXIT_IN_DOUBT`]
///   instead of going on with a heap the allocator may have corrupted
///   (default `0`: the program ends quietly and the process goes on). The
///   soak sets it for the `-fork` runs that go on past its crashes, whose
///   parent starts a fresh child (or resumes its merge past the input).
/// - `ALLOCSOAK_HISTORY` ([`history`](Self::history)): a file that keeps
///   the last inputs the process ran, for a crash that needs them (`{pid}`
///   in it is the process id; see [`crate::history`]). Default: none; a
///   file that cannot be made ends the process.
/// - `ALLOCSOAK_TALLY` ([`tally`](Self::tally)): where the process's race
///   sections are counted for the soak's status and `allocsoak bench`
///   (`<path>-<pid>`; see [`crate::tally`]). Default: none; unset or
///   empty, nothing is written.
///
/// A bad value (`ALLOCSOAK_MODE=fast`, `ALLOCSOAK_TEXT_INPUTS=yes`) ends
/// the process with exit status 2 and a one-line `allocsoak: …` message
/// when the settings are read (a name no allocator answers to, when the
/// harness loads the allocator: [`crate::harness::load`]); a value that is not UTF-8 counts as unset
/// for the variables that name things (allocator, reference, mode, 0/1),
/// and as the path it spells for the paths.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `ALLOCSOAK_ALLOCATOR`, or the binary's name, or `system`.
    pub allocator: AllocatorChoice,
    /// `ALLOCSOAK_REFERENCE`; `None`: the mimalloc this build links.
    pub reference: Option<String>,
    /// `ALLOCSOAK_MODE`.
    pub mode: Mode,
    /// `ALLOCSOAK_TEXT_INPUTS`.
    pub text_inputs: bool,
    /// `ALLOCSOAK_SERIAL_RACES`.
    pub serial_races: bool,
    /// `ALLOCSOAK_END_IN_DOUBT`.
    pub end_in_doubt: bool,
    /// `ALLOCSOAK_TOLERATE`: the tolerate file, read at the first
    /// violation.
    pub tolerate: Option<PathBuf>,
    /// `ALLOCSOAK_FINDINGS`: the findings folder.
    pub findings: Option<PathBuf>,
    /// `ALLOCSOAK_CLAIMS`: the folder of keys saved by any process.
    pub claims: Option<PathBuf>,
    /// `ALLOCSOAK_RECORD`: where the ending violation's record goes.
    pub record: Option<PathBuf>,
    /// `ALLOCSOAK_HISTORY`: the history ring's file, `{pid}` not yet
    /// replaced.
    pub history: Option<PathBuf>,
    /// `ALLOCSOAK_TALLY`: where the race tally goes, `-<pid>` not yet added.
    pub tally: Option<PathBuf>,
}

/// The allocator a process runs, by name, and where the name came from
/// (which a bad name's message says).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllocatorChoice {
    pub name: String,
    pub from: AllocatorFrom,
}

/// Where [`AllocatorChoice::name`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocatorFrom {
    /// `ALLOCSOAK_ALLOCATOR` (or a test or tool that named it the same way).
    Variable,
    /// A binary named `<target>__<allocator>`: OSS-Fuzz and
    /// ClusterFuzzLite run a copy of each target per allocator and set no
    /// environment of ours (`oss-fuzz/build.sh`).
    BinaryName,
    /// Neither: `system`.
    Default,
}

impl AllocatorFrom {
    /// What a message about a bad name blames.
    pub fn describe(self) -> &'static str {
        match self {
            AllocatorFrom::Variable | AllocatorFrom::Default => "ALLOCSOAK_ALLOCATOR",
            AllocatorFrom::BinaryName => "the allocator in the binary's name",
        }
    }
}

impl AllocatorChoice {
    /// `name`, as `ALLOCSOAK_ALLOCATOR` names it.
    pub fn named(name: impl Into<String>) -> AllocatorChoice {
        AllocatorChoice {
            name: name.into(),
            from: AllocatorFrom::Variable,
        }
    }
}

impl Default for AllocatorChoice {
    fn default() -> AllocatorChoice {
        AllocatorChoice {
            name: "system".into(),
            from: AllocatorFrom::Default,
        }
    }
}

/// Every variable unset, in a binary whose name names no allocator.
impl Default for Settings {
    fn default() -> Settings {
        Settings {
            allocator: AllocatorChoice::default(),
            reference: None,
            mode: Mode::Checked,
            text_inputs: false,
            serial_races: false,
            end_in_doubt: false,
            tolerate: None,
            findings: None,
            claims: None,
            record: None,
            history: None,
            tally: None,
        }
    }
}

impl Settings {
    /// The settings this process's environment and binary name give; a bad
    /// value prints its `allocsoak: …` line and exits with status 2.
    pub fn from_env() -> Settings {
        let exe = std::env::current_exe().ok();
        let exe_name = exe.as_deref().and_then(|p| p.file_name()?.to_str());
        Settings::from_vars(|name| std::env::var_os(name), exe_name).unwrap_or_else(|msg| {
            eprintln!("allocsoak: {msg}");
            std::process::exit(2)
        })
    }

    /// The settings the variables `var` gives (`None`: unset) for a binary
    /// named `exe_name`; `Err` is the one-line message of a bad value
    /// (what [`from_env`](Self::from_env) prints after `allocsoak: `).
    pub fn from_vars(
        var: impl Fn(&str) -> Option<OsString>,
        exe_name: Option<&str>,
    ) -> Result<Settings, String> {
        // As `std::env::var`: a value that is not UTF-8 is none.
        let text = |name: &str| var(name).and_then(|v| v.into_string().ok());
        let path = |name: &str| var(name).map(PathBuf::from);
        let nonempty_path = |name: &str| path(name).filter(|p| !p.as_os_str().is_empty());
        let switch = |name: &str| match text(name).as_deref() {
            None | Some("0") => Ok(false),
            Some("1") => Ok(true),
            Some(other) => Err(format!("{name}: `{other}` is not 0 or 1")),
        };
        let allocator = match text("ALLOCSOAK_ALLOCATOR") {
            Some(name) => AllocatorChoice::named(name),
            None => match exe_name.and_then(|f| f.rsplit_once("__")) {
                Some((_, name)) if !name.is_empty() => AllocatorChoice {
                    name: name.to_string(),
                    from: AllocatorFrom::BinaryName,
                },
                _ => AllocatorChoice::default(),
            },
        };
        let mode = match text("ALLOCSOAK_MODE").as_deref() {
            None | Some("checked") => Mode::Checked,
            Some("bare") => Mode::Bare,
            Some(other) => {
                return Err(format!(
                    "ALLOCSOAK_MODE: unknown mode `{other}`; use `checked` or `bare`"
                ))
            }
        };
        Ok(Settings {
            allocator,
            reference: text("ALLOCSOAK_REFERENCE"),
            mode,
            text_inputs: switch("ALLOCSOAK_TEXT_INPUTS")?,
            serial_races: switch("ALLOCSOAK_SERIAL_RACES")?,
            end_in_doubt: switch("ALLOCSOAK_END_IN_DOUBT")?,
            tolerate: path("ALLOCSOAK_TOLERATE"),
            findings: nonempty_path("ALLOCSOAK_FINDINGS"),
            claims: nonempty_path("ALLOCSOAK_CLAIMS"),
            record: nonempty_path("ALLOCSOAK_RECORD"),
            history: path("ALLOCSOAK_HISTORY"),
            tally: nonempty_path("ALLOCSOAK_TALLY"),
        })
    }
}

/// The process's settings, once read or installed.
static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// The process's settings: the ones [`install`]ed, else read from the
/// environment now ([`Settings::from_env`], which ends the process at a
/// bad value), once.
pub fn get() -> &'static Settings {
    SETTINGS.get_or_init(Settings::from_env)
}

/// Puts `settings` in place as the process's, before anything read them
/// (a test, or a tool that runs the harness in its own process); `Err`
/// holds the settings already in place, which stay.
pub fn install(settings: Settings) -> Result<(), &'static Settings> {
    SETTINGS.set(settings).map_err(|_| get())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parse(vars: &[(&str, &str)], exe: Option<&str>) -> Result<Settings, String> {
        let vars: HashMap<&str, OsString> = vars.iter().map(|&(k, v)| (k, v.into())).collect();
        Settings::from_vars(|name| vars.get(name).cloned(), exe)
    }

    #[test]
    fn nothing_set_is_the_default() {
        assert_eq!(parse(&[], None), Ok(Settings::default()));
        assert_eq!(parse(&[], Some("alloc_ops")), Ok(Settings::default()));
        assert_eq!(parse(&[], Some("alloc_ops__")), Ok(Settings::default()));
    }

    #[test]
    fn every_variable_is_read() {
        let settings = parse(
            &[
                ("ALLOCSOAK_ALLOCATOR", "zoo:double-issue"),
                ("ALLOCSOAK_REFERENCE", "system"),
                ("ALLOCSOAK_MODE", "bare"),
                ("ALLOCSOAK_TEXT_INPUTS", "1"),
                ("ALLOCSOAK_SERIAL_RACES", "1"),
                ("ALLOCSOAK_END_IN_DOUBT", "1"),
                ("ALLOCSOAK_TOLERATE", "/t/tolerate"),
                ("ALLOCSOAK_FINDINGS", "/t/findings"),
                ("ALLOCSOAK_CLAIMS", "/t/claims"),
                ("ALLOCSOAK_RECORD", "/t/record.json"),
                ("ALLOCSOAK_HISTORY", "/t/history-{pid}"),
                ("ALLOCSOAK_TALLY", "/t/tally"),
            ],
            Some("alloc_ops__mimalloc"),
        )
        .unwrap();
        assert_eq!(
            settings,
            Settings {
                allocator: AllocatorChoice::named("zoo:double-issue"),
                reference: Some("system".into()),
                mode: Mode::Bare,
                text_inputs: true,
                serial_races: true,
                end_in_doubt: true,
                tolerate: Some("/t/tolerate".into()),
                findings: Some("/t/findings".into()),
                claims: Some("/t/claims".into()),
                record: Some("/t/record.json".into()),
                history: Some("/t/history-{pid}".into()),
                tally: Some("/t/tally".into()),
            }
        );
        let zeros = parse(
            &[
                ("ALLOCSOAK_MODE", "checked"),
                ("ALLOCSOAK_TEXT_INPUTS", "0"),
                ("ALLOCSOAK_SERIAL_RACES", "0"),
            ],
            None,
        );
        assert_eq!(zeros, Ok(Settings::default()));
    }

    #[test]
    fn the_binary_name_names_the_allocator_the_variable_does_not() {
        let from_name = parse(&[], Some("alloc_ops__zoo:double-issue")).unwrap();
        assert_eq!(
            from_name.allocator,
            AllocatorChoice {
                name: "zoo:double-issue".into(),
                from: AllocatorFrom::BinaryName,
            }
        );
        assert_eq!(
            from_name.allocator.from.describe(),
            "the allocator in the binary's name"
        );
        let named = parse(
            &[("ALLOCSOAK_ALLOCATOR", "jemalloc")],
            Some("alloc_ops__mimalloc"),
        );
        assert_eq!(named.unwrap().allocator, AllocatorChoice::named("jemalloc"));
    }

    #[test]
    fn empty_findings_record_and_tally_are_unset_empty_tolerate_and_history_are_not() {
        let settings = parse(
            &[
                ("ALLOCSOAK_FINDINGS", ""),
                ("ALLOCSOAK_RECORD", ""),
                ("ALLOCSOAK_TOLERATE", ""),
                ("ALLOCSOAK_HISTORY", ""),
                ("ALLOCSOAK_TALLY", ""),
            ],
            None,
        )
        .unwrap();
        assert_eq!((settings.findings, settings.record), (None, None));
        assert_eq!(settings.tally, None);
        assert_eq!(settings.tolerate, Some(PathBuf::new()));
        assert_eq!(settings.history, Some(PathBuf::new()));
    }

    #[test]
    fn a_value_that_is_not_utf8_is_unset_for_names() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(vec![b'b', 0xff]);
        let settings = Settings::from_vars(|_| Some(bad.clone()), None).unwrap();
        assert_eq!(settings.allocator, AllocatorChoice::default());
        assert_eq!(settings.reference, None);
        assert_eq!(settings.mode, Mode::Checked);
        assert!(!settings.text_inputs && !settings.serial_races);
        assert_eq!(settings.findings, Some(PathBuf::from(bad.clone())));
        assert_eq!(settings.history, Some(PathBuf::from(bad)));
    }

    #[test]
    fn a_bad_value_is_todays_message() {
        assert_eq!(
            parse(&[("ALLOCSOAK_MODE", "fast")], None),
            Err("ALLOCSOAK_MODE: unknown mode `fast`; use `checked` or `bare`".into())
        );
        assert_eq!(
            parse(&[("ALLOCSOAK_TEXT_INPUTS", "yes")], None),
            Err("ALLOCSOAK_TEXT_INPUTS: `yes` is not 0 or 1".into())
        );
        assert_eq!(
            parse(&[("ALLOCSOAK_SERIAL_RACES", "2")], None),
            Err("ALLOCSOAK_SERIAL_RACES: `2` is not 0 or 1".into())
        );
        assert_eq!(
            parse(&[("ALLOCSOAK_MODE", "")], None),
            Err("ALLOCSOAK_MODE: unknown mode ``; use `checked` or `bare`".into())
        );
    }
}
