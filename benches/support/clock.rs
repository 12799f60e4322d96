//! When each step starts, as a driver's events say.

use std::time::Instant;

use engine::step::events::{Event, Observer};

/// Records when each step starts.
pub struct Clock {
    pub starts: Vec<Instant>,
}

impl Observer for Clock {
    fn event(&mut self, event: Event<'_>) {
        if let Event::StepStarted { .. } = event {
            self.starts.push(Instant::now());
        }
    }
}
