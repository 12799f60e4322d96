//! Counts in words: `1 file`, `2 files`.

/// `n` and the noun: `one` for exactly one, `many` otherwise (`0 files`).
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `n` with its thousands apart: `26,954`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// The first line of `text`, trimmed, cut to `max` characters (with `…` when cut).
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    match line.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &line[..end]),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_and_everything_else_plural() {
        assert_eq!(count(1u32, "step", "steps"), "1 step");
        assert_eq!(count(0u32, "step", "steps"), "0 steps");
        assert_eq!(count(2u64, "match", "matches"), "2 matches");
    }

    #[test]
    fn thousands_are_set_apart() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(28_283), "28,283");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
