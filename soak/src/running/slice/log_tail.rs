//! Reading a slice's engine log as it grows, for the moment the engine
//! is past its seeds.

use std::path::Path;

/// What a log has grown by since the last read, with the end of the read
/// before it (so a line split between two reads is whole in the second).
#[derive(Default)]
pub(super) struct LogTail {
    offset: u64,
    carry: String,
}

impl LogTail {
    pub(super) fn read(&mut self, path: &Path) -> String {
        use std::io::{Read, Seek, SeekFrom};
        let mut new = Vec::new();
        if let Ok(mut file) = std::fs::File::open(path) {
            if file.seek(SeekFrom::Start(self.offset)).is_ok() {
                let _ = file.read_to_end(&mut new);
            }
        }
        self.offset += new.len() as u64;
        let text = format!("{}{}", self.carry, String::from_utf8_lossy(&new));
        let keep = text.len().saturating_sub(64);
        let keep = (keep..=text.len())
            .find(|i| text.is_char_boundary(*i))
            .unwrap_or(text.len());
        self.carry = text[keep..].to_string();
        text
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_seeds_are_read_when_the_engine_says_so_even_across_two_reads() {
        use super::LogTail;
        use crate::engines::Engine;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fuzz.log");
        let mut tail = LogTail::default();
        let engine = Engine::LibFuzzer;
        assert!(!engine.past_seeds(&tail.read(&path)), "no log yet");
        std::fs::write(&path, "INFO: seed corpus: files: 500\n#512\tIN").unwrap();
        assert!(!engine.past_seeds(&tail.read(&path)));
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, b"ITED cov: 7 ft: 9\n").unwrap();
        assert!(engine.past_seeds(&tail.read(&path)));
        let forked = "INFO: -fork=2: 57 seed inputs, starting to fuzz in /tmp/x\n";
        assert!(engine.past_seeds(forked));
    }
}
