//! SIGINT, SIGTERM and SIGHUP, taken by one thread. The signals are blocked in the calling
//! thread (and so in every thread it starts afterwards) and a watcher thread waits
//! for them with `sigwait`, so what a signal means is decided in ordinary code, not
//! in a handler. Children start with an empty mask (std resets it).

use std::sync::Once;

/// The signals the watcher takes.
pub const INTERRUPT: i32 = libc::SIGINT;
pub const TERMINATE: i32 = libc::SIGTERM;
/// The terminal went away (its window closed, the connection dropped).
pub(crate) const HANGUP: i32 = libc::SIGHUP;

/// Blocks SIGINT, SIGTERM and SIGHUP and hands each to `on_signal` on a thread of its own.
/// Call before starting other threads; only the first call in a process counts.
pub fn watch(on_signal: impl Fn(i32) + Send + 'static) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let Some(set) = block() else { return };
        std::thread::spawn(move || {
            loop {
                if let Some(signal) = wait(&set) {
                    on_signal(signal);
                }
            }
        });
    });
}

#[expect(unsafe_code, reason = "sigset and pthread_sigmask calls on a set we own")]
fn block() -> Option<libc::sigset_t> {
    // SAFETY: the set is initialised by sigemptyset before any other use; the calls
    // read and write only the set we pass.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, INTERRUPT);
        libc::sigaddset(&mut set, TERMINATE);
        libc::sigaddset(&mut set, HANGUP);
        (libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0).then_some(set)
    }
}

#[expect(unsafe_code, reason = "sigwait(3) reads the set we own and writes one integer")]
fn wait(set: &libc::sigset_t) -> Option<i32> {
    let mut signal: libc::c_int = 0;
    // SAFETY: both pointers are to values that live across the call.
    let rc = unsafe { libc::sigwait(set, &mut signal) };
    (rc == 0).then_some(signal)
}
