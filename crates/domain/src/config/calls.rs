//! How model calls are made: each provider's endpoint and timeouts, and how calls
//! are retried.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use infra::provider::Protocol;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    pub protocol: Protocol,
    /// Where the API lives (HTTP protocols).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// An environment variable that, when set, overrides `base_url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url_env: Option<String>,
    /// The environment variable holding the API key; keys are never written in config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// `replay`: the recording's path inside the config tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording: Option<String>,
    /// `command`: the program and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Seconds a stream may stay silent before the attempt counts as failed.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_secs: u64,
    /// Seconds one attempt may take in all, from its connection to its stream's end,
    /// however steadily the server keeps sending (HTTP protocols); then it counts as
    /// failed and is retried.
    #[serde(default = "default_call_timeout")]
    pub call_timeout_secs: u64,
    /// `openai-chat`: the request field carrying the output limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_field: Option<String>,
}

fn default_idle_timeout() -> u64 {
    120
}

fn default_call_timeout() -> u64 {
    1800
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    #[serde(default = "default_max_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_initial_backoff")]
    pub initial_backoff_ms: u64,
    #[serde(default = "default_max_backoff")]
    pub max_backoff_ms: u64,
    /// Seconds a call keeps trying through faults worth retrying (a provider down,
    /// overloaded, rate-limited, unreachable): no attempt starts once this long has
    /// passed since its first began.
    #[serde(default = "default_patience")]
    pub patience_secs: u64,
}

fn default_max_attempts() -> u32 {
    30
}
fn default_patience() -> u64 {
    600
}
fn default_initial_backoff() -> u64 {
    500
}
fn default_max_backoff() -> u64 {
    30_000
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig { max_attempts: 30, initial_backoff_ms: 500, max_backoff_ms: 30_000, patience_secs: 600 }
    }
}
