//! Just enough HTTP/1.1 for `offshoot serve`: one request per connection (each answer
//! closes it), bodies by `Content-Length` only, every size bounded. The server is for a
//! browser and a few scripts on a trusted network, behind a token: what it refuses, it
//! refuses with a status and a line saying why.

use std::io::{BufRead, Read, Write};

/// The longest request line or header line taken.
const LINE_MAX: usize = 8 * 1024;
/// The most header lines taken.
const HEADERS_MAX: usize = 64;
/// The largest body taken (a prompt, a message).
pub(super) const BODY_MAX: usize = 1024 * 1024;

#[derive(Debug)]
pub(super) struct Request {
    pub(super) method: String,
    /// The path, percent-decoded, split at `/` (empty segments dropped).
    pub(super) segments: Vec<String>,
    pub(super) query: Vec<(String, String)>,
    /// Header names lower-cased.
    headers: Vec<(String, String)>,
    pub(super) body: Vec<u8>,
}

impl Request {
    pub(super) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub(super) fn param(&self, name: &str) -> Option<&str> {
        self.query.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Why a request could not be read: the status to answer with, and why.
#[derive(Debug)]
pub(super) struct Refused(pub(super) u16, pub(super) String);

/// Reads one request; `Ok(None)` when the peer closed before sending one.
pub(super) fn read_request(input: &mut impl BufRead) -> Result<Option<Request>, Refused> {
    let Some(line) = read_line(input)? else { return Ok(None) };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refused(400, format!("`{line}` is not an HTTP request line")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Refused(505, format!("{version} is not spoken here (HTTP/1.1 is)")));
    }
    let mut headers = Vec::new();
    loop {
        let Some(line) = read_line(input)? else { return Err(Refused(400, "the headers never ended".into())) };
        if line.is_empty() {
            break;
        }
        if headers.len() == HEADERS_MAX {
            return Err(Refused(431, format!("more than {HEADERS_MAX} header lines")));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Refused(400, format!("`{line}` is not a header line")));
        };
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let request = |body| {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let segments = path.split('/').filter(|s| !s.is_empty()).map(decode).collect();
        let query = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| p.split_once('=').unwrap_or((p, "")))
            .map(|(k, v)| (decode(k), decode(v)))
            .collect();
        Request { method: method.to_owned(), segments, query, headers: headers.clone(), body }
    };
    if headers.iter().any(|(n, _)| n == "transfer-encoding") {
        return Err(Refused(411, "a body is taken with a Content-Length only".into()));
    }
    Ok(Some(request(Vec::new())))
}

/// Reads the body the request's `Content-Length` announces (after its head was let in).
pub(super) fn read_body(input: &mut impl BufRead, request: &mut Request) -> Result<(), Refused> {
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => v.parse::<usize>().map_err(|_| Refused(400, format!("Content-Length `{v}` is not a number")))?,
    };
    if length > BODY_MAX {
        return Err(Refused(413, format!("a body of {length} bytes is more than the {BODY_MAX} taken")));
    }
    let mut body = Vec::new();
    input
        .take(length as u64)
        .read_to_end(&mut body)
        .map_err(|e| Refused(408, format!("the body was not read: {e}")))?;
    if body.len() < length {
        return Err(Refused(400, format!("the body ended after {} of its {length} bytes", body.len())));
    }
    request.body = body;
    Ok(())
}

/// A connection read with one deadline for the whole request, however slowly its
/// bytes come (each read waits only for what is left of it).
pub(super) struct Deadline {
    pub(super) stream: std::net::TcpStream,
    pub(super) until: std::time::Instant,
}

