//! `[telemetry]`: where traces go when the standard variables do not say.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `[telemetry]`: traces to a collector (the standard `OTEL_*` variables win over it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector's base URL, as `OTEL_EXPORTER_OTLP_ENDPOINT` takes it
    /// (`http://localhost:4318`: traces go to its `/v1/traces`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Message content (answers, tool calls' input and results, requests' messages) in
    /// spans, redacted, as `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`
    /// asks.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub capture_content: bool,
}
