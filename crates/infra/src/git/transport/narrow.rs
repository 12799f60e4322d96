//! A push's ref advertisement narrowed to the refs it moves.
//!
//! libgit2 hides from the pack it sends every commit the server advertised that it has
//! here, reading each one and walking its tree: on a remote of thousands of agents a
//! push of one claim read thousands of objects. A push that asks for it ([`narrowing`])
//! sees only the refs it moves, and those named with them: what it sends then is what
//! those refs' values reach beyond their old values there (more, never less, than the
//! server needs).

use std::cell::RefCell;
use std::collections::HashSet;
use std::io::{Read, Write};

use git2::transport::{Service, SmartSubtransportStream};

thread_local! {
    /// The refs the push running on this thread may see (`None`: all).
    static SEEN: RefCell<Option<HashSet<String>>> = const { RefCell::new(None) };
}

/// While it lives, a push on this thread sees only the refs it was made with (`None`:
/// all of them); then what was seen before.
pub(crate) struct Narrowing(Option<HashSet<String>>);

/// Narrows the ref advertisement of the pushes made on this thread to `names` (`None`:
/// none narrowed) until the guard is dropped.
pub(crate) fn narrowing(names: Option<Vec<String>>) -> Narrowing {
    let before = SEEN.with(|seen| seen.replace(names.map(|n| n.into_iter().collect())));
    Narrowing(before)
}

impl Drop for Narrowing {
    fn drop(&mut self) {
        let before = self.0.take();
        SEEN.with(|seen| *seen.borrow_mut() = before);
    }
}

