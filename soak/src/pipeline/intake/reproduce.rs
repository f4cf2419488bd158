//! The first stages of the crash pipeline: an artifact reproduced (up to
//! [`TRIES`] replays, [`RACE_TRIES`] for a race; after the inputs its
//! process ran before it when alone it does not) and signed. What comes
//! out ([`Found`]) is what deduplication and a new group's folder take.

use std::path::Path;

use anyhow::{Context, Result};
use report::{Record, Signature};
use triage::replay::Replay;

use super::{Artifact, Source};
use crate::pipeline::sequence::History;

/// Replays per artifact before it is called flaky.
const TRIES: usize = 3;
/// Replays of an artifact whose program has a race section: every one
/// runs, and the group reports how many reproduced.
const RACE_TRIES: usize = 20;

/// What the replays showed of an artifact: how it reproduced, the inputs
/// run before it that it needs (when alone it did not reproduce), its
/// signature, and the record its process saved with it, if any.
pub(super) struct Found {
    pub reproduction: Reproduction,
    pub history: Option<History>,
    pub sig: Signature,
    pub saved: Option<Record>,
}

impl Found {
    /// Reproduces `artifact`, `first` its first replay, after its
    /// history when it does not alone, and signs it.
    pub(super) fn replayed(
        src: &Source,
        artifact: &Artifact,
        first: Replay,
        saved: Option<Record>,
    ) -> Result<Found> {
        let mut reproduction = reproduce(src, artifact.path, first)?;
        // What a whole process showed no history shows again.
        let process_wide = saved
            .as_ref()
            .is_some_and(|r| report::key::PROCESS_KINDS.contains(&r.kind.as_str()));
        let history = match src.history {
            Some(ring) if !reproduction.reproduced() && !process_wide => {
                with_history(src, ring, artifact.path, &mut reproduction)?
            }
            _ => None,
        };
        let replay = &reproduction.replay;
        let sig = sign(src, replay, saved.as_ref(), artifact.engine_log);
        Ok(Found {
            reproduction,
            history,
            sig,
            saved,
        })
    }

    pub(super) fn reproduced(&self) -> bool {
        self.reproduction.reproduced()
    }

    /// The record it is filed by: the replay's; a saved finding that did
    /// not show again is still what its record says (`sign` signed it so).
    pub(super) fn record(&self) -> Option<&Record> {
        match self.reproduced() {
            true => self.reproduction.replay.record.as_ref(),
            false => self.saved.as_ref(),
        }
    }

    /// The log a page shows of a finding no replay showed: its saved
    /// record's line, else the engine's log.
    pub(super) fn unreproduced_log(&self, engine_log: &str) -> String {
        match &self.saved {
            Some(r) => format!("{}\n", r.line),
            None => engine_log.to_string(),
        }
    }
}

/// How an artifact reproduced.
pub(super) struct Reproduction {
    /// The first replay that reproduced, else the last one.
    pub(super) replay: Replay,
    hits: usize,
    tries: usize,
    /// The program has a race section: what interleaves is up to the machine.
    race: bool,
    /// For a race: whether a replay with its sections run one worker at a
    /// time reproduced (then contention is not what it needs).
    serially: Option<bool>,
}

impl Reproduction {
    pub(super) fn reproduced(&self) -> bool {
        self.hits > 0
    }

    pub(super) fn race_rate(&self) -> Option<String> {
        let serially = match self.serially {
            Some(true) => "; also with its race sections run one worker at a time",
            Some(false) => {
                "; never with its race sections run one worker at a time: contention is the bug"
            }
            None => "",
        };
        self.race
            .then(|| format!("{} of {} replays{serially}", self.hits, self.tries))
    }
}

