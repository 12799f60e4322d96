//! Hiding secret values in text: whole strings, and streams written piece by piece
//! (a value split across two writes is still found).

use std::io::Write;

/// Values that must never be shown, each with the label that replaces it.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<(String, String)>,
}

impl Redactor {
    /// `values` are (label, value) pairs; empty values are ignored.
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

    pub fn is_empty(&self) -> bool {
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
pub struct Redacting<'r, W: Write> {
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
    fn values_are_replaced_by_their_labels_even_across_writes() {
        let r = Redactor::new([("API_KEY".to_owned(), "sk-secret-123".to_owned()), ("EMPTY".into(), String::new())]);
        assert_eq!(r.redact("key=sk-secret-123!"), "key=[redacted: the value of API_KEY]!");
        let mut w = Redacting::new(Vec::new(), &r);
        for piece in ["a sk-sec", "ret-1", "23 b sk-secret-12", "3", " end sk-s"] {
            w.write_all(piece.as_bytes()).expect("write");
        }
        let out = String::from_utf8(w.finish().expect("finish")).expect("utf-8");
        assert_eq!(out, "a [redacted: the value of API_KEY] b [redacted: the value of API_KEY] end sk-s");
    }
}
