//! When each step starts, as a driver's events say, and the median of durations.

use std::time::{Duration, Instant};

use offshoot::engine::driver::{Event, Observer};

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

/// The median of `d`, in milliseconds.
pub fn median_ms(d: &[Duration]) -> f64 {
    let mut v: Vec<f64> = d.iter().map(|x| x.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
