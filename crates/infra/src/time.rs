//! Wall-clock timestamps in RFC 3339 (UTC, whole seconds).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A point in time, printed as `2026-11-29T22:00:00Z`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub SystemTime);

impl Timestamp {
    pub fn now() -> Self {
        Timestamp(SystemTime::now())
    }

    pub fn unix_seconds(&self) -> u64 {
        self.0.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs()
    }

    pub fn millis_since(&self, earlier: Timestamp) -> u64 {
        self.0.duration_since(earlier.0).unwrap_or(Duration::ZERO).as_millis() as u64
    }
}

/// Unix seconds of a timestamp as [`Timestamp`] prints it (`2026-11-29T22:00:00Z`).
pub fn parse_unix_seconds(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' || b[19] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| text.get(from..to)?.parse::<u32>().ok();
    let (y, m, d) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (h, min, s) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || min > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(i64::from(y), m, d);
    u64::try_from(days * 86_400 + i64::from(h * 3600 + min * 60 + s)).ok()
}

/// A proleptic Gregorian date to days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.unix_seconds();
        let (days, rem) = (secs / 86_400, secs % 86_400);
        let (y, m, d) = civil_from_days(days as i64);
        write!(f, "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        let at = |s| Timestamp(UNIX_EPOCH + Duration::from_secs(s)).to_string();
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_795_989_600), "2026-11-29T22:00:00Z");
    }

    #[test]
    fn parses_what_it_prints() {
        for secs in [0, 951_782_400, 1_795_989_600, 4_102_444_799] {
            let text = Timestamp(UNIX_EPOCH + Duration::from_secs(secs)).to_string();
            assert_eq!(parse_unix_seconds(&text), Some(secs), "{text}");
        }
        assert_eq!(parse_unix_seconds("2026-13-01T00:00:00Z"), None);
        assert_eq!(parse_unix_seconds("2026-11-29 22:00:00"), None);
    }
}
