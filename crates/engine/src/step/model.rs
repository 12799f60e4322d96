//! Model calls: which provider a role uses (with its key and base URL from the
//! environment the cli read), and one call through the right adapter.

use crate::Cause;
use domain::step::Sent;
use std::collections::HashMap;
use std::time::Duration;

use crate::Env;
use domain::config::{Config, ProviderConfig};
use infra::git::CommitId;
use infra::provider::transport::{CallError, HttpSettings, Observer, RetryPolicy, Transport};
use infra::provider::{
    Decoder, Output, Protocol, Request, WireRequest, anthropic, command, openai_chat, openai_responses, replay,
};

use crate::store::workspace::Workspace;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("role `{role}` does not exist in config lineage `{lineage}`; its roles: {}", known.join(", "))]
    UnknownRole { role: String, lineage: String, known: Box<[String]> },
    #[error("provider `{provider}` needs an API key in `{var}`, which is not set")]
    MissingKey { provider: String, var: String },
    #[error("the recording `{path}` of provider `{provider}` cannot be used: {reason}")]
    Recording {
        provider: String,
        path: String,
        #[source]
        reason: Cause,
    },
    #[error(transparent)]
    Call(#[from] CallError),
}

impl ModelError {
    /// Whether the answer was cut off at the output limit.
    pub(crate) fn is_truncated(&self) -> bool {
        matches!(self, ModelError::Call(CallError::Truncated { .. }))
    }

    /// Whether the provider was down past the retries ([`CallError::is_outage`]).
    pub(crate) fn is_outage(&self) -> bool {
        matches!(self, ModelError::Call(e) if e.is_outage())
    }
}

/// Everything needed to call one role's model, resolved and checked.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) provider: String,
    pub(crate) config: ProviderConfig,
    pub(crate) base_url: Option<String>,
    api_key: Option<String>,
    pub(crate) model: String,
    pub(crate) retry: RetryPolicy,
    /// The environment of a `command` adapter (the user's own; it may need keys).
    command_env: Vec<(String, String)>,
}

/// Resolves `role` under `config`, failing before any call if a key is missing.
pub fn plan(config: &Config, lineage: &str, role: &str, env: &Env) -> Result<Plan, ModelError> {
    let unknown = || ModelError::UnknownRole {
        role: role.to_owned(),
        lineage: lineage.to_owned(),
        known: config.roles.keys().filter(|r| *r != domain::grant::COMPACTOR).cloned().collect::<Vec<_>>().into(),
    };
    let r = config.role(role).ok_or_else(unknown)?;
    let p = config.providers.get(&r.provider).ok_or_else(unknown)?;
    let api_key = match &p.api_key_env {
        Some(var) => Some(
            env.get(var)
                .ok_or_else(|| ModelError::MissingKey { provider: r.provider.clone(), var: var.clone() })?
                .to_owned(),
        ),
        None => None,
    };
    let base_url = p.base_url_env.as_deref().and_then(|v| env.get(v)).map(str::to_owned).or_else(|| p.base_url.clone());
    let command_env = match p.protocol {
        Protocol::Command => env.vars().map(|(k, v)| (k.to_owned(), v.to_owned())).collect(),
        _ => Vec::new(),
    };
    Ok(Plan {
        command_env,
        provider: r.provider.clone(),
        config: p.clone(),
        base_url,
        api_key,
        model: r.model.clone(),
        retry: RetryPolicy {
            max_attempts: config.retry.max_attempts,
            initial_backoff: Duration::from_millis(config.retry.initial_backoff_ms),
            max_backoff: Duration::from_millis(config.retry.max_backoff_ms),
            patience: Duration::from_secs(config.retry.patience_secs),
        },
    })
}

/// Calls models, keeping HTTP connections and parsed recordings between steps.
#[derive(Default)]
pub struct Client {
    transports: HashMap<String, Transport>,
    recordings: HashMap<(CommitId, String), Vec<Output>>,
}

/// The body a provider of `config` is sent for `request`: the wire body over HTTP, the
/// canonical JSON a `command` adapter reads; none for a replay. What `show --request`
/// prints and a step record keeps the digest of.
pub(crate) fn sent_body(config: &domain::config::ProviderConfig, request: &Request) -> Option<Vec<u8>> {
    match config.protocol {
        Protocol::Anthropic => Some(anthropic::encode(request, None).body),
        Protocol::OpenaiChat => {
            let field = config.max_tokens_field.as_deref().unwrap_or("max_completion_tokens");
            Some(openai_chat::encode(request, None, field).body)
        }
        Protocol::OpenaiResponses => Some(openai_responses::encode(request, None).body),
        Protocol::Command => Some(command::body(request)),
        Protocol::Replay => None,
    }
}

