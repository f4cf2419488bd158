//! The state dir: one type that owns every path a soak writes.
//!
//! ```text
//! <state>/allocsoak-state       marker: this dir belongs to allocsoak
//! <state>/lock                  held by the running soak (its pid inside)
//! <state>/store.sqlite          the store (WAL)
//! <state>/corpus/<target>       persistent corpus: a symlink to the current
//!                               generation `.<target>.g<N>`, swapped atomically
//! <state>/crashes/<signature>/  one folder per crash group, REPORT.md inside
//! <state>/logs/                 engine logs of finished slices and drift
//!                               segments (the oldest pruned past `logs_mb`),
//!                               build logs, drift's input rings
//! <state>/slices/<id>/          a running slice's scratch: new/, artifacts/, findings/
//! <state>/pending/<id>/         what a slice left to file when the soak ended
//!                               (artifacts/, its slice.toml, tolerate and history)
//! <state>/coverage/             `allocsoak coverage`'s last report (coverage/mod.rs)
//! <state>/miri/                 Miri passes: when the last began, and per slot
//!                               the corpus inputs they replayed, copies of those
//!                               a pass replays now in inputs/ (running/miri.rs)
//! ```
//! Nothing here is deleted except a slice's scratch once everything in it
//! has been merged, filed or moved to `pending/`, a pending folder once
//! everything in it is filed, corpus generations the symlink left, and
//! the oldest engine logs past their cap ([`StateDir::prune_logs`]), and
//! the copies in `miri/inputs/` when the next Miri pass begins.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shadow::Target;

const MARKER: &str = "allocsoak-state";

pub struct StateDir {
    root: PathBuf,
    /// Held for the life of a soak; `None` for readers (`status`).
    _lock: Option<File>,
}

