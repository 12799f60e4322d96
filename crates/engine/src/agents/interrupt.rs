//! A request from outside to stop a driver (Ctrl-C, or `offshoot stop`), shared
//! between whoever receives it and the driver. Receiving it kills the running
//! command's process group at once; the driver notices at its next safe point,
//! settles the calls it cut short, commits and lets go. During a model call there is
//! nothing to keep, so the receiver is told to end the process right away.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use infra::{process, signals};

/// Why the driver is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Ctrl-C.
    User,
    /// `offshoot stop`.
    Stopped,
}

impl Reason {
    /// The signal that brings this request (SIGINT for Ctrl-C, SIGTERM for a stop).
    pub fn signal(self) -> i32 {
        match self {
            Reason::User => signals::INTERRUPT,
            Reason::Stopped => signals::TERMINATE,
        }
    }

    pub fn of_signal(signal: i32) -> Reason {
        if signal == signals::TERMINATE { Reason::Stopped } else { Reason::User }
    }

    /// What a call cut short by this is told.
    pub fn words(self) -> &'static str {
        match self {
            Reason::User => "interrupted by the user",
            Reason::Stopped => "stopped",
        }
    }
}

/// What the receiver of a request should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// The driver will stop at its next safe point.
    Handled,
    /// The driver is waiting on a model call, which commits nothing: end the process.
    ExitNow,
    /// A request was already in: end the process at once.
    Again,
}

const NONE: u8 = 0;
const USER: u8 = 1;
const STOPPED: u8 = 2;

const IDLE: u8 = 0;
const CALLING: u8 = 1;
const EXITING: u8 = 2;

/// What a driver leaves behind when its process ends at once: the stop recorded as a
/// stop (the agent marked stopped, who should hear of it told).
/// Its second argument says whether the driver may be at work meanwhile (a second
/// request, which came while the driver settled the first): then only the mark is set,
/// and telling the parent is left to the driver or a later `stop` (two would race).
pub(crate) type ExitHook = Box<dyn Fn(Reason, bool) + Send + Sync>;

#[derive(Default)]
struct Shared {
    reason: AtomicU8,
    /// The process group of the command running now (0: none).
    group: AtomicU32,
    phase: AtomicU8,
    /// Run by [`Interrupt::exiting`], once.
    on_exit: Mutex<Option<ExitHook>>,
}

/// The handle both sides hold.
#[derive(Clone, Default)]
pub struct Interrupt {
    shared: Arc<Shared>,
}

impl Interrupt {
    /// Records the request and kills the running command's group.
    pub fn request(&self, reason: Reason) -> Disposition {
        let code = match reason {
            Reason::User => USER,
            Reason::Stopped => STOPPED,
        };
        if self.shared.reason.compare_exchange(NONE, code, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return Disposition::Again;
        }
        let group = self.shared.group.load(Ordering::SeqCst);
        if group != 0 {
            process::kill_group(group);
        }
        match self.shared.phase.compare_exchange(CALLING, EXITING, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => Disposition::ExitNow,
            Err(_) => Disposition::Handled,
        }
    }

    /// Whether a stop was asked for (Ctrl-C, `offshoot stop`).
    pub fn requested(&self) -> bool {
        self.reason().is_some()
    }

    pub(crate) fn reason(&self) -> Option<Reason> {
        match self.shared.reason.load(Ordering::SeqCst) {
            USER => Some(Reason::User),
            STOPPED => Some(Reason::Stopped),
            _ => None,
        }
    }

    /// A command's process group now exists; killed at once if a request came first.
    pub(crate) fn command_started(&self, group: u32) {
        self.shared.group.store(group, Ordering::SeqCst);
        if self.reason().is_some() {
            process::kill_group(group);
        }
    }

    pub(crate) fn command_ended(&self) {
        self.shared.group.store(0, Ordering::SeqCst);
    }

    /// Enters a model call; `false` if a request already came (do not call).
    pub(crate) fn enter_call(&self) -> bool {
        self.shared.phase.store(CALLING, Ordering::SeqCst);
        if self.reason().is_some() {
            self.shared.phase.store(IDLE, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Sets what [`Interrupt::exiting`] runs (a driver's run sets it, and clears it with
    /// `None` when it ends).
    pub(crate) fn on_exit(&self, hook: Option<ExitHook>) {
        *self.shared.on_exit.lock().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// The receiver is about to end the process for `reason` (a request during a model
    /// call, or a second one): the driver's stop is recorded first, once.
    pub fn exiting(&self, reason: Reason, driver_at_work: bool) {
        let hook = self.shared.on_exit.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(hook) = hook {
            hook(reason, driver_at_work);
        }
    }

    /// Leaves a model call. If the receiver already chose to end the process, this
    /// thread waits for that instead of going on.
    pub(crate) fn leave_call(&self) {
        if self.shared.phase.compare_exchange(CALLING, IDLE, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            loop {
                std::thread::park();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_during_a_call_ends_the_process_and_otherwise_waits_for_the_driver() {
        let i = Interrupt::default();
        assert!(i.enter_call());
        i.leave_call();
        assert_eq!(i.request(Reason::User), Disposition::Handled);
        assert_eq!(i.reason(), Some(Reason::User));
        assert!(!i.enter_call(), "no call starts after a request");
        assert_eq!(i.request(Reason::Stopped), Disposition::Again);

        let i = Interrupt::default();
        assert!(i.enter_call());
        assert_eq!(i.request(Reason::Stopped), Disposition::ExitNow);
    }
}
