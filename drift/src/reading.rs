//! The line a replay process prints per reading, and its parser: the one
//! contract between the process that samples and the soak that stores.
//!
//! ```text
//! reading secs=1700000000 ops=1200000 rss=9437184 anon=6291456 live=0 cpu_ms=4100 programs=880 fig.mimalloc_commit=8388608
//! ```
//!
//! Fields are `key=value`, unsigned integers, in any order; `fig.<name>` are
//! the allocator's own figures. Unknown keys are kept out, so an older soak
//! reads a newer process's lines.

use crate::Sample;

/// One reading of a replay process, as printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// Unix time, seconds.
    pub secs: u64,
    /// Ops done since the process started.
    pub ops: u64,
    /// Resident set size, bytes (`/proc/self/statm`).
    pub rss: u64,
    /// Anonymous resident bytes (`/proc/self/smaps_rollup`), 0 when unread.
    pub anon: u64,
    /// Bytes the replayed programs held live at the reading.
    pub live: u64,
    /// CPU time the process used since it started, milliseconds.
    pub cpu_ms: u64,
    /// Programs run to their end since the process started.
    pub programs: u64,
    /// The allocator's own figures, by name.
    pub figures: Vec<(String, u64)>,
}

/// What every reading line starts with.
pub const PREFIX: &str = "reading ";

impl Reading {
    /// The line to print (no newline).
    pub fn to_line(&self) -> String {
        let mut line = format!(
            "{PREFIX}secs={} ops={} rss={} anon={} live={} cpu_ms={} programs={}",
            self.secs, self.ops, self.rss, self.anon, self.live, self.cpu_ms, self.programs
        );
        for (name, value) in &self.figures {
            line.push_str(&format!(" fig.{name}={value}"));
        }
        line
    }