impl StateDir {
    /// Opens the state dir for a soak, creating it, and takes its lock.
    pub fn open_for_soak(root: &Path) -> Result<StateDir> {
        Self::claim(root)?;
        let path = root.join("lock");
        let mut lock = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("failed to open {}", path.display()))?;
        if lock.try_lock().is_err() {
            let mut pid = String::new();
            let _ = lock.read_to_string(&mut pid);
            bail!(
                "state dir {} is in use by another soak (pid {}); stop it or pass another --state",
                root.display(),
                pid.trim()
            );
        }
        lock.set_len(0)?;
        write!(lock, "{}", std::process::id())?;
        let dir = StateDir {
            root: root.to_path_buf(),
            _lock: Some(lock),
        };
        for sub in ["corpus", "crashes", "logs", "slices", "pending"] {
            let p = dir.root.join(sub);
            std::fs::create_dir_all(&p)
                .with_context(|| format!("failed to create {}", p.display()))?;
        }
        Ok(dir)
    }

    /// Opens an existing state dir to read (no lock).
    pub fn open_to_read(root: &Path) -> Result<StateDir> {
        if !root.join(MARKER).is_file() {
            bail!(
                "{} is not an allocsoak state dir (no {MARKER} file); pass the --state a soak ran with",
                root.display()
            );
        }
        Ok(StateDir {
            root: root.to_path_buf(),
            _lock: None,
        })
    }

    /// Makes `root` ours: a new or empty dir gets the marker; a non-empty
    /// dir without it is someone else's and is refused, untouched.
    fn claim(root: &Path) -> Result<()> {
        if root.join(MARKER).is_file() {
            return Ok(());
        }
        if root.exists() {
            if !root.is_dir() {
                bail!(
                    "--state {} is a file, not a directory; pass a directory",
                    root.display()
                );
            }
            let mut entries = std::fs::read_dir(root)
                .with_context(|| format!("failed to read state dir {}", root.display()))?;
            if entries.next().is_some() {
                bail!(
                    "{} is not empty and is not an allocsoak state dir (no {MARKER} file); pass a new or empty directory to --state",
                    root.display()
                );
            }
        }
        std::fs::create_dir_all(root).with_context(|| {
            format!(
                "failed to create state dir {}; pass a writable --state",
                root.display()
            )
        })?;
        write_atomic(&root.join(MARKER), b"allocsoak state dir, version 1\n").with_context(|| {
            format!(
                "state dir {} is not writable; pass a writable --state",
                root.display()
            )
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn store(&self) -> PathBuf {
        self.root.join("store.sqlite")
    }

    /// The persistent corpus of a target (a symlink to its generation).
    pub fn corpus(&self, target: Target) -> PathBuf {
        self.root.join("corpus").join(target.name())
    }

    /// Generation `n` of a target's corpus.
    pub fn corpus_generation(&self, target: Target, n: u64) -> PathBuf {
        self.root
            .join("corpus")
            .join(format!(".{}.g{n}", target.name()))
    }

    /// `allocsoak coverage`'s report.
    pub fn coverage(&self) -> PathBuf {
        self.root.join("coverage")
    }

    pub fn crashes(&self) -> PathBuf {
        self.root.join("crashes")
    }

    pub fn crash_group(&self, id: &str) -> PathBuf {
        self.crashes().join(id)
    }

    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }

    pub fn slices(&self) -> PathBuf {
        self.root.join("slices")
    }

    pub fn slice(&self, id: i64) -> PathBuf {
        self.slices().join(id.to_string())
    }

    /// Where the processes fuzzing `allocator` claim the keys they save
    /// (`ALLOCSOAK_CLAIMS`): `claims/<hash of its name>/`, emptied as a
    /// soak starts (what waits in `pending/` then is listed in the new
    /// slices' tolerate files instead).
    pub fn claims(&self, allocator: &str) -> PathBuf {
        self.all_claims()
            .join(format!("{:016x}", stable_hash(allocator.as_bytes())))
    }

    /// Every allocator's [`claims`](Self::claims).
    pub fn all_claims(&self) -> PathBuf {
        self.root.join("claims")
    }

    /// Filings a soak left for the next one: `pending/<slice>/`.
    pub fn pending(&self) -> PathBuf {
        self.root.join("pending")
    }

    pub fn pending_slice(&self, id: i64) -> PathBuf {
        self.pending().join(id.to_string())
    }

    /// When the last Miri pass began (unix seconds, as text).
    pub fn miri_last_pass(&self) -> PathBuf {
        self.root.join("miri").join("last-pass")
    }

    /// Copies of the corpus inputs a Miri pass is replaying now.
    pub fn miri_inputs(&self) -> PathBuf {
        self.root.join("miri").join("inputs")
    }

    /// The names of `target`'s corpus inputs Miri passes replayed on
    /// `allocator`, one per line.
    pub fn miri_replayed(&self, target: Target, allocator: &str) -> PathBuf {
        self.root.join("miri").join(format!(
            "{}-{:016x}.replayed",
            target.name(),
            stable_hash(allocator.as_bytes())
        ))
    }

    /// Removes the oldest engine logs in `logs/` (`slice-<id>.log`, one
    /// per finished slice, and `drift-<slot>-<segment>.log`) until they
    /// take at most `cap` bytes; a slice's log stays while its pending
    /// folder waits to be filed (the filing reads it). Build logs and the
    /// drift rings (fixed sizes) are not counted. Returns the bytes
    /// removed.
    pub fn prune_logs(&self, cap: u64) -> Result<u64> {
        let dir = self.logs();
        let mut logs = Vec::new();
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("failed to read {}", dir.display()))?
        {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".log") else {
                continue;
            };
            let held = match stem.strip_prefix("slice-") {
                Some(id) => id.parse().is_ok_and(|id| self.pending_slice(id).exists()),
                None => !stem.starts_with("drift-"),
            };
            let meta = entry.metadata()?;
            if !held && meta.is_file() {
                logs.push((meta.modified()?, meta.len(), entry.path()));
            }
        }
        logs.sort();
        let mut total: u64 = logs.iter().map(|(_, len, _)| len).sum();
        let mut removed = 0;
        for (_, len, path) in logs {
            if total <= cap {
                break;
            }
            std::fs::remove_file(&path)
                .with_context(|| format!("failed to remove {}", path.display()))?;
            total -= len;
            removed += len;
        }
        Ok(removed)
    }
}

