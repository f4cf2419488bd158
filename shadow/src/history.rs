//! The inputs a fuzz process ran last, kept where they outlive it.
//!
//! An allocator keeps state across the inputs of one process, so a crash
//! may need the inputs before it: one corrupts the allocator, a later one
//! dies of it. When `ALLOCSOAK_HISTORY` names a file, the harness copies
//! each input into a ring in that file before running it ([`record`]);
//! `{pid}` in the name is the process's id, so each of libFuzzer's `-fork`
//! children keeps a ring of its own. The
//! file is mapped shared, so what is in the ring is in the file however
//! the process ends (a sanitizer abort, a panic, a signal, libFuzzer's
//! `_Exit` after a timeout or an OOM, even SIGKILL), with no death hook to
//! race. [`read`] gives the inputs back, oldest first; the last one is the
//! input that was running.
//!
//! The ring is bounded in bytes ([`CAPACITY`]): the oldest inputs make
//! room for new ones. Layout: a 64-byte header (magic, then the offsets
//! of the oldest record, of the wrap and of the next write, then the
//! record count, as little-endian `u64`s), then the records, each a
//! little-endian `u32` length and the input's bytes.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use memmap2::MmapMut;

/// Bytes of inputs the ring holds (several thousand inputs of libFuzzer's
/// usual 4 KiB `max_len`, more of the typical smaller ones).
pub const CAPACITY: usize = 4 << 20;
const HEADER: usize = 64;
const MAGIC: &[u8; 16] = b"allocsoak-hist-1";

/// The ring in a mapped file. Records live at offsets into the data area
/// (after the header); from the oldest (`front`), they run to `wrap`, then
/// from 0 to `write`. The records are their own index (each starts with
/// its length), so pushing allocates nothing: a replay that measures its
/// own memory (the drift workers) reads no growth from the ring.
pub struct Ring {
    map: MmapMut,
    capacity: usize,
    front: usize,
    count: usize,
    wrap: usize,
    write: usize,
}

impl Ring {
    /// Creates (or empties) the ring file at `path`, with room for
    /// `capacity` bytes of records.
    pub fn create(path: &Path, capacity: usize) -> std::io::Result<Ring> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len((HEADER + capacity) as u64)?;
        // SAFETY: the file is this process's own; nothing else maps it
        // while it runs (readers come after it has ended).
        let map = unsafe { MmapMut::map_mut(&file)? };
        let mut ring = Ring {
            map,
            capacity,
            front: 0,
            count: 0,
            wrap: capacity,
            write: 0,
        };
        ring.map[..16].copy_from_slice(MAGIC);
        ring.publish();
        Ok(ring)
    }

    /// Appends one input. An input longer than the whole ring empties it:
    /// a history with a gap would replay something else.
    pub fn push(&mut self, input: &[u8]) {
        let need = 4 + input.len();
        if need > self.capacity || input.len() > u32::MAX as usize {
            self.count = 0;
            self.front = 0;
            self.write = 0;
            self.wrap = self.capacity;
            self.publish();
            return;
        }
        let mut at = self.write;
        if at + need > self.capacity {
            // Start over at 0; what lies past `write` is the oldest and goes.
            while self.count > 0 && self.front >= at {
                self.pop();
            }
            self.wrap = at;
            at = 0;
        }
        while self.count > 0 && self.front < at + need && at < self.front + self.oldest_len() {
            self.pop();
        }
        if self.count == 0 || self.front <= at {
            // No record of the pass before is left: nothing wraps.
            self.wrap = self.capacity;
        }
        let data = &mut self.map[HEADER + at..HEADER + at + need];
        data[..4].copy_from_slice(&(input.len() as u32).to_le_bytes());
        data[4..].copy_from_slice(input);
        if self.count == 0 {
            self.front = at;
        }
        self.count += 1;
        self.write = at + need;
        self.publish();
    }

    /// Length of the oldest record, with its length field.
    fn oldest_len(&self) -> usize {
        let at = HEADER + self.front;
        4 + u32::from_le_bytes(self.map[at..at + 4].try_into().unwrap()) as usize
    }

    /// Drops the oldest record.
    fn pop(&mut self) {
        self.front += self.oldest_len();
        self.count -= 1;
        if self.front == self.wrap {
            self.front = 0;
        }
        if self.count == 0 {
            self.front = 0;
        }
    }

    /// Writes the header.
    fn publish(&mut self) {
        let fields = [self.front, self.wrap, self.write, self.count];
        for (i, v) in fields.into_iter().enumerate() {
            let at = 16 + 8 * i;
            self.map[at..at + 8].copy_from_slice(&(v as u64).to_le_bytes());
        }
    }
}

