//! The shared HTTP transport: POST a wire request, read its SSE stream through a
//! decoder, retry what is worth retrying, and report every attempt.

use std::io::Read;
use std::time::{Duration, Instant};

use super::{Decoder, Delta, Output, Stop, StreamError, WireRequest, sse};

/// How often and how patiently to retry.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// No attempt starts once this long has passed since the first began.
    pub patience: Duration,
}

/// Where to send and how long a silent stream may last.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    pub base_url: String,
    pub idle_timeout: Duration,
    /// The longest one attempt may take in all (a stream kept alive without end).
    pub call_timeout: Duration,
    pub connect_timeout: Duration,
    pub retry: RetryPolicy,
}

/// What one attempt came to, for the step record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptRecord {
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    pub(crate) millis: u64,
}

/// Receives everything a call produces as it happens.
pub trait Observer {
    fn attempt_started(&mut self, attempt: u32);
    /// One raw event exactly as the provider sent it (or an error body).
    fn raw(&mut self, attempt: u32, event: &sse::Event);
    fn delta(&mut self, delta: &Delta);
    fn attempt_ended(&mut self, record: &AttemptRecord);
}

#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("HTTP {status} from {url}: {body}")]
    Status { url: String, status: u16, body: String, attempts: u32, outage: bool },
    #[error("cannot reach {url}: {message}")]
    Connect { url: String, message: String, attempts: u32, outage: bool },
    #[error("{source}")]
    Stream { source: StreamError, attempts: u32, outage: bool },
    #[error("the answer was cut off at the output limit{}; a cut-off answer is never used", output_tokens.map(|n| format!(" ({n} token{})", if n == 1 { "" } else { "s" })).unwrap_or_default())]
    Truncated { output_tokens: Option<u64> },
    #[error("{0}")]
    Other(String),
}

impl CallError {
    /// Whether the call ended on a fault worth retrying that lasted past the retries
    /// (the provider down, overloaded or unreachable), not on a refusal of the request.
    pub fn is_outage(&self) -> bool {
        match self {
            CallError::Status { outage, .. } | CallError::Connect { outage, .. } | CallError::Stream { outage, .. } => {
                *outage
            }
            CallError::Truncated { .. } | CallError::Other(_) => false,
        }
    }
}

/// One failed attempt, with whether to try again and how soon the server asked.
struct Failure {
    error: CallError,
    retryable: bool,
    /// The fault says the provider is down, overloaded or unreachable for now (a 5xx,
    /// a 429, a refused or broken connection, a hung stream), not that the request,
    /// the account or the setup is wrong, nor that an answer ran past the call's
    /// deadline.
    outage: bool,
    retry_after: Option<Duration>,
    status: Option<u16>,
}

/// A reusable HTTP client (keeps connections alive between steps).
pub struct Transport {
    agent: ureq::Agent,
    settings: HttpSettings,
}

