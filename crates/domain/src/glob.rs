//! Path globs for context rules: `*` and `?` within one component, `**` across any.

/// Whether `path` (slash-separated, relative) matches `pattern`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pat: Vec<&str> = pattern.split('/').filter(|s| !s.is_empty()).collect();
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match_parts(&pat, &parts)
}

fn match_parts(pat: &[&str], parts: &[&str]) -> bool {
    match pat.split_first() {
        None => parts.is_empty(),
        Some((&"**", rest)) => (0..=parts.len()).any(|skip| match_parts(rest, &parts[skip..])),
        Some((first, rest)) => parts
            .split_first()
            .is_some_and(|(p, tail)| component(first.as_bytes(), p.as_bytes()) && match_parts(rest, tail)),
    }
}

fn component(pat: &[u8], s: &[u8]) -> bool {
    match pat.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|skip| component(rest, &s[skip..])),
        Some((b'?', rest)) => !s.is_empty() && component(rest, &s[1..]),
        Some((c, rest)) => s.first() == Some(c) && component(rest, &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs() {
        assert!(matches("AGENTS.md", "AGENTS.md"));
        assert!(!matches("AGENTS.md", "src/AGENTS.md"));
        assert!(matches("**/AGENTS.md", "src/AGENTS.md"));
        assert!(matches("**/AGENTS.md", "AGENTS.md"));
        assert!(matches(".offshoot/summary/**", ".offshoot/summary/0001.md"));
        assert!(matches("*.md", "notes.md"));
        assert!(!matches("*.md", "notes.txt"));
        assert!(matches("a?c", "abc"));
    }
}
