//! Traces out over OTLP/HTTP (protobuf), for whatever observability stack the user runs
//! (Jaeger, Tempo, Honeycomb, Phoenix…). The engine makes each span whole — its ids
//! derived from the agents, so a driver relaunched after a crash or a child in its own
//! process continues the same trace — and hands it here; a thread of the exporter's own
//! sends them in batches through `opentelemetry-otlp`'s exporter. Sending never waits:
//! a span that finds the queue full is dropped and counted, and a collector out of
//! reach is one failure kept for the caller to say once, not an error per step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter};

/// How many spans wait at most; past that, a span is dropped (and counted).
const QUEUE: usize = 4096;
/// The most spans one request carries.
const BATCH: usize = 512;
/// How long a batch waits for more spans after its first.
const LINGER: Duration = Duration::from_millis(200);
/// How long one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    #[error("the OTLP endpoint `{endpoint}` is not a URL this exporter takes: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("`OTEL_EXPORTER_OTLP_PROTOCOL={0}` is not supported here (only `http/protobuf`)")]
    Protocol(String),
    #[error("cannot start the trace exporter: {0}")]
    Start(String),
}

/// Where traces go and as what, from the standard variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Headers every request carries (`OTEL_EXPORTER_OTLP_HEADERS`: `k=v,k2=v2`).
    pub headers: Vec<(String, String)>,
    /// `service.name` (`OTEL_SERVICE_NAME`, else `offshoot`).
    pub service: String,
}

