//! Counts in words: `1 file`, `2 files`.

/// `n` and the noun: `one` for exactly one, `many` otherwise (`0 files`).
pub fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
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
}
