//! A child the executor forks (a `race-fork`'s, an `attack`'s): how it
//! starts, and how its parent waits for it.

/// How long a forked child may take before it is hung.
pub const FORK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// How a forked child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkEnd {
    /// It made its calls, its blocks held their patterns, and it exited.
    Clean,
    /// The system refused the fork (or the child was reaped elsewhere):
    /// nothing was checked.
    Refused,
    /// It had not exited after [`FORK_PATIENCE`] (killed then): a lock
    /// held at the fork by a thread the child does not have.
    Hung,
    /// A block's pattern broke, a request failed, or the allocator
    /// panicked in it (its exit code), or a signal ended it.
    Failed {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

/// In a child: says nothing (a sanitizer's report, a panic's message, an
/// allocator's abort message): the parent's finding is what the log holds.
///
/// # Safety
/// Only in a forked child, which leaves by `_exit`.
pub(super) unsafe fn quiet() {
    // SAFETY: opens a NUL-terminated path and moves the descriptor onto
    // the standard ones, this process's own.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::dup2(null, 2);
        }
    }
}

/// In a child: a deadly signal ends it at once, with no handler of the
/// parent's (libFuzzer's would save the parent's input as a crash, a
/// sanitizer's would report it) and no core file.
///
/// # Safety
/// Only in a forked child, which leaves by `_exit` or a signal.
pub(super) unsafe fn die_plainly() {
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `none` is a valid limit; the signals are valid ones, and
    // the default action takes no handler.
    unsafe {
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        for signal in [
            libc::SIGABRT,
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGILL,
            libc::SIGFPE,
            libc::SIGTRAP,
        ] {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
}

/// How a child ends when the allocator panicked in it.
pub const PANICKED: i32 = 3;

/// In a child: runs `body` and ends the child with the code it returns,
/// or [`PANICKED`] when the allocator panicked in it. It never returns.
///
/// # Safety
/// Only in a forked child.
pub(super) unsafe fn finish(body: impl FnOnce() -> i32) -> ! {
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
    // SAFETY: ends the child at once: no destructor, no atexit handler, no
    // flush of what the parent's buffers held at the fork.
    unsafe { libc::_exit(code.unwrap_or(PANICKED)) }
}

/// Waits for child `pid` to end, and kills it once it has waited
/// [`FORK_PATIENCE`].
pub(super) fn wait_for(pid: libc::pid_t) -> ForkEnd {
    let deadline = std::time::Instant::now() + FORK_PATIENCE;
    let mut status = 0;
    loop {
        // SAFETY: waits for the caller's own child, without blocking.
        let done = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if done == pid {
            break;
        }
        if done < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            // Reaped by someone else: its end is not known here.
            return ForkEnd::Refused;
        }
        if std::time::Instant::now() >= deadline {
            // SAFETY: the child is the caller's, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return ForkEnd::Hung;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match (libc::WIFEXITED(status), libc::WIFSIGNALED(status)) {
        (true, _) if libc::WEXITSTATUS(status) == 0 => ForkEnd::Clean,
        (true, _) => ForkEnd::Failed {
            code: Some(libc::WEXITSTATUS(status)),
            signal: None,
        },
        (_, true) => ForkEnd::Failed {
            code: None,
            signal: Some(libc::WTERMSIG(status)),
        },
        _ => ForkEnd::Failed {
            code: None,
            signal: None,
        },
    }
}
