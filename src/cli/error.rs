//! `CliError`: what the user reads when a verb fails, with its exit code and hints.
//! Every library error is turned into words here, once.

use domain::id::IdError;
use engine::agents::AgentError;
use engine::agents::lifecycle::LifecycleError;
use engine::agents::runtime::RuntimeError;
use engine::ops::inspect::InspectError;
use engine::ops::project::ProjectError;
use engine::step::driver::DriverError;
use engine::step::model::ModelError;
use engine::store::workspace::WorkspaceError;
use infra::provider::StreamError;
use infra::provider::transport::CallError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Bad input: usage or validation (exit 2).
    Usage,
    /// The world failed us (exit 1).
    Runtime,
    /// Stopped by a signal (exit 128 + the signal: 130 for Ctrl-C, 143 for `stop`).
    Signal(i32),
}

#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    pub(crate) hints: Vec<String>,
}

impl CliError {
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError { kind: Kind::Usage, message: message.into(), hints: Vec::new() }
    }

    pub(crate) fn runtime(message: impl Into<String>) -> CliError {
        CliError { kind: Kind::Runtime, message: message.into(), hints: Vec::new() }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> CliError {
        self.hints.push(hint.into());
        self
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self.kind {
            Kind::Usage => 2,
            Kind::Runtime => 1,
            Kind::Signal(signal) => 128 + signal,
        }
    }
}

impl From<WorkspaceError> for CliError {
    fn from(e: WorkspaceError) -> Self {
        match &e {
            WorkspaceError::NotEmpty(_) => {
                CliError::usage(e.to_string()).hint("give a new or empty directory (or leave `-w` out)")
            }
            WorkspaceError::NotAWorkspace(path) => {
                CliError::usage(e.to_string()).hint(format!("`offshoot new {}` makes one there", path.display()))
            }
            WorkspaceError::NoLineage { known, .. } => {
                let first = known.first().map(String::as_str).unwrap_or("default");
                CliError::usage(e.to_string()).hint(format!("`--lineage {first}` uses an existing one"))
            }
            WorkspaceError::Config(_) => CliError::usage(e.to_string())
                .hint("`offshoot config edit` opens the config to fix it; `offshoot config validate` checks it"),
            WorkspaceError::ConfigKey { .. } => CliError::usage(e.to_string()),
            _ => CliError::runtime(e.to_string()),
        }
    }
}

impl From<IdError> for CliError {
    fn from(e: IdError) -> Self {
        CliError::usage(e.to_string())
    }
}

impl From<AgentError> for CliError {
    fn from(e: AgentError) -> Self {
        match e {
            AgentError::Workspace(w) => w.into(),
            AgentError::Unknown(_) => {
                CliError::usage(e.to_string()).hint("`offshoot ls` lists the agents of this workspace")
            }
            AgentError::Sandbox { ref role, .. } => CliError::usage(e.to_string()).hint(sandbox_hint(role)),
            AgentError::NameTaken(..)
            | AgentError::BranchTaken(..)
            | AgentError::NameIsId(..)
            | AgentError::Ambiguous { .. }
            | AgentError::TooDeep { .. }
            | AgentError::CompactorRole
            | AgentError::Looser(_)
            | AgentError::UnknownRole { .. }
            | AgentError::EmptyMessage
            | AgentError::BadModel(_)
            | AgentError::UnknownRef(_)
            | AgentError::Id(_)
            | AgentError::Snapshot(_) => CliError::usage(e.to_string()),
            _ => CliError::runtime(e.to_string()),
        }
    }
}

impl From<ModelError> for CliError {
    fn from(e: ModelError) -> Self {
        match &e {
            ModelError::MissingKey { var, .. } => CliError::usage(e.to_string())
                .hint(format!("export {var}=… and try again; keys are read only from the environment")),
            ModelError::UnknownRole { .. } => CliError::usage(e.to_string()),
            ModelError::Call(call) => call_error(call, e.to_string(), None),
            ModelError::Recording { .. } => CliError::runtime(e.to_string()),
        }
    }
}

/// The hint for a failed call; `at` (agent, step) when the call's record was kept.
fn call_error(call: &CallError, message: String, at: Option<(&str, u32)>) -> CliError {
    let err = CliError::runtime(message);
    match call {
        CallError::Status { status: 401 | 403, .. } => {
            err.hint("the provider refused the API key; check the variable the provider's `api_key_env` names")
        }
        CallError::Status { status: 400 | 404 | 422, .. } => {
            let err = err.hint("the provider refused the request");
            match at {
                Some((id, step)) => {
                    err.hint(format!("`offshoot show {id} --step {step} --request` prints what was sent"))
                }
                None => err,
            }
        }
        CallError::Status { attempts, .. }
        | CallError::Connect { attempts, .. }
        | CallError::Stream { attempts, .. }
            if *attempts > 1 =>
        {
            err.hint(format!("gave up after {attempts} attempts; `retry.max_attempts` in the config sets how many"))
        }
        CallError::Connect { .. } => err.hint("check the provider's `base_url` (or its `base_url_env` variable)"),
        CallError::Stream { source: StreamError::Reported { kind, .. }, .. }
            if kind.contains("quota") || kind.contains("billing") =>
        {
            err.hint(
                "the provider's account is out of quota or credit: check its plan and billing (retrying will not help)",
            )
        }
        CallError::Truncated { .. } => err.hint("nothing was committed; raise the role's `max_output_tokens`"),
        CallError::Stream { source: StreamError::Malformed(_), .. } => err.hint(
            "the server does not speak the provider's protocol (asking again would not help): check that its `base_url` is an API of the provider's `protocol`",
        ),
        _ => err,
    }
}

