//! The median of durations.

use std::time::Duration;

/// The median of `d`, in milliseconds.
pub fn median_ms(d: &[Duration]) -> f64 {
    let mut v: Vec<f64> = d.iter().map(|x| x.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}
