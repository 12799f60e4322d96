//! Waiting on what a user would observe, instead of sleeping and hoping.

use std::time::{Duration, Instant};

/// Waits up to 30 s for `done`, checking every 20 ms; fails naming `what`.
#[track_caller]
pub fn wait_for(what: &str, done: impl FnMut() -> bool) {
    wait_for_within(what, Duration::from_secs(30), done);
}

/// [`wait_for`] with a limit of its own.
#[track_caller]
pub fn wait_for_within(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
