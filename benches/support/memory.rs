//! Peak memory of a process, as Linux reports it.

/// The peak resident set (VmHWM, KiB) in a `/proc/<pid>/status` text; 0 if absent.
pub fn peak_rss_kib(status: &str) -> u64 {
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// This process's peak resident set, in KiB.
pub fn own_peak_rss_kib() -> u64 {
    peak_rss_kib(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
}