/// Reproduces an artifact: up to [`TRIES`] times, or, when its program
/// has a race section, [`RACE_TRIES`] times, counting every hit; `done`
/// is a replay already run, counted as the first.
fn reproduce(src: &Source, input: &Path, done: Replay) -> Result<Reproduction> {
    let race = crate::pipeline::program::read_program(src.target, input)?
        .ops
        .iter()
        .any(shadow::Op::is_race);
    let tries = if race { RACE_TRIES } else { TRIES };
    let (mut first, mut last, mut hits) = (None, None, 0);
    let mut done = Some(done);
    for _ in 0..tries {
        let r = match done.take() {
            Some(r) => r,
            None => src.replay(&[input], true)?,
        };
        if r.reproduced {
            hits += 1;
            if !race {
                first = Some(r);
                break;
            }
            first.get_or_insert(r);
        } else {
            last = Some(r);
        }
    }
    // Once more without contention: a finding only a race makes is gone.
    let serially = match race && hits > 0 {
        true => Some(
            src.replayer()
                .replay_serially(&[input], true)
                .with_context(|| format!("failed to run {}", src.binary.display()))?
                .reproduced,
        ),
        false => None,
    };
    Ok(Reproduction {
        replay: first.or(last).expect("tries > 0"),
        hits,
        tries: if race { tries } else { hits.max(1) },
        race,
        serially,
    })
}

/// Signs a replay. When the replay did not reproduce, a saved finding is
/// signed by the record the harness wrote as it found it, and a crash by
/// the engine's own log (a flaky crash still has the engine's report).
pub(super) fn sign(
    src: &Source,
    replay: &Replay,
    saved: Option<&Record>,
    engine_log: &str,
) -> Signature {
    let slot = src.slot_label();
    unreproduced(replay.signature(&slot), saved, engine_log, &slot).unwrap_or_else(|| Signature {
        // The engine wrote an artifact but no log says why.
        kind: "crash".into(),
        allocator: src.allocator.to_string(),
        frames: Vec::new(),
        message: format!("unreported crash in {slot}"),
        path: false,
        alt: Vec::new(),
    })
}

/// The replay's signature, else the saved record's, else the engine log's.
fn unreproduced(
    replayed: Option<Signature>,
    saved: Option<&Record>,
    engine_log: &str,
    slot: &str,
) -> Option<Signature> {
    replayed
        .or_else(|| saved.map(Signature::from_record))
        .or_else(|| Signature::from_log(engine_log, slot))
}

/// Replays a crash that did not reproduce alone after the inputs its
/// process ran before it; when that reproduces, it becomes the
/// reproduction and the history is returned.
fn with_history(
    src: &Source,
    ring: &Path,
    artifact: &Path,
    reproduction: &mut Reproduction,
) -> Result<Option<History>> {
    let history = match History::unpack(ring, artifact, &ring.with_extension("inputs")) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(e) => {
            // The crash is still filed, as flaky: a bad history loses nothing.
            eprintln!(
                "allocsoak: {e:#}; {} is filed without its history",
                artifact.display()
            );
            return Ok(None);
        }
    };
    let replay = history.replay(&src.replayer(), artifact)?;
    if !replay.reproduced {
        return Ok(None);
    }
    *reproduction = Reproduction {
        replay,
        hits: 1,
        tries: 1,
        race: false,
        serially: None,
    };
    Ok(Some(history))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved finding's record, as `shadow::findings` writes it.
    fn record() -> Record {
        Record {
            kind: "remote-free-lost".into(),
            key: "remote-free-lost in remote-free size 256K.. align 32..: N of N blocks".into(),
            allocator: "mimalloc".into(),
            reference: false,
            op_index: 0,
            op: "race-remote-free freer=192 owner=196 size=524287 align=262144 count=32".into(),
            site: "remote-free size 256K.. align 32..".into(),
            sound: true,
            line: "allocsoak violation: remote-free-lost: op #0 ...".into(),
            path: Vec::new(),
            what: String::new(),
            family: String::new(),
        }
    }

    #[test]
    fn a_saved_finding_that_did_not_show_again_is_signed_by_its_record() {
        let sig = unreproduced(None, Some(&record()), "", "mt_ops/mimalloc").unwrap();
        assert_eq!(sig.kind, "remote-free-lost");
        assert_eq!(sig.allocator, "mimalloc");
        assert_eq!(sig.message, record().key);
        // A crash with neither: the caller's `unreported crash`.
        assert!(unreproduced(None, None, "", "mt_ops/mimalloc").is_none());
    }
}