    /// Parses a line [`Reading::to_line`] printed; `None` for any other
    /// line (a process's other output) or one with a bad number.
    pub fn parse(line: &str) -> Option<Reading> {
        let mut r = Reading::default();
        let (mut has_secs, mut has_ops, mut has_rss) = (false, false, false);
        for field in line.trim_end().strip_prefix(PREFIX)?.split(' ') {
            let (key, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match key {
                "secs" => (r.secs, has_secs) = (value, true),
                "ops" => (r.ops, has_ops) = (value, true),
                "rss" => (r.rss, has_rss) = (value, true),
                "anon" => r.anon = value,
                "live" => r.live = value,
                "cpu_ms" => r.cpu_ms = value,
                "programs" => r.programs = value,
                _ => {
                    if let Some(name) = key.strip_prefix("fig.") {
                        r.figures.push((name.to_string(), value));
                    }
                }
            }
        }
        (has_secs && has_ops && has_rss).then_some(r)
    }

    /// The part the trend is fitted on. Its resident bytes are the
    /// anonymous ones when read: file-backed pages (the binary's own, a
    /// history ring the process fills as it runs) are not the allocator's,
    /// and a ring filling up reads as growth.
    pub fn sample(&self) -> Sample {
        Sample {
            secs: self.secs,
            ops: self.ops,
            rss: if self.anon > 0 { self.anon } else { self.rss },
            live: self.live,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_reads_back_as_printed() {
        let r = Reading {
            secs: 1_700_000_000,
            ops: 1_200_000,
            rss: 9 << 20,
            anon: 6 << 20,
            live: 4096,
            cpu_ms: 4100,
            programs: 880,
            figures: vec![("mimalloc_commit".into(), 8 << 20)],
        };
        assert_eq!(Reading::parse(&r.to_line()), Some(r.clone()));
        assert_eq!(
            Reading::parse(&format!("{}\n", r.to_line())),
            Some(r.clone())
        );
        assert_eq!(
            r.sample().retained(),
            (6 << 20) - 4096,
            "anonymous bytes are fitted"
        );
        let unread = Reading { anon: 0, ..r };
        assert_eq!(unread.sample().rss, 9 << 20);
    }

    #[test]
    fn other_lines_and_bad_numbers_are_not_readings() {
        assert_eq!(Reading::parse("INFO: Seed: 1"), None);
        assert_eq!(Reading::parse("reading secs=1 ops=x rss=3"), None);
        assert_eq!(Reading::parse("reading secs=1 ops=2"), None);
        let newer = Reading::parse("reading secs=1 ops=2 rss=3 swap=4").unwrap();
        assert_eq!((newer.secs, newer.ops, newer.rss), (1, 2, 3));
    }
}

/// A trace replay's memory where the recorded program's was read (`drift
/// --trace --peak`, one line per reading the recorder took):
///
/// ```text
/// mark calls=3670016 recorded=129024000 replayed=21012480
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mark {
    /// Calls the recording had made at its reading.
    pub calls: u64,
    /// The recorded program's resident bytes then.
    pub recorded: u64,
    /// The replay process's resident bytes as it passed the same call.
    pub replayed: u64,
}

impl Mark {
    const PREFIX: &'static str = "mark ";

    /// The line to print (no newline).
    pub fn to_line(&self) -> String {
        format!(
            "{}calls={} recorded={} replayed={}",
            Mark::PREFIX,
            self.calls,
            self.recorded,
            self.replayed
        )
    }

    /// Parses a line [`Mark::to_line`] printed; `None` for any other.
    pub fn parse(line: &str) -> Option<Mark> {
        let mut m = Mark::default();
        let mut seen = 0;
        for field in line.trim_end().strip_prefix(Mark::PREFIX)?.split(' ') {
            let (key, value) = field.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match key {
                "calls" => m.calls = value,
                "recorded" => m.recorded = value,
                "replayed" => m.replayed = value,
                _ => continue,
            }
            seen += 1;
        }
        (seen == 3).then_some(m)
    }
}

/// A replay's memory over its run (`drift --peak`): the resident bytes
/// the work added, at [`Curve::POINTS`] evenly spaced moments of its
/// samples, first to last:
///
/// ```text
/// curve bytes=0,1048576,2097152
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Curve {
    /// The bytes added at each point, first to last.
    pub bytes: Vec<u64>,
}

impl Curve {
    const PREFIX: &'static str = "curve bytes=";
    /// Points a curve keeps at most.
    pub const POINTS: usize = 48;

    /// The curve of `samples` (taken at a steady pace, in order): at most
    /// [`Curve::POINTS`] of them, evenly spaced, the last one last.
    pub fn of(samples: &[u64]) -> Curve {
        let n = samples.len();
        let points = n.min(Curve::POINTS);
        let bytes = (0..points)
            .map(|i| samples[i * (n - 1) / (points - 1).max(1)])
            .collect();
        Curve { bytes }
    }

    /// The line to print (no newline).
    pub fn to_line(&self) -> String {
        let bytes: Vec<String> = self.bytes.iter().map(u64::to_string).collect();
        format!("{}{}", Curve::PREFIX, bytes.join(","))
    }

    /// Parses a line [`Curve::to_line`] printed; `None` for any other.
    pub fn parse(line: &str) -> Option<Curve> {
        let list = line.trim_end().strip_prefix(Curve::PREFIX)?;
        if list.is_empty() {
            return Some(Curve::default());
        }
        let bytes = list
            .split(',')
            .map(|b| b.parse().ok())
            .collect::<Option<_>>()?;
        Some(Curve { bytes })
    }
}

#[cfg(test)]
mod curve_tests {
    use super::Curve;

    #[test]
    fn a_curve_keeps_evenly_spaced_samples_and_parses_back() {
        let samples: Vec<u64> = (0..1000).collect();
        let c = Curve::of(&samples);
        assert_eq!(c.bytes.len(), Curve::POINTS);
        assert_eq!((c.bytes[0], *c.bytes.last().unwrap()), (0, 999));
        assert_eq!(Curve::parse(&c.to_line()), Some(c));
        assert_eq!(Curve::of(&[7, 9]).bytes, [7, 9]);
        assert_eq!(Curve::of(&[5]).bytes, [5]);
        assert_eq!(Curve::of(&[]), Curve::default());
        assert_eq!(
            Curve::parse(&Curve::default().to_line()),
            Some(Curve::default())
        );
        assert_eq!(Curve::parse("curve bytes=1,x"), None);
        assert_eq!(Curve::parse("mark calls=1"), None);
    }
}