/// Writes `data` to a temporary file next to `path`, syncs it and renames it
/// into place: a reader (or a restart after a kill) sees all or nothing.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let mut f =
        File::create(&tmp).with_context(|| format!("failed to create {}", tmp.display()))?;
    f.write_all(data)
        .and_then(|_| f.sync_all())
        .with_context(|| format!("failed to write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("failed to rename {} to {}", tmp.display(), path.display()))
}

/// Points the symlink `link` at `target` (a name in its folder): a new
/// link made beside it and renamed over it, so a reader sees the old
/// target or the new one.
pub fn symlink_atomic(target: &std::ffi::OsStr, link: &Path) -> Result<()> {
    let tmp = tmp_path(link);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .with_context(|| format!("failed to create {}", tmp.display()))?;
    std::fs::rename(&tmp, link).with_context(|| format!("failed to swap {}", link.display()))
}

/// Copies `from` to `to` through a temporary file (see [`write_atomic`]).
pub fn copy_atomic(from: &Path, to: &Path) -> Result<()> {
    let data = std::fs::read(from).with_context(|| format!("failed to read {}", from.display()))?;
    write_atomic(to, &data)
}

/// Removes a scratch folder. Retries for a moment: after a SIGKILL, an
/// engine's own helper process (a merge or minimize step) may still be
/// writing its last file into it.
pub fn remove_scratch(dir: &Path) -> Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) if tries < 25 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            Err(e) => return Err(e).with_context(|| format!("failed to remove {}", dir.display())),
        }
    }
}

/// FNV-1a of `bytes`: a hash for names that must come out the same in
/// every build and run (std's hasher is seeded per process).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// A dotted temporary name in the same folder, so the rename stays on one
/// file system; names starting with `.tmp-` are leftovers a restart removes.
pub fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".tmp-{}-{name}", std::process::id()))
}

/// The number of files in `dir`; 0 when it does not exist.
pub fn count_files(dir: &Path) -> Result<usize> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_file())
            .count()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e).with_context(|| format!("failed to read {}", dir.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_dir_is_refused_and_untouched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("thesis.tex"), "mine").unwrap();
        let err = StateDir::open_for_soak(dir.path())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("not an allocsoak state dir"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["thesis.tex"]);
    }

    #[test]
    fn a_second_soak_on_one_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        let _first = StateDir::open_for_soak(&root).unwrap();
        let err = StateDir::open_for_soak(&root).err().unwrap().to_string();
        assert!(err.contains("in use by another soak"), "{err}");
        assert!(StateDir::open_to_read(&root).is_ok());
    }

    #[test]
    fn the_oldest_engine_logs_go_past_the_cap_but_not_one_a_filing_needs() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let logs = state.logs();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        // Oldest first: the order they go in.
        let files = [
            ("slice-1.log", true),
            ("slice-2.log", false), // its pending folder waits: kept
            ("drift-7-1.log", true),
            ("slice-3.log", false), // within the cap
            ("build-drift.log", false),
            ("drift-7.history", false),
        ];
        for (i, (name, _)) in files.iter().enumerate() {
            std::fs::write(logs.join(name), [b'x'; 100]).unwrap();
            let file = File::options().write(true).open(logs.join(name)).unwrap();
            file.set_modified(old + std::time::Duration::from_secs(i as u64))
                .unwrap();
        }
        std::fs::create_dir_all(state.pending_slice(2)).unwrap();
        assert_eq!(state.prune_logs(150).unwrap(), 200);
        for (name, removed) in files {
            assert_eq!(!logs.join(name).exists(), removed, "{name}");
        }
        assert_eq!(state.prune_logs(150).unwrap(), 0, "under the cap");
    }
}
