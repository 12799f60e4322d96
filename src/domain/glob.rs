//! Path globs for context rules: `*` and `?` within one component, `**` across any.

/// What is wrong with `pattern` as a pattern of paths inside a directory, if anything:
/// it must be relative, of plain components (no `.` or `..`, no empty ones), and not
/// reach into `.git` or the harness's `.offshoot`.
pub fn inside_problem(pattern: &str) -> Option<&'static str> {
    if pattern.is_empty() {
        return Some("is empty");
    }
    if pattern.starts_with('/') {
        return Some("must be relative to the project's root (no leading `/`)");
    }
    let parts: Vec<&str> = pattern.trim_end_matches('/').split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Some("must be plain path components (no `.`, `..` or `//`)");
    }
    if parts.iter().any(|p| *p == ".git" || *p == ".offshoot") {
        return Some("may not name `.git` or `.offshoot`");
    }
    None
}

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