/// `stream` as libgit2 is to read it: a push's advertisement narrowed when this thread
/// asked for it, else as it is.
pub(super) fn narrowed(service: Service, stream: Box<dyn SmartSubtransportStream>) -> Box<dyn SmartSubtransportStream> {
    match (service, SEEN.with(|seen| seen.borrow().clone())) {
        (Service::ReceivePackLs, Some(kept)) => {
            Box::new(Narrowed { inner: stream, kept, state: State::Before, out: Vec::new(), at: 0, dropped: 0 })
        }
        _ => stream,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Before the first ref (an https reply's `# service=` line and its flush).
    Before,
    /// In the ref list: the capabilities of its first line, once read, and whether a
    /// line has been passed on.
    Refs { capabilities: Option<Vec<u8>>, passed: bool },
    /// After it: everything passed on as it comes.
    After,
}

struct Narrowed {
    inner: Box<dyn SmartSubtransportStream>,
    kept: HashSet<String>,
    state: State,
    /// What is ready for libgit2, read from `at`.
    out: Vec<u8>,
    at: usize,
    /// The bytes of the ref lines read (bounded, however few are kept).
    dropped: u64,
}

/// An object id of the advertisement: 40 or 64 hex digits.
fn is_id(bytes: &[u8]) -> bool {
    matches!(bytes.len(), 40 | 64) && bytes.iter().all(u8::is_ascii_hexdigit)
}

fn pkt_line(payload: &[u8]) -> Vec<u8> {
    let mut line = format!("{:04x}", payload.len() + 4).into_bytes();
    line.extend_from_slice(payload);
    line
}

impl Narrowed {
    /// Reads one pkt-line of the advertisement (`None`: a flush) and puts what of it
    /// libgit2 is to see in `out`.
    fn next_line(&mut self) -> std::io::Result<()> {
        let mut size = [0u8; 4];
        self.inner.read_exact(&mut size)?;
        let size = std::str::from_utf8(&size)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
            .ok_or_else(|| std::io::Error::other("the remote's ref advertisement is not in pkt-lines"))?;
        if size == 0 {
            if let State::Refs { capabilities, passed: false } = &self.state {
                // None kept: what an empty repository says, with the capabilities.
                let mut line = vec![b'0'; 40];
                line.extend_from_slice(b" capabilities^{}\0");
                line.extend(capabilities.clone().unwrap_or_default());
                line.push(b'\n');
                self.out.extend(pkt_line(&line));
            }
            if self.state != State::Before {
                self.state = State::After;
            }
            self.out.extend_from_slice(b"0000");
            return Ok(());
        }
        let short = || std::io::Error::other("a pkt-line shorter than its length");
        let mut payload = vec![0u8; size.checked_sub(4).ok_or_else(short)?];
        self.inner.read_exact(&mut payload)?;
        if self.state == State::Before {
            let first_ref = payload.iter().position(|b| *b == b' ').is_some_and(|end| is_id(&payload[..end]));
            if !first_ref {
                self.out.extend(pkt_line(&payload));
                return Ok(());
            }
            self.state = State::Refs { capabilities: None, passed: false };
        }
        self.take_ref(payload)
    }

    /// One line of the ref list: a ref passed on if kept (the first passed carrying the
    /// capabilities of the first read), anything else (an `ERR`) as it is.
    fn take_ref(&mut self, payload: Vec<u8>) -> std::io::Result<()> {
        let is_ref = payload.iter().position(|b| *b == b' ').is_some_and(|end| is_id(&payload[..end]));
        if !is_ref {
            self.out.extend(pkt_line(&payload));
            return Ok(());
        }
        self.dropped += payload.len() as u64;
        if self.dropped > super::ADVERTISEMENT_MAX {
            return Err(std::io::Error::other("the remote's ref advertisement is too large"));
        }
        let State::Refs { capabilities, passed } = &mut self.state else { return Ok(()) };
        let body = payload.strip_suffix(b"\n").unwrap_or(&payload);
        let (line, caps) = match body.iter().position(|b| *b == 0) {
            Some(nul) => (&body[..nul], Some(body[nul + 1..].to_vec())),
            None => (body, None),
        };
        if capabilities.is_none() {
            *capabilities = Some(caps.unwrap_or_default());
        }
        let name = line.iter().position(|b| *b == b' ').map(|space| &line[space + 1..]).unwrap_or_default();
        let kept = std::str::from_utf8(name).is_ok_and(|name| self.kept.contains(name));
        if kept {
            let mut out = line.to_vec();
            if !*passed {
                out.push(0);
                out.extend(capabilities.clone().unwrap_or_default());
            }
            out.push(b'\n');
            *passed = true;
            self.out.extend(pkt_line(&out));
        }
        Ok(())
    }
}

impl Read for Narrowed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.out.len() && self.state != State::After {
            self.out.clear();
            self.at = 0;
            self.next_line()?;
        }
        if self.at < self.out.len() {
            let n = buf.len().min(self.out.len() - self.at);
            buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
            self.at += n;
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

impl Write for Narrowed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of fixed bytes (what a server sent), taking whatever is written.
    struct Canned(std::io::Cursor<Vec<u8>>);

    impl Read for Canned {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0.read(buf)
        }
    }

    impl Write for Canned {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn read_through(sent: Vec<u8>, kept: &[&str]) -> String {
        let _narrow = narrowing(Some(kept.iter().map(|k| (*k).to_owned()).collect()));
        let mut stream = narrowed(Service::ReceivePackLs, Box::new(Canned(std::io::Cursor::new(sent))));
        let mut seen = Vec::new();
        stream.read_to_end(&mut seen).expect("read");
        String::from_utf8(seen).expect("utf-8")
    }

    #[test]
    fn only_the_kept_refs_are_advertised_with_the_capabilities_moved_to_the_first() {
        let (a, b) = ("a".repeat(40), "b".repeat(40));
        let mut sent = pkt_line(format!("{a} refs/heads/one\0report-status delete-refs\n").as_bytes());
        sent.extend(pkt_line(format!("{b} refs/heads/two\n").as_bytes()));
        sent.extend(b"0000");
        // (What follows the list, the server's status report, is passed on as it is.)
        sent.extend(b"000eunpack ok\n0000");
        let narrowed = read_through(sent.clone(), &["refs/heads/two"]);
        assert_eq!(narrowed, format!("0056{b} refs/heads/two\0report-status delete-refs\n0000000eunpack ok\n0000"));
        // None kept: an empty repository's line, with the capabilities.
        let none = read_through(sent.clone(), &[]);
        assert!(none.starts_with(&format!("{}{} capabilities^{{}}\0report-status", "0057", "0".repeat(40))), "{none}");
        assert!(none.ends_with("0000000eunpack ok\n0000"), "{none}");
        // A server's error inside the list reaches libgit2 as it was said.
        let mut refused = pkt_line(format!("{a} refs/heads/one\0caps\n").as_bytes());
        refused.extend(pkt_line(b"ERR access denied\n"));
        refused.extend(b"0000");
        assert!(read_through(refused, &[]).starts_with("0016ERR access denied\n"));
        // An https reply's service line and its flush come first, untouched.
        let mut https = pkt_line(b"# service=git-receive-pack\n");
        https.extend(b"0000");
        https.extend(sent.clone());
        let both = read_through(https, &["refs/heads/one", "refs/heads/two"]);
        assert_eq!(both, format!("001f# service=git-receive-pack\n0000{}", String::from_utf8(sent).expect("utf-8")));
    }

    #[test]
    fn without_narrowing_or_for_a_fetch_the_stream_is_untouched() {
        let sent = pkt_line(format!("{} refs/heads/one\0caps\n", "a".repeat(40)).as_bytes());
        let mut stream = narrowed(Service::ReceivePackLs, Box::new(Canned(std::io::Cursor::new(sent.clone()))));
        let mut seen = Vec::new();
        stream.read_to_end(&mut seen).expect("read");
        assert_eq!(seen, sent);
        let _narrow = narrowing(Some(Vec::new()));
        let mut stream = narrowed(Service::UploadPackLs, Box::new(Canned(std::io::Cursor::new(sent.clone()))));
        let mut seen = Vec::new();
        stream.read_to_end(&mut seen).expect("read");
        assert_eq!(seen, sent);
    }
}
