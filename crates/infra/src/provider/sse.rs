//! Server-sent events framing: bytes in, `event`/`data` records out.

/// One SSE record. `event` is empty when the stream names none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    pub event: String,
    pub data: String,
}

/// Incremental parser; feed it bytes as they arrive.
#[derive(Debug, Default)]
pub(crate) struct Parser {
    line: Vec<u8>,
    current: Event,
    has_data: bool,
}

impl Parser {
    /// Consumes bytes, returning every event they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<Event> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let mut line = std::mem::take(&mut self.line);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                self.line_done(&line, &mut out);
            } else {
                self.line.push(b);
            }
        }
        out
    }

    /// Ends the stream, flushing an event not closed by a blank line.
    pub fn finish(mut self) -> Option<Event> {
        let mut out = Vec::new();
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, &mut out);
        }
        self.line_done(b"", &mut out);
        out.pop()
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<Event>) {
        if line.is_empty() {
            if self.has_data || !self.current.event.is_empty() {
                out.push(std::mem::take(&mut self.current));
            }
            self.has_data = false;
            return;
        }
        if line[0] == b':' {
            return;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.find(':') {
            Some(i) => (&text[..i], text[i + 1..].strip_prefix(' ').unwrap_or(&text[i + 1..])),
            None => (&text[..], ""),
        };
        match field {
            "event" => self.current.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.current.data.push('\n');
                }
                self.current.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_yield_the_same_events() {
        let stream = b"event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\n\ndata: one\ndata: two\n\nevent: b\ndata:tail";
        let whole = {
            let mut p = Parser::default();
            let mut ev = p.push(stream);
            ev.extend(p.finish());
            ev
        };
        let expected = vec![
            Event { event: "a".into(), data: "{\"x\":1}".into() },
            Event { event: "".into(), data: "one\ntwo".into() },
            Event { event: "b".into(), data: "tail".into() },
        ];
        assert_eq!(whole, expected);
        for cut in 0..stream.len() {
            let mut p = Parser::default();
            let mut ev = p.push(&stream[..cut]);
            ev.extend(p.push(&stream[cut..]));
            ev.extend(p.finish());
            assert_eq!(ev, expected, "cut at {cut}");
        }
    }
}
