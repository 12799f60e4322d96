//! Hiding secret values in text: whole strings, and streams written piece by piece
//! (a value split across two writes is still found).

use std::io::Write;

/// Values that must never be shown, each with the label that replaces it.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<(String, String)>,
}

/// Whether `value` can be a secret worth hiding: 12 characters or more, or 8 or more
/// that are not a word (at least 3 bits of entropy a character, as a random string
/// has). A placeholder a local server takes (`test`, `EMPTY`, `ollama`, `x`) is not: hidden,
/// every ordinary word it occurs in would be mangled, in what the model reads too.
pub fn could_be_secret(value: &str) -> bool {
    let n = value.chars().count();
    n >= 12 || (n >= 8 && entropy(value) >= 3.0)
}

/// Shannon entropy of `text`'s characters, in bits a character.
fn entropy(text: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in text.chars() {
        *counts.entry(c).or_insert(0u32) += 1;
    }
    let n = text.chars().count() as f64;
    counts.values().map(|&k| f64::from(k) / n).map(|p| -p * p.log2()).sum()
}

impl Redactor {
    /// `values` are (label, value) pairs; empty values are ignored (which values are
    /// secrets is the caller's to say: `tool_env::secret_values`).
    pub fn new(values: impl IntoIterator<Item = (String, String)>) -> Redactor {
        let mut secrets: Vec<(String, String)> = values
            .into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(label, value)| (value, format!("[redacted: the value of {label}]")))
            .collect();
        // Longest first, so a value that contains another is replaced whole.
        secrets.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        Redactor { secrets }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every secret value replaced by its label.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, label) in &self.secrets {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), label);
            }
        }
        out
    }

    fn redact_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for (value, label) in &self.secrets {
            let needle = value.as_bytes();
            if out.windows(needle.len()).any(|w| w == needle) {
                let mut replaced = Vec::with_capacity(out.len());
                let mut at = 0;
                while at < out.len() {
                    if out[at..].starts_with(needle) {
                        replaced.extend_from_slice(label.as_bytes());
                        at += needle.len();
                    } else {
                        replaced.push(out[at]);
                        at += 1;
                    }
                }
                out = replaced;
            }
        }
        out
    }

    /// Text that comes in pieces (a model's answer as it streams), redacted: `piece`
    /// joins what `held` kept, and what cannot be the start of a secret still arriving
    /// is returned, redacted; the rest stays in `held` for the next piece, or for
    /// [`Redactor::release`]. A secret split across pieces is caught whole.
    pub fn redact_piece(&self, held: &mut String, piece: &str) -> String {
        held.push_str(piece);
        if self.is_empty() {
            return std::mem::take(held);
        }
        let keep = self.longest().saturating_sub(1);
        if held.len() <= keep {
            return String::new();
        }
        let mut cut = held.len() - keep;
        while let Some(end) = self.straddling(held.as_bytes(), cut) {
            cut = end;
        }
        let cut = held.floor_char_boundary(cut);
        let out: String = held.drain(..cut).collect();
        self.redact(&out)
    }

    /// What `held` kept of [`Redactor::redact_piece`]'s pieces, redacted.
    pub fn release(&self, held: &mut String) -> String {
        self.redact(&std::mem::take(held))
    }

    /// The end of a secret in `bytes` that starts before `cut` and ends after it.
    fn straddling(&self, bytes: &[u8], cut: usize) -> Option<usize> {
        self.secrets.iter().find_map(|(value, _)| {
            let n = value.len();
            (cut.saturating_sub(n - 1)..cut)
                .find(|&s| s + n > cut && bytes.get(s..s + n) == Some(value.as_bytes()))
                .map(|s| s + n)
        })
    }

    fn longest(&self) -> usize {
        self.secrets.first().map_or(0, |(v, _)| v.len())
    }
}

/// A writer that redacts what passes through it. It holds back the last few bytes
/// of each write (fewer than the longest secret) until more arrive or it is
/// finished, so a value split across writes is caught.
pub(crate) struct Redacting<'r, W: Write> {
    inner: W,
    redactor: &'r Redactor,
    held: Vec<u8>,
}

impl<'r, W: Write> Redacting<'r, W> {
    pub fn new(inner: W, redactor: &'r Redactor) -> Self {
        Redacting { inner, redactor, held: Vec::new() }
    }

    /// Writes what is still held back and returns the inner writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        let rest = self.redactor.redact_bytes(&std::mem::take(&mut self.held));
        self.inner.write_all(&rest)?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for Redacting<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.redactor.is_empty() {
            return self.inner.write(buf);
        }
        self.held.extend_from_slice(buf);
        let keep = self.redactor.longest().saturating_sub(1);
        if self.held.len() > keep {
            // Release what cannot be the start of a secret still arriving; a whole
            // secret that straddles the cut is released with it.
            let mut cut = self.held.len() - keep;
            while let Some(end) = self.redactor.straddling(&self.held, cut) {
                cut = end;
            }
            let out: Vec<u8> = self.held.drain(..cut).collect();
            self.inner.write_all(&self.redactor.redact_bytes(&out))?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn keys_are_hidden_and_placeholders_and_words_never() {
        for key in
            ["sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789", "sk-proj-Xk29fQ", "a8Fq2Lz9", "AKIAIOSFODNN7EXAMPLE"]
        {
            assert!(could_be_secret(key), "{key}");
        }
        for word in ["", "x", "test", "EMPTY", "ollama", "dummy", "none", "password", "aaaaaaaaaa", "abababab"] {
            assert!(!could_be_secret(word), "{word}");
        }
    }

    #[test]
    fn values_are_replaced_by_their_labels_even_across_writes() {
        let r = Redactor::new([("API_KEY".to_owned(), "sk-secret-123".to_owned()), ("EMPTY".into(), String::new())]);
        assert_eq!(r.redact("key=sk-secret-123!"), "key=[redacted: the value of API_KEY]!");
        let mut w = Redacting::new(Vec::new(), &r);
        for piece in ["a sk-sec", "ret-1", "23 b sk-secret-12", "3", " end sk-s"] {
            w.write_all(piece.as_bytes()).expect("write");
        }
        let out = String::from_utf8(w.finish().expect("finish")).expect("utf-8");
        assert_eq!(out, "a [redacted: the value of API_KEY] b [redacted: the value of API_KEY] end sk-s");
        // The same, piece by piece as text.
        let mut held = String::new();
        let mut out = String::new();
        for piece in ["é sk-sec", "ret-1", "23 b sk-secret-12", "3", " end sk-s"] {
            out.push_str(&r.redact_piece(&mut held, piece));
        }
        out.push_str(&r.release(&mut held));
        assert_eq!(out, "é [redacted: the value of API_KEY] b [redacted: the value of API_KEY] end sk-s");
    }
}