impl From<DriverError> for CliError {
    fn from(e: DriverError) -> Self {
        match e {
            DriverError::Model { id, role, step, source: ModelError::Call(CallError::Truncated { output_tokens }) } => {
                let more = output_tokens.unwrap_or(16_000).saturating_mul(2);
                CliError::runtime(format!(
                    "step {step} of agent `{id}` failed: {}",
                    CallError::Truncated { output_tokens }
                ))
                .hint(format!(
                    "`offshoot config set roles.{role}.max_output_tokens {more}` raises the limit, then `offshoot run {id}` asks again"
                ))
                .hint(format!("nothing of it was committed; `offshoot show {id} --step {step}` shows the step's record"))
            }
            DriverError::Model { id, step, source: ModelError::Call(call), .. } => {
                let message = format!("step {step} of agent `{id}` failed: {call}");
                call_error(&call, message, Some((&id, step)))
            }
            DriverError::Model { id, step, source, .. } => {
                let base: CliError = source.into();
                CliError { message: format!("step {step} of agent `{id}` failed: {}", base.message), ..base }
            }
            DriverError::Workspace(w) => w.into(),
            DriverError::Unknown(_) => CliError::usage(e.to_string()),
            DriverError::Interrupted { ref id, reason } => CliError {
                kind: Kind::Signal(reason.signal()),
                message: e.to_string(),
                hints: vec![format!(
                    "everything up to the cut is committed (the call it cut short is answered as {}); `offshoot run {id}` continues it",
                    reason.words()
                )],
            },
            DriverError::Exhausted { ref id, ref spend } => {
                let raise: Vec<String> = domain::budget::raised(spend)
                    .into_iter()
                    .map(|(key, value)| format!("budgets.{key} {value}"))
                    .collect();
                let err = CliError::runtime(e.to_string());
                if raise.is_empty() {
                    err.hint(format!(
                        "`offshoot config edit` changes the budgets; then `offshoot run {id}` (or a message) goes on"
                    ))
                } else {
                    err.hint(format!(
                        "`offshoot config set {}` raises the limit; then `offshoot run {id}` (or a message) goes on",
                        raise.join(" ")
                    ))
                }
            }
            DriverError::ContextFull { ref id, ref role, .. } => CliError::runtime(e.to_string()).hint(format!(
                "`offshoot compact {id}` replaces its older steps with a summary, then `offshoot run {id}` goes on; if the model takes more, raise `roles.{role}.context_window`"
            )),
            DriverError::Conflicted { ref id, ref path, .. } => CliError::runtime(e.to_string()).hint(format!(
                "no compactor writes one (`write_summary` refuses markers): `{path}` was changed on the branch `agents/{id}` by hand; fix it there with a commit, then `offshoot run {id}`"
            )),
            DriverError::Damaged { ref id, .. } => {
                let hint = format!("its branch `agents/{id}` was changed by hand; other agents are not affected");
                CliError::runtime(e.to_string()).hint(hint)
            }
            DriverError::RoleGone { .. } => CliError::usage(e.to_string()),
            DriverError::Sandbox { ref role, .. } => CliError::usage(e.to_string()).hint(sandbox_hint(role)),
            _ => CliError::runtime(e.to_string()),
        }
    }
}

impl From<ProjectError> for CliError {
    fn from(e: ProjectError) -> Self {
        match e {
            ProjectError::Agent(a) => a.into(),
            ProjectError::Workspace(w) => w.into(),
            ProjectError::NoCommits(_) => CliError::usage(e.to_string())
                .hint("commit once in it (`git commit --allow-empty -m start` will do), or give `-w` for a workspace of its own"),
            ProjectError::NotFastForward { ref branch, .. } => CliError::usage(e.to_string()).hint(format!(
                "`--force` moves `{branch}` anyway (its commits stay in the project's reflog), or `--branch` names another"
            )),
            ProjectError::Conflicts { .. } => CliError::usage(e.to_string())
                .hint("nothing was changed; commit or stash your changes to those files, or take the work with `offshoot export`"),
            ProjectError::NotProject
            | ProjectError::UnknownBase(_)
            | ProjectError::NoBase(_)
            | ProjectError::BadBranch(_)
            | ProjectError::CheckedOut(_) => CliError::usage(e.to_string()),
            _ => CliError::runtime(e.to_string()),
        }
    }
}

/// What to do when a role's sandbox cannot be enforced here.
pub(crate) fn sandbox_hint(role: &str) -> String {
    format!(
        "`offshoot config set roles.{role}.sandbox none` runs its tools without Landlock (the file tools' path rules still apply)"
    )
}

impl From<LifecycleError> for CliError {
    fn from(e: LifecycleError) -> Self {
        CliError::runtime(e.to_string())
    }
}

impl From<RuntimeError> for CliError {
    fn from(e: RuntimeError) -> Self {
        CliError::runtime(e.to_string())
    }
}

impl From<InspectError> for CliError {
    fn from(e: InspectError) -> Self {
        match e {
            InspectError::Agent(a) => a.into(),
            InspectError::Workspace(w) => w.into(),
            InspectError::NoStep { .. } => CliError::usage(e.to_string()),
            _ => CliError::runtime(e.to_string()),
        }
    }
}