impl Transport {
    pub fn new(settings: HttpSettings) -> Transport {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(settings.connect_timeout))
            .timeout_per_read(Some(settings.idle_timeout))
            .timeout_global(Some(settings.call_timeout))
            .user_agent(concat!("offshoot/", env!("CARGO_PKG_VERSION")))
            .build();
        Transport { agent: config.into(), settings }
    }

    /// Sends `wire`, decoding with a fresh decoder per attempt, until one attempt
    /// yields a complete output or retries run out.
    pub fn call(
        &self,
        wire: &WireRequest,
        new_decoder: &dyn Fn() -> Box<dyn Decoder>,
        observer: &mut dyn Observer,
    ) -> Result<Output, CallError> {
        let url = format!("{}{}", self.settings.base_url.trim_end_matches('/'), wire.path);
        let policy = &self.settings.retry;
        // Patience counts from the first failure: time an answer spent streaming well
        // before it broke is not time the provider was down.
        let mut failing_since: Option<Instant> = None;
        let mut attempt = 0;
        loop {
            attempt += 1;
            observer.attempt_started(attempt);
            let started = Instant::now();
            let result = self.attempt(&url, wire, new_decoder(), attempt, observer);
            let mut record = AttemptRecord { attempt, status: None, error: None, retry_after_ms: None, millis: 0 };
            match result {
                Ok(output) => {
                    record.status = Some(200);
                    record.millis = started.elapsed().as_millis() as u64;
                    observer.attempt_ended(&record);
                    if output.stop == Stop::MaxTokens {
                        return Err(CallError::Truncated { output_tokens: output.usage.output });
                    }
                    return Ok(output);
                }
                Err(failure) => {
                    record.status = failure.status;
                    record.error = Some(failure.error.to_string());
                    record.millis = started.elapsed().as_millis() as u64;
                    let failing = failing_since.get_or_insert_with(Instant::now).elapsed();
                    // (A wait past the patience is cut to it: one last attempt at its end.)
                    let wait = (failure.retryable && attempt < policy.max_attempts && failing < policy.patience)
                        .then(|| backoff(policy, attempt, failure.retry_after).min(policy.patience - failing));
                    record.retry_after_ms = wait.map(|w| w.as_millis() as u64);
                    observer.attempt_ended(&record);
                    match wait {
                        Some(wait) => std::thread::sleep(wait),
                        None => return Err(given_up(failure.error, attempt, failure.outage)),
                    }
                }
            }
        }
    }

    fn attempt(
        &self,
        url: &str,
        wire: &WireRequest,
        mut decoder: Box<dyn Decoder>,
        attempt: u32,
        observer: &mut dyn Observer,
    ) -> Result<Output, Failure> {
        let mut req =
            self.agent.post(url).header("content-type", "application/json").header("accept", "text/event-stream");
        for (k, v) in &wire.headers {
            req = req.header(k, v);
        }
        let response = req.send(&wire.body[..]).map_err(|e| connect_failure(url, &e))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let retry_after = retry_after(response.headers());
            let mut body = String::new();
            let _ = response.into_body().into_reader().take(64 * 1024).read_to_string(&mut body);
            observer.raw(attempt, &sse::Event { event: format!("http-{status}"), data: body.clone() });
            // An account out of quota is told so by a 429 too: asking again cannot help.
            let quota = body.contains("insufficient_quota");
            let retryable = matches!(status, 408 | 409 | 429 | 500..=599) && !quota;
            return Err(Failure {
                outage: matches!(status, 408 | 429 | 500..=599) && !quota,
                error: CallError::Status {
                    url: url.to_owned(),
                    status,
                    body: summarize(&body),
                    attempts: 0,
                    outage: false,
                },
                retryable,
                retry_after,
                status: Some(status),
            });
        }
        let content_type =
            response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("none").to_owned();
        let mut reader = response.into_body().into_reader();
        let mut parser = sse::Parser::default();
        // How the body began, and whether any event came: a body with none is said as
        // what it is, not as a stream cut short.
        let mut head: Vec<u8> = Vec::new();
        let mut any_event = false;
        let mut buf = vec![0u8; 16 * 1024];
        let stream_failure = |source: StreamError| Failure {
            retryable: source.retryable(),
            outage: source.retryable(),
            error: CallError::Stream { source, attempts: 0, outage: false },
            retry_after: None,
            status: Some(status),
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(n) => n,
                Err(e) => {
                    return Err(Failure {
                        error: CallError::Connect {
                            url: url.to_owned(),
                            message: format!("stream broke: {e}"),
                            attempts: 0,
                            outage: false,
                        },
                        retryable: true,
                        outage: !past_deadline(&e),
                        retry_after: None,
                        status: Some(status),
                    });
                }
            };
            if head.len() < 200 {
                head.extend_from_slice(&buf[..n.min(200 - head.len())]);
            }
            let events = if n == 0 { parser_finish(&mut parser) } else { parser.push(&buf[..n]) };
            any_event |= !events.is_empty();
            for event in &events {
                observer.raw(attempt, event);
                for delta in decoder.feed(event).map_err(stream_failure)? {
                    observer.delta(&delta);
                }
            }
            if n == 0 {
                break;
            }
            if decoder.is_done() {
                // Read to the end of the body so the connection can be reused.
                let _ = std::io::copy(&mut (&mut reader).take(64 * 1024), &mut std::io::sink());
                break;
            }
        }
        match decoder.finish() {
            Err(StreamError::Incomplete) if !any_event => Err(stream_failure(StreamError::NotAStream {
                status,
                content_type,
                head: summarize(&String::from_utf8_lossy(&head)),
            })),
            other => other.map_err(stream_failure),
        }
    }
}

