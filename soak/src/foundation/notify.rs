//! Tells systemd how the soak daemon is doing (`sd_notify`): ready, a status
//! line, watchdog pings, stopping. See `soak/systemd/allocsoak.service`.
//!
//! Everything is read from the environment systemd sets (`NOTIFY_SOCKET`,
//! `WATCHDOG_USEC`, `WATCHDOG_PID`) and nothing is unset, so the daemon can
//! notify as often as it likes. Outside systemd every method is a no-op. A
//! failed send is printed to stderr once and otherwise ignored: losing touch
//! with systemd must not stop a soak.
//!
//! To watch a daemon's notifications in a test, bind a
//! [`UnixDatagram`](std::os::unix::net::UnixDatagram) and start the daemon
//! with `NOTIFY_SOCKET` set to its path; each call arrives as one datagram,
//! e.g. `READY=1\n`. Add `WATCHDOG_USEC` (and no `WATCHDOG_PID`, which would
//! have to be the child's pid) to get `WATCHDOG=1\n` every
//! [`Notifier::watchdog_interval`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;

/// The daemon's line to systemd; cheap to share between threads by reference.
#[derive(Debug)]
pub struct Notifier {
    /// Whether `NOTIFY_SOCKET` was set; when not, every method does nothing.
    enabled: bool,
    /// `WATCHDOG_USEC`, when the watchdog is on and meant for this process.
    watchdog: Option<Duration>,
    /// Set after the first failed send, so only that one is printed.
    warned: AtomicBool,
}

impl Notifier {
    /// Reads the environment systemd sets. Without `NOTIFY_SOCKET` (not under
    /// systemd) the notifier is a no-op.
    pub fn from_env() -> Notifier {
        let enabled = std::env::var_os("NOTIFY_SOCKET").is_some();
        // sd_watchdog_enabled(3): WATCHDOG_PID, when set, must be our pid.
        // Zero is not an interval (systemd itself rejects it).
        let watchdog = sd_notify::watchdog_enabled().filter(|d| enabled && !d.is_zero());
        Notifier {
            enabled,
            watchdog,
            warned: AtomicBool::new(false),
        }
    }

    /// `READY=1`: start-up is done. Under `Type=notify` systemd counts the
    /// service as started, and starts the watchdog, only from here.
    pub fn ready(&self) {
        self.send(NotifyState::Ready);
    }

    /// `STATUS=text`, shown by `systemctl status`. Newlines become spaces: a
    /// newline would end the field.
    pub fn status(&self, text: &str) {
        self.send(NotifyState::Status(&text.replace('\n', " ")));
    }

    /// `WATCHDOG=1`, only when the watchdog is on. Call it every
    /// [`watchdog_interval`](Notifier::watchdog_interval).
    pub fn watchdog(&self) {
        if self.watchdog.is_some() {
            self.send(NotifyState::Watchdog);
        }
    }

    /// How often to call [`watchdog`](Notifier::watchdog): half of
    /// `WATCHDOG_USEC`, as sd_watchdog_enabled(3) advises. `None` when the
    /// watchdog is off, is for another pid, or there is no `NOTIFY_SOCKET`.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|d| d / 2)
    }

    /// `STOPPING=1`: the daemon is shutting down (after SIGTERM, or when its
    /// duration is up).
    pub fn stopping(&self) {
        self.send(NotifyState::Stopping);
    }

    fn send(&self, state: NotifyState) {
        if !self.enabled {
            return;
        }
        if let Err(e) = sd_notify::notify(std::slice::from_ref(&state)) {
            if !self.warned.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "allocsoak: telling systemd {state} failed: {e}; soaking on \
                     (further notify errors are not shown)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::env;
    use std::os::unix::net::UnixDatagram;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0; 256];
        let n = sock.recv(&mut buf).expect("a notification");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    // The environment is process-wide, so every check that sets it is here,
    // in order, rather than in tests that would race each other.
    #[test]
    fn notifies_the_socket_systemd_names() {
        for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            env::remove_var(var);
        }

        // Not under systemd: nothing to send, nothing fails.
        let off = Notifier::from_env();
        off.ready();
        off.status("fuzzing");
        off.watchdog();
        off.stopping();
        assert_eq!(off.watchdog_interval(), None);
        // A watchdog without a socket is off too.
        env::set_var("WATCHDOG_USEC", "4000000");
        assert_eq!(Notifier::from_env().watchdog_interval(), None);
        env::remove_var("WATCHDOG_USEC");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        env::set_var("NOTIFY_SOCKET", &path);

        // No watchdog: WATCHDOG=1 is not sent.
        let n = Notifier::from_env();
        assert_eq!(n.watchdog_interval(), None);
        n.ready();
        n.watchdog();
        n.status("alloc_ops on mimalloc\n3 findings");
        n.stopping();
        assert_eq!(recv(&sock), "READY=1\n");
        assert_eq!(recv(&sock), "STATUS=alloc_ops on mimalloc 3 findings\n");
        assert_eq!(recv(&sock), "STOPPING=1\n");

        // A watchdog meant for another process is not ours.
        env::set_var("WATCHDOG_USEC", "4000000");
        env::set_var("WATCHDOG_PID", (std::process::id() + 1).to_string());
        assert_eq!(Notifier::from_env().watchdog_interval(), None);

        // Ours: named by pid, or unnamed (a child started by a test).
        env::set_var("WATCHDOG_PID", std::process::id().to_string());
        let n = Notifier::from_env();
        assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(2)));
        n.watchdog();
        assert_eq!(recv(&sock), "WATCHDOG=1\n");
        env::remove_var("WATCHDOG_PID");
        let n = Notifier::from_env();
        assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(2)));
        n.watchdog();
        assert_eq!(recv(&sock), "WATCHDOG=1\n");

        // Nobody listening: the sends fail, are reported once, and return.
        drop(sock);
        n.ready();
        assert!(n.warned.load(Ordering::Relaxed));
        n.status("still soaking");

        for var in ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"] {
            env::remove_var(var);
        }
    }
}