impl Client {
    /// Calls the model of `plan` with `request`; `sent` is told what went out (its
    /// size and digest) before the first attempt.
    pub fn call(
        &mut self,
        ws: &Workspace,
        config_commit: CommitId,
        plan: &Plan,
        request: &Request,
        observer: &mut dyn Observer,
        sent: &mut Option<Sent>,
    ) -> Result<Output, ModelError> {
        let key = plan.api_key.as_deref();
        let (wire, decoder): (WireRequest, fn() -> Box<dyn Decoder>) = match plan.config.protocol {
            Protocol::Anthropic => (anthropic::encode(request, key), || Box::<anthropic::StreamDecoder>::default()),
            Protocol::OpenaiChat => {
                let field = plan.config.max_tokens_field.as_deref().unwrap_or("max_completion_tokens");
                (openai_chat::encode(request, key, field), || Box::<openai_chat::StreamDecoder>::default())
            }
            Protocol::OpenaiResponses => {
                (openai_responses::encode(request, key), || Box::<openai_responses::StreamDecoder>::default())
            }
            Protocol::Replay => {
                let outputs = self.recording(ws, config_commit, plan)?;
                return Ok(replay::call(outputs, request, observer)?);
            }
            Protocol::Command => {
                let body = command::body(request);
                *sent = Some(Sent { bytes: body.len() as u64, sha256: infra::provider::digest(&body) });
                let argv = plan.config.command.clone().unwrap_or_default();
                let program = command::Program {
                    argv: &argv,
                    cwd: ws.layout.root(),
                    env: &plan.command_env,
                    idle: Duration::from_secs(plan.config.idle_timeout_secs.max(1)),
                };
                return Ok(command::call(&program, request, observer)?);
            }
        };
        *sent = Some(Sent { bytes: wire.body.len() as u64, sha256: infra::provider::digest(&wire.body) });
        let base_url = plan.base_url.clone().unwrap_or_default();
        let settings = HttpSettings {
            base_url: base_url.clone(),
            idle_timeout: Duration::from_secs(plan.config.idle_timeout_secs.max(1)),
            call_timeout: Duration::from_secs(plan.config.call_timeout_secs.max(1)),
            connect_timeout: Duration::from_secs(10),
            retry: plan.retry.clone(),
        };
        let cache_key =
            format!("{base_url}|{}|{}|{:?}", plan.config.idle_timeout_secs, plan.config.call_timeout_secs, plan.retry);
        let transport = self.transports.entry(cache_key).or_insert_with(|| Transport::new(settings));
        Ok(transport.call(&wire, &decoder, observer)?)
    }

    fn recording(&mut self, ws: &Workspace, at: CommitId, plan: &Plan) -> Result<&[Output], ModelError> {
        let path = plan.config.recording.clone().unwrap_or_default();
        let key = (at, path.clone());
        if !self.recordings.contains_key(&key) {
            let fail = |reason: crate::Cause| ModelError::Recording {
                provider: plan.provider.clone(),
                path: path.clone(),
                reason,
            };
            let bytes = ws
                .config_file(at, &path)
                .map_err(|e| fail(e.into()))?
                .ok_or_else(|| fail("it is not in the config tree".into()))?;
            let outputs = replay::parse(&String::from_utf8_lossy(&bytes)).map_err(|r| fail(r.into()))?;
            self.recordings.insert(key.clone(), outputs);
        }
        Ok(self.recordings.get(&key).map(Vec::as_slice).unwrap_or_default())
    }
}

/// What the agent at `tip` asks of its model's thinking: what the user asked for it
/// (`.offshoot/reasoning`), else its role's.
pub(crate) fn reasoning_at(
    repo: &infra::git::Repo,
    tip: infra::git::CommitId,
    role: &domain::config::RoleConfig,
) -> Result<Option<infra::provider::Reasoning>, infra::git::GitError> {
    let asked = repo.read_file(tip, domain::agent::REASONING)?;
    Ok(asked.and_then(|b| domain::agent::parse_reasoning(&String::from_utf8_lossy(&b))).or_else(|| role.reasoning()))
}
