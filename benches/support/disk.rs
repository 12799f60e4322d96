//! The state of the disk a bench writes to: what creating one small file costs there.

use std::path::Path;
use std::time::Instant;

/// What creating one small new file costs in `dir` (mean of `n`), in microseconds.
pub fn file_creation_micros(dir: &Path, n: usize) -> f64 {
    std::fs::create_dir_all(dir).expect("probe dir");
    let t = Instant::now();
    for i in 0..n {
        std::fs::write(dir.join(format!("f{i}")), b"x").expect("probe");
    }
    t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64
}