/// The inputs in a ring file, oldest first. `Err` names what is wrong
/// with a file that is not a ring.
pub fn read(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    parse(&bytes).map_err(|e| format!("{} is not an input history: {e}", path.display()))
}

fn parse(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    if bytes.len() < HEADER || &bytes[..16] != MAGIC {
        return Err("no history header".into());
    }
    let field = |i: usize| {
        let at = 16 + 8 * i;
        u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
    };
    let (front, wrap, write, count) = (field(0), field(1), field(2), field(3));
    let data = &bytes[HEADER..];
    let mut inputs = Vec::with_capacity(count.min(1 << 20));
    let mut at = front;
    for _ in 0..count {
        if at == wrap {
            at = 0;
        }
        let len = data
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()) as usize)
            .ok_or("a record past the end")?;
        let input = data
            .get(at + 4..at + 4 + len)
            .ok_or("a record past the end")?;
        inputs.push(input.to_vec());
        at += 4 + len;
    }
    if count > 0 && at != write {
        return Err("the records do not end where the next write goes".into());
    }
    Ok(inputs)
}

/// The process's ring, when `ALLOCSOAK_HISTORY` names a file (the
/// process's settings).
fn ring() -> Option<&'static Mutex<Ring>> {
    static RING: OnceLock<Option<Mutex<Ring>>> = OnceLock::new();
    RING.get_or_init(|| {
        let path = crate::settings::get().history.as_ref()?;
        let path = path
            .to_string_lossy()
            .replace("{pid}", &std::process::id().to_string());
        match Ring::create(Path::new(&path), CAPACITY) {
            Ok(ring) => Some(Mutex::new(ring)),
            Err(e) => {
                eprintln!(
                    "allocsoak: ALLOCSOAK_HISTORY={}: {e}; fix the path or unset it",
                    Path::new(&path).display()
                );
                std::process::exit(2)
            }
        }
    })
    .as_ref()
}

/// Records `input` as the one about to run (nothing without
/// `ALLOCSOAK_HISTORY`).
pub fn record(input: &[u8]) {
    if let Some(ring) = ring() {
        ring.lock().unwrap_or_else(|e| e.into_inner()).push(input);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` inputs of 0 to 120 bytes, each filled with its number.
    fn inputs(n: usize) -> Vec<Vec<u8>> {
        let mut x = 12345u32;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                vec![i as u8; (x >> 16) as usize % 121]
            })
            .collect()
    }

    #[test]
    fn the_newest_inputs_come_back_in_order_across_wraps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ring");
        let mut ring = Ring::create(&path, 1000).unwrap();
        assert_eq!(read(&path).unwrap(), Vec::<Vec<u8>>::new());
        let all = inputs(3000);
        for (i, input) in all.iter().enumerate() {
            ring.push(input);
            let back = read(&path).unwrap();
            assert_eq!(back.last(), Some(input), "after {i}");
            let bytes: usize = back.iter().map(|b| b.len() + 4).sum();
            assert!(bytes <= 1000, "after {i}: {bytes} bytes");
            // Only what has to make room goes.
            assert!(
                bytes >= 1000 - 2 * 124 || back.len() == i + 1,
                "after {i}: {bytes} bytes"
            );
            assert_eq!(back, all[i + 1 - back.len()..=i], "after {i}");
        }
    }

    #[test]
    fn an_input_bigger_than_the_ring_empties_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ring");
        let mut ring = Ring::create(&path, 100).unwrap();
        ring.push(b"first");
        ring.push(&[7; 200]);
        assert_eq!(read(&path).unwrap(), Vec::<Vec<u8>>::new());
        ring.push(b"after");
        assert_eq!(read(&path).unwrap(), vec![b"after".to_vec()]);
    }

    #[test]
    fn a_file_that_is_not_a_ring_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ring");
        std::fs::write(&path, b"hello").unwrap();
        assert!(read(&path).unwrap_err().contains("not an input history"));
        let mut ring = Ring::create(&path, 100).unwrap();
        ring.push(b"abc");
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[16 + 8 * 3] = 9; // nine records claimed
        std::fs::write(&path, bytes).unwrap();
        assert!(read(&path).is_err());
    }
}