fn parser_finish(parser: &mut sse::Parser) -> Vec<sse::Event> {
    std::mem::take(parser).finish().into_iter().collect()
}

fn connect_failure(url: &str, e: &ureq::Error) -> Failure {
    let retryable = !matches!(e, ureq::Error::BadUri(_) | ureq::Error::Http(_));
    // Not a certificate, a proxy setting or a bad address: those stay wrong.
    let outage = match e {
        ureq::Error::Timeout(t) => *t != ureq::Timeout::Global,
        ureq::Error::Io(e) => !past_deadline(e),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        _ => false,
    };
    Failure {
        outage,
        error: CallError::Connect { url: url.to_owned(), message: e.to_string(), attempts: 0, outage: false },
        retryable,
        retry_after: None,
        status: None,
    }
}

/// Whether a read or write ended because the attempt ran past its whole deadline
/// (`call_timeout_secs`).
fn past_deadline(e: &std::io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<ureq::Error>())
        .is_some_and(|inner| matches!(inner, ureq::Error::Timeout(ureq::Timeout::Global)))
}

/// The error a call gave up with after `n` attempts, the last an `outage`.
fn given_up(error: CallError, n: u32, outage: bool) -> CallError {
    match error {
        CallError::Status { url, status, body, .. } => CallError::Status { url, status, body, attempts: n, outage },
        CallError::Connect { url, message, .. } => CallError::Connect { url, message, attempts: n, outage },
        CallError::Stream { source, .. } => CallError::Stream { source, attempts: n, outage },
        other => other,
    }
}

/// Error bodies are often JSON with a message inside; show that message.
fn summarize(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| v.pointer("/error/message").or(v.get("message")).and_then(|m| m.as_str()).map(str::to_owned));
    let text = message.unwrap_or_else(|| body.trim().to_owned());
    if text.len() > 500 { format!("{}…", &text[..text.floor_char_boundary(500)]) } else { text }
}

fn retry_after(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim);
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        return seconds(ms / 1000.0);
    }
    get("retry-after").and_then(|v| v.parse::<f64>().ok()).and_then(seconds)
}

/// A server's wait in seconds, within what we are willing to wait (`inf`, `1e30`,
/// negative and NaN included: they are clamped or ignored, never a panic).
fn seconds(s: f64) -> Option<Duration> {
    if s.is_nan() {
        return None;
    }
    Some(Duration::try_from_secs_f64(s.clamp(0.0, MAX_RETRY_AFTER.as_secs_f64())).unwrap_or(MAX_RETRY_AFTER))
}

/// The longest `retry-after` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// Exponential backoff capped at the policy's maximum, with jitter; a server's
/// `retry-after` takes precedence.
fn backoff(policy: &RetryPolicy, attempt: u32, asked: Option<Duration>) -> Duration {
    if let Some(asked) = asked {
        return asked.min(MAX_RETRY_AFTER);
    }
    let exp = policy.initial_backoff.saturating_mul(1u32 << (attempt - 1).min(16));
    let capped = exp.min(policy.max_backoff);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
    let jitter = 0.5 + f64::from(nanos % 1000) / 2000.0;
    capped.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_values_that_cannot_be_durations_are_clamped_or_ignored() {
        let header = |name: &'static str, value: &'static str| {
            let mut h = ureq::http::HeaderMap::new();
            h.insert(name, ureq::http::HeaderValue::from_static(value));
            retry_after(&h)
        };
        assert_eq!(header("retry-after", "inf"), Some(MAX_RETRY_AFTER));
        assert_eq!(header("retry-after", "1e30"), Some(MAX_RETRY_AFTER));
        assert_eq!(header("retry-after", "-5"), Some(Duration::ZERO));
        assert_eq!(header("retry-after", "NaN"), None);
        assert_eq!(header("retry-after", "2.5"), Some(Duration::from_millis(2500)));
        assert_eq!(header("retry-after-ms", "1e308"), Some(MAX_RETRY_AFTER));
        assert_eq!(header("retry-after", "Wed, 21 Oct 2026 07:28:00 GMT"), None);
    }
}
