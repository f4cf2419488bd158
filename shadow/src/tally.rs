//! What a fuzzing process ran, for the soak's status table and
//! `allocsoak bench`: programs (libFuzzer's `-fork` parent counts none
//! of its children's executions; their tallies do), and race sections,
//! those in which two or more workers were inside the allocator at once,
//! and the most inside at once. With `ALLOCSOAK_TALLY` set
//! ([`crate::settings::Settings::tally`]), the harness adds up each
//! program's [`Stats`] and writes the process's [`Tally`] to
//! `<that path>-<pid>` (each of libFuzzer's `-fork` children its own),
//! whole by way of a temporary name, at most once a second and when the
//! process exits; [`Tally::read`] sums a run's files.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts of what a program did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub ops: usize,
    pub skipped: usize,
    pub failed: usize,
    /// Race sections run, and of them, those in which two or more workers
    /// were inside the allocator at once.
    pub race_sections: usize,
    pub races: usize,
    /// Allocator calls made, and of them, those made inside race
    /// sections; the most workers inside the allocator at once.
    pub calls: usize,
    pub race_calls: usize,
    pub most_inside: usize,
    /// Times the allocator called its hook with blocks to free, from
    /// inside its own calls (a program's end aside).
    pub hook_calls: usize,
}

/// A process's (or a run's) programs and race sections.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Programs run.
    pub programs: u64,
    pub sections: u64,
    /// Sections with two or more workers inside the allocator at once.
    pub together: u64,
    pub most_inside: u64,
}

/// Bytes of a tally file: four little-endian `u64`s.
const SIZE: usize = 32;

impl Tally {
    /// Adds one program's counts.
    pub fn add(&mut self, stats: &Stats) {
        self.programs += 1;
        self.sections += stats.race_sections as u64;
        self.together += stats.races as u64;
        self.most_inside = self.most_inside.max(stats.most_inside as u64);
    }

    /// Adds another process's tally.
    pub fn merge(&mut self, other: &Tally) {
        self.programs += other.programs;
        self.sections += other.sections;
        self.together += other.together;
        self.most_inside = self.most_inside.max(other.most_inside);
    }

    /// The share of sections with two or more inside; None without any.
    pub fn share(&self) -> Option<f64> {
        (self.sections > 0).then(|| self.together as f64 / self.sections as f64)
    }

    fn to_bytes(self) -> [u8; SIZE] {
        let mut out = [0; SIZE];
        for (i, n) in [
            self.programs,
            self.sections,
            self.together,
            self.most_inside,
        ]
        .into_iter()
        .enumerate()
        {
            out[i * 8..i * 8 + 8].copy_from_slice(&n.to_le_bytes());
        }
        out
    }

    fn from_bytes(bytes: &[u8]) -> Option<Tally> {
        let n = |i: usize| {
            Some(u64::from_le_bytes(
                bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
            ))
        };
        (bytes.len() == SIZE).then_some(())?;
        Some(Tally {
            programs: n(0)?,
            sections: n(1)?,
            together: n(2)?,
            most_inside: n(3)?,
        })
    }

    /// The sum of every process's file written under `path` (none: zero;
    /// a file of another size is skipped).
    pub fn read(path: &Path) -> Tally {
        let mut sum = Tally::default();
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return sum;
        };
        let prefix = format!("{}-", name.to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else {
            return sum;
        };
        for entry in entries.flatten() {
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let Some(pid) = file.strip_prefix(&prefix) else {
                continue;
            };
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            if let Some(t) = std::fs::read(entry.path())
                .ok()
                .and_then(|b| Tally::from_bytes(&b))
            {
                sum.merge(&t);
            }
        }
        sum
    }
}

/// This process's tally and when it was last written.
struct Running {
    tally: Tally,
    written: Option<Instant>,
}

static RUNNING: Mutex<Running> = Mutex::new(Running {
    tally: Tally {
        programs: 0,
        sections: 0,
        together: 0,
        most_inside: 0,
    },
    written: None,
});

/// Counts a program and its race sections in the process's tally and writes
/// it when `ALLOCSOAK_TALLY` is set and a second has passed since the last
/// write (the first time, it also has the tally written at exit).
pub fn count(stats: &Stats) {
    let Some(path) = crate::settings::get().tally.as_deref() else {
        return;
    };
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    running.tally.add(stats);
    if running.written.is_none() {
        // SAFETY: `atexit` takes a plain `extern "C" fn()` that lives as
        // long as the process; registering it twice is harmless.
        unsafe { libc::atexit(write_at_exit) };
    }
    if running
        .written
        .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
    {
        running.written = Some(Instant::now());
        write(path, running.tally);
    }
}

extern "C" fn write_at_exit() {
    flush();
}

/// Writes the process's tally now: at exit, and where a program ends the
/// process at a violation (a `-fork` child that dies of it may live less
/// than the second between writes).
pub(crate) fn flush() {
    let Some(path) = crate::settings::get().tally.as_deref() else {
        return;
    };
    // A thread that holds the lock is mid-update: its last written tally
    // stands.
    if let Ok(running) = RUNNING.try_lock() {
        write(path, running.tally);
    }
}

/// This process's file under `path`.
fn file(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!("-{}", std::process::id()));
    path.with_file_name(name)
}

fn write(path: &Path, tally: Tally) {
    let file = file(path);
    let tmp = file.with_file_name(format!(".tmp-tally-{}", std::process::id()));
    // A tally is a progress figure: one that cannot be written is left out.
    if std::fs::write(&tmp, tally.to_bytes()).is_ok() {
        let _ = std::fs::rename(&tmp, &file);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_files_add_up_and_a_foreign_file_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tally");
        let a = Tally {
            programs: 7,
            sections: 10,
            together: 4,
            most_inside: 3,
        };
        let b = Tally {
            programs: 5,
            sections: 6,
            together: 6,
            most_inside: 2,
        };
        std::fs::write(dir.path().join("tally-11"), a.to_bytes()).unwrap();
        std::fs::write(dir.path().join("tally-12"), b.to_bytes()).unwrap();
        std::fs::write(dir.path().join("tally-13"), b"short").unwrap();
        std::fs::write(dir.path().join("tally-x"), a.to_bytes()).unwrap();
        let sum = Tally::read(&path);
        assert_eq!(
            sum,
            Tally {
                programs: 12,
                sections: 16,
                together: 10,
                most_inside: 3
            }
        );
        assert_eq!(sum.share(), Some(10.0 / 16.0));
        assert_eq!(Tally::default().share(), None);
        assert_eq!(Tally::read(&dir.path().join("none")), Tally::default());
    }
}
