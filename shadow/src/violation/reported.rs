//! A violation as the harness reports it: at which op, call and path,
//! raised by whom; its line, key and typed record.

use std::fmt;

use report::Record;

use super::{Site, Violation};

/// Who raised a violation: the bracket that ends its line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum By {
    /// The allocator under test: ` [allocator <name>]`.
    Allocator(String),
    /// The reference side of `diff_mimalloc`:
    /// ` [reference allocator <name>]`; the violation is the reference's.
    Reference(String),
    /// The allocator under test disagrees with the reference:
    /// ` [allocator <name>, reference <name>]`; the violation is the
    /// allocator under test's.
    Versus {
        allocator: String,
        reference: String,
    },
}

/// A violation with the op that exposed it and who raised it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub op_index: usize,
    pub op: String,
    pub site: Site,
    /// The allocator's own functions the op's calls ran (sorted), for a
    /// violation of a call's result in a replay ([`crate::coverage`]);
    /// empty otherwise.
    pub path: Vec<String>,
    pub violation: Violation,
    pub by: By,
}

impl Report {
    /// The violation's key ([`report::key::key`]), built from its parts:
    /// what tolerance lists and signatures group on.
    pub fn key(&self) -> String {
        report::key::key(
            self.violation.kind(),
            &self.site.to_string(),
            &self.violation.to_string(),
            self.reference(),
        )
    }

    /// The reference that raised it, on the reference side of `diff_mimalloc`.
    fn reference(&self) -> Option<&str> {
        match &self.by {
            By::Reference(name) => Some(name.as_str()),
            _ => None,
        }
    }

    /// The allocator the violation belongs to.
    pub fn allocator(&self) -> &str {
        match &self.by {
            By::Allocator(name) | By::Reference(name) => name,
            By::Versus { allocator, .. } => allocator,
        }
    }

    /// The typed record of this violation, for the crash pipeline.
    pub fn record(&self) -> Record {
        Record {
            kind: self.violation.kind().to_string(),
            key: self.key(),
            allocator: self.allocator().to_string(),
            reference: matches!(self.by, By::Reference(_)),
            op_index: self.op_index,
            op: self.op.clone(),
            site: self.site.to_string(),
            sound: self.violation.leaves_heap_sound(),
            line: self.to_string(),
            path: self.path.clone(),
            what: report::key::what(
                self.violation.kind(),
                &self.violation.to_string(),
                self.reference(),
            ),
            family: report::key::family(
                self.violation.kind(),
                self.site.api,
                &self.violation.to_string(),
                self.reference(),
            ),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use report::key::{REFERENCE, UNDER_TEST};
        write!(
            f,
            "allocsoak violation: {}: op #{} `{}` ({}): {}",
            self.violation.kind(),
            self.op_index,
            self.op,
            self.site,
            self.violation
        )?;
        match &self.by {
            By::Allocator(name) => write!(f, "{UNDER_TEST}{name}]"),
            By::Reference(name) => write!(f, "{REFERENCE}{name}]"),
            By::Versus {
                allocator,
                reference,
            } => write!(f, "{UNDER_TEST}{allocator}, reference {reference}]"),
        }
    }
}