impl Settings {
    /// The settings `var` gives (a variable's value by name): on when
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT` names a
    /// collector (or `endpoint`, a config's, does), unless `OTEL_TRACES_EXPORTER` is
    /// `none` or `OTEL_SDK_DISABLED` is `true`. `None`: off.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        endpoint: Option<&str>,
    ) -> Result<Option<Settings>, OtelError> {
        let set = |name: &str| var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let signal = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base = set("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| endpoint.map(str::to_owned));
        let endpoint = match (signal, base) {
            // The signal's own URL is taken as it is; a base gets the signal's path.
            (Some(url), _) => url,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            let endpoint = crate::git::transport::shown(&endpoint);
            return Err(OtelError::Endpoint { endpoint, reason: "it must start with http:// or https://".into() });
        }
        let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
        if let Some(protocol) = protocol.filter(|p| p != "http/protobuf") {
            return Err(OtelError::Protocol(protocol));
        }
        let headers = set("OTEL_EXPORTER_OTLP_TRACES_HEADERS").or_else(|| set("OTEL_EXPORTER_OTLP_HEADERS"));
        Ok(Some(Settings {
            endpoint,
            headers: headers.map(|h| parse_headers(&h)).unwrap_or_default(),
            service: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "offshoot".into()),
        }))
    }
}

impl Settings {
    /// The endpoint fit to show (a password or token in it left out).
    pub fn shown_endpoint(&self) -> String {
        crate::git::transport::shown(&self.endpoint)
    }
}

/// The values of headers written as `OTEL_EXPORTER_OTLP_HEADERS` writes them: each is a
/// secret of its own (a collector's key), whatever the others are.
pub fn header_values(text: &str) -> Vec<String> {
    parse_headers(text).into_iter().map(|(_, v)| v).collect()
}

/// `k=v,k2=v2`, each part percent-decoded, as the OTLP exporter specification writes
/// headers; a part without `=` is passed over.
fn parse_headers(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| (crate::words::percent_decoded(k.trim()), crate::words::percent_decoded(v.trim())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Strs(Vec<String>),
}

/// What happened at one moment of a span.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: String,
    pub at: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
}

/// One span, made whole by its caller.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace: [u8; 16],
    pub id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    /// A call out of the process (a model's) rather than work inside it.
    pub client: bool,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Value)>,
    pub events: Vec<Event>,
    /// Ended in an error: its words.
    pub error: Option<String>,
}

/// What the exporter's thread and its owner share.
#[derive(Default)]
struct Shared {
    /// Spans dropped: the queue full, or their export failed.
    dropped: AtomicU64,
    /// The first export that failed, in words; taken once by [`Exporter::failure`].
    failure: Mutex<Option<String>>,
    /// Whether a failure was ever kept (so it is said once).
    failed: AtomicU64,
    /// Spans queued, and of those, the ones whose export was tried (sent or not).
    queued: AtomicU64,
    tried: AtomicU64,
}

/// Spans on their way to a collector.
pub struct Exporter {
    queue: Option<SyncSender<Span>>,
    shared: Arc<Shared>,
}

impl Exporter {
    /// Starts the thread that sends to the collector `settings` names.
    pub fn start(settings: &Settings) -> Result<Exporter, OtelError> {
        // reqwest's TLS takes the process's rustls provider: ring, as for MCP's servers.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let headers = settings.headers.iter().cloned().collect();
        let mut otlp = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_endpoint(settings.endpoint.clone())
            .with_headers(headers)
            .with_timeout(EXPORT_TIMEOUT)
            // (One attempt: a batch a collector refused is counted, not retried while
            // the run waits for it at its end.)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| OtelError::Start(e.to_string()))?;
        let resource = opentelemetry_sdk::Resource::builder_empty().with_service_name(settings.service.clone()).build();
        otlp.set_resource(&resource);
        let (queue, spans) = std::sync::mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("otel-export".into())
            .spawn(move || {
                send_all(&otlp, &spans, &theirs);
                let _ = otlp.shutdown();
            })
            .map_err(|e| OtelError::Start(e.to_string()))?;
        Ok(Exporter { queue: Some(queue), shared })
    }

    /// Queues `span` to be sent; never waits (a full queue drops it, counted).
    pub fn send(&self, span: Span) {
        let Some(queue) = &self.queue else { return };
        match queue.try_send(span) {
            Ok(()) => {
                self.shared.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// How many spans were dropped so far (queue full, or their export failed).
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Why sending failed, the first time it did; `None` after that, or while it works.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().ok()?.take()
    }

    /// Waits up to `within` for what is queued to be sent (not at all once sending has
    /// failed: the collector is out of reach); the exporter goes on. What came of it:
    /// the spans dropped since the last flush (a span still waiting counts as dropped,
    /// as the process may end).
    pub fn flush(&self, within: Duration) -> Finished {
        let shared = &self.shared;
        let until = Instant::now() + within;
        let pending = || shared.queued.load(Ordering::Relaxed) > shared.tried.load(Ordering::Relaxed);
        while pending() && shared.failed.load(Ordering::Relaxed) == 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        // (A span still waiting when the time is up is counted: the process may end now.
        // Should the run go on and send it after all, it was counted once too many.)
        let untried = shared.queued.load(Ordering::Relaxed).saturating_sub(shared.tried.load(Ordering::Relaxed));
        let dropped = shared.dropped.swap(0, Ordering::Relaxed) + untried;
        Finished { dropped, failure: self.failure() }
    }
}

impl Drop for Exporter {
    /// Closes the queue: the thread sends what is left and ends (or ends with the process).
    fn drop(&mut self) {
        self.queue = None;
    }
}

/// What a flush came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// Spans dropped (queue full, or their export failed).
    pub dropped: u64,
    /// Why sending failed, if it did and was not said yet.
    pub failure: Option<String>,
}

/// The exporter thread: batches of what comes, until the queue closes.
fn send_all(otlp: &opentelemetry_otlp::SpanExporter, spans: &Receiver<Span>, shared: &Shared) {
    let scope = InstrumentationScope::builder("offshoot").with_version(env!("CARGO_PKG_VERSION")).build();
    let mut closed = false;
    while !closed {
        let Ok(first) = spans.recv() else { break };
        let mut batch = vec![span_data(first, &scope)];
        let until = Instant::now() + LINGER;
        while batch.len() < BATCH {
            match spans.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(span) => batch.push(span_data(span, &scope)),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        let count = batch.len() as u64;
        let exported = futures_executor::block_on(otlp.export(batch));
        shared.tried.fetch_add(count, Ordering::Relaxed);
        if let Err(e) = exported {
            shared.dropped.fetch_add(count, Ordering::Relaxed);
            if shared.failed.fetch_add(1, Ordering::Relaxed) == 0
                && let Ok(mut failure) = shared.failure.lock()
            {
                *failure = Some(e.to_string());
            }
        }
    }
}

fn span_data(span: Span, scope: &InstrumentationScope) -> SpanData {
    let attributes = |list: Vec<(&'static str, Value)>| list.into_iter().map(|(k, v)| key_value(k, v)).collect();
    let mut events = SpanEvents::default();
    for event in span.events {
        events.events.push(opentelemetry::trace::Event::new(event.name, event.at, attributes(event.attributes), 0));
    }
    let status = match span.error {
        Some(words) => Status::error(words),
        None => Status::Ok,
    };
    SpanData {
        span_context: SpanContext::new(
            TraceId::from_bytes(span.trace),
            SpanId::from_bytes(span.id),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        ),
        parent_span_id: span.parent.map_or(SpanId::INVALID, SpanId::from_bytes),
        parent_span_is_remote: false,
        span_kind: if span.client { SpanKind::Client } else { SpanKind::Internal },
        name: span.name.into(),
        start_time: span.start,
        end_time: span.end,
        attributes: attributes(span.attributes),
        dropped_attributes_count: 0,
        events,
        links: Default::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

fn key_value(key: &'static str, value: Value) -> KeyValue {
    match value {
        Value::Str(s) => KeyValue::new(key, s),
        Value::Int(i) => KeyValue::new(key, i),
        Value::Float(f) => KeyValue::new(key, f),
        Value::Bool(b) => KeyValue::new(key, b),
        Value::Strs(list) => KeyValue::new(
            key,
            opentelemetry::Value::Array(opentelemetry::Array::String(list.into_iter().map(Into::into).collect())),
        ),
    }
}

/// The first `N` bytes of the SHA-256 of `parts` joined by NUL: an id made the same
/// wherever it is made again.
pub fn derived_id<const N: usize>(parts: &[&str]) -> [u8; N] {
    let digest = ring::digest::digest(&ring::digest::SHA256, parts.join("\0").as_bytes());
    let mut id = [0u8; N];
    id.copy_from_slice(&digest.as_ref()[..N]);
    // (An id of all zeros is no id in OpenTelemetry.)
    if id.iter().all(|b| *b == 0) {
        id[N - 1] = 1;
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| (*v).to_owned())
    }

    #[test]
    fn the_standard_variables_turn_it_on_and_say_where_and_how() {
        assert_eq!(Settings::from_vars(vars(&[]), None).expect("ok"), None, "off by default");
        let on = Settings::from_vars(
            vars(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=ab%3Dc, other = 2,broken"),
                ("OTEL_SERVICE_NAME", "agents"),
            ]),
            None,
        )
        .expect("ok")
        .expect("on");
        assert_eq!(on.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(on.headers, [("x-honeycomb-team".to_owned(), "ab=c".to_owned()), ("other".into(), "2".into())]);
        assert_eq!(on.service, "agents");
        // The signal's own URL as it is, over the base.
        let signal = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9/traces"),
        ]);
        assert_eq!(Settings::from_vars(signal, None).expect("ok").expect("on").endpoint, "http://b:9/traces");
        // A config's endpoint, unless the variables say otherwise.
        assert_eq!(
            Settings::from_vars(vars(&[]), Some("http://c:4318")).expect("ok").expect("on").endpoint,
            "http://c:4318/v1/traces"
        );
        let none = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"), ("OTEL_TRACES_EXPORTER", "none")]);
        assert_eq!(Settings::from_vars(none, None).expect("ok"), None);
        let grpc = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4317"), ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert!(matches!(Settings::from_vars(grpc, None), Err(OtelError::Protocol(p)) if p == "grpc"));
        let bad = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")]);
        assert!(matches!(Settings::from_vars(bad, None), Err(OtelError::Endpoint { .. })));
        // A password in the URL is never shown.
        let secret = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:supersecretpassw0rd@c:4318")]);
        let shown = Settings::from_vars(secret, None).expect("ok").expect("on").shown_endpoint();
        assert!(!shown.contains("supersecretpassw0rd"), "{shown}");
        let bad = vars(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://u:supersecretpassw0rd@c")]);
        let said = Settings::from_vars(bad, None).expect_err("not http").to_string();
        assert!(!said.contains("supersecretpassw0rd"), "{said}");
    }

    #[test]
    fn derived_ids_are_stable_and_never_zero() {
        let a: [u8; 16] = derived_id(&["trace", "root1", "2026-12-07T00:00:00Z"]);
        assert_eq!(a, derived_id::<16>(&["trace", "root1", "2026-12-07T00:00:00Z"]));
        assert_ne!(a, derived_id::<16>(&["trace", "root2", "2026-12-07T00:00:00Z"]));
        assert!(derived_id::<8>(&["span"]).iter().any(|b| *b != 0));
    }
}