impl Read for Deadline {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the request took too long to arrive"));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

/// One line without its CRLF; `None` at the end of the stream before any byte.
fn read_line(input: &mut impl BufRead) -> Result<Option<String>, Refused> {
    let mut line = Vec::new();
    let n = input
        .take(LINE_MAX as u64 + 2)
        .read_until(b'\n', &mut line)
        .map_err(|e| Refused(408, format!("the request was not read: {e}")))?;
    if n == 0 {
        return Ok(None);
    }
    if !line.ends_with(b"\n") {
        return Err(Refused(431, format!("a line longer than {LINE_MAX} bytes")));
    }
    line.pop();
    if line.ends_with(b"\r") {
        line.pop();
    }
    String::from_utf8(line).map(Some).map_err(|_| Refused(400, "a request line or header is not UTF-8".into()))
}

/// `+` (a space, in a query) and `%XX` decoded; a malformed escape is kept as it is.
/// (`+` first: `%2B` is a plus.)
fn decode(text: &str) -> String {
    infra::words::percent_decoded(&text.replace('+', " "))
}

/// An answer: status, content type, body, and headers of its own.
pub(super) struct Response {
    pub(super) status: u16,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
    pub(super) headers: Vec<(&'static str, String)>,
}

impl Response {
    pub(super) fn json(status: u16, value: &serde_json::Value) -> Response {
        Response { status, content_type: "application/json", body: value.to_string().into_bytes(), headers: Vec::new() }
    }

    /// A JSON error naming what went wrong.
    pub(super) fn error(status: u16, message: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({"error": message.into(), "status": status}))
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// Headers every answer carries: nothing cached, nothing sniffed, no referrer (a page's
/// URL holds the token), and scripts, styles and connections from this server only.
const COMMON: &str = "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nReferrer-Policy: no-referrer\r\n\
X-Frame-Options: DENY\r\nContent-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; \
connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n";

pub(super) fn write_response(out: &mut impl Write, response: &Response) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n{COMMON}",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    for (name, value) in &response.headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(&response.body)?;
    out.flush()
}

/// The head of an event stream; its events follow as they come.
pub(super) fn write_stream_head(out: &mut impl Write) -> std::io::Result<()> {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n{COMMON}\r\n");
    out.write_all(head.as_bytes())?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Option<Request>, Refused> {
        let mut input = std::io::BufReader::new(text.as_bytes());
        let Some(mut request) = read_request(&mut input)? else { return Ok(None) };
        read_body(&mut input, &mut request)?;
        Ok(Some(request))
    }

    #[test]
    fn a_request_is_read_with_its_path_query_headers_and_body() {
        let r =
            read("POST /api/agents/k7%2Fq?token=a+b&x HTTP/1.1\r\nHost: 127.0.0.1:9\r\nContent-Length: 2\r\n\r\nhi")
                .expect("read")
                .expect("a request");
        assert_eq!(
            (r.method.as_str(), r.segments.clone()),
            ("POST", vec!["api".to_owned(), "agents".into(), "k7/q".into()])
        );
        assert_eq!((r.param("token"), r.param("x"), r.header("host")), (Some("a b"), Some(""), Some("127.0.0.1:9")));
        assert_eq!(r.body, b"hi");
        assert!(read("").expect("closed").is_none());
    }

    #[test]
    fn what_is_malformed_or_too_big_is_refused_with_its_status() {
        let status = |text: &str| read(text).err().map(|Refused(s, _)| s);
        assert_eq!(status("GET /\r\n\r\n"), Some(400));
        assert_eq!(status("GET / HTTP/2\r\n\r\n"), Some(505));
        assert_eq!(status("GET / HTTP/1.1\r\nno colon\r\n\r\n"), Some(400));
        assert_eq!(status(&format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(LINE_MAX + 10))), Some(431));
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n"), Some(413));
        assert_eq!(status("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"), Some(411));
        assert_eq!(status("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nab"), Some(400));
        assert_eq!(decode("%zz%4"), "%zz%4");
    }

    #[test]
    fn a_request_that_drips_in_slower_than_its_deadline_is_cut_off() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let dripping = std::thread::spawn(move || {
            let mut peer = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
            for byte in b"GET / HTTP/1.1\r\n" {
                if std::io::Write::write_all(&mut peer, &[*byte]).is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let (stream, _) = listener.accept().expect("accept");
        let started = std::time::Instant::now();
        let until = started + std::time::Duration::from_millis(300);
        let read = read_request(&mut std::io::BufReader::new(Deadline { stream, until }));
        assert!(matches!(read, Err(Refused(408, _))), "{read:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let _ = dripping.join();
    }
}
