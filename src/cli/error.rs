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

/// What failed, with the errors that caused it: `Display` is the message a user reads
/// first, `source()` leads down the chain.
type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug)]
pub(crate) struct CliError {
    pub(crate) kind: Kind,
    error: Cause,
    pub(crate) hints: Vec<String>,
}

/// A message of the cli's own, with no cause.
#[derive(Debug)]
struct Said(String);

impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Said {}

/// A message of the cli's own over the error it says it of.
#[derive(Debug)]
struct Context {
    message: String,
    source: Cause,
}

impl std::fmt::Display for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Context {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

impl CliError {
    fn of(kind: Kind, error: Cause) -> CliError {
        CliError { kind, error, hints: Vec::new() }
    }

    /// Bad input, said in the cli's words.
    pub(crate) fn usage(message: impl Into<String>) -> CliError {
        CliError::of(Kind::Usage, Box::new(Said(message.into())))
    }

    /// The world failed us, said in the cli's words.
    pub(crate) fn runtime(message: impl Into<String>) -> CliError {
        CliError::of(Kind::Runtime, Box::new(Said(message.into())))
    }

    /// Bad input: `error` says what, and keeps its causes.
    pub(crate) fn usage_from(error: impl std::error::Error + Send + Sync + 'static) -> CliError {
        CliError::of(Kind::Usage, Box::new(error))
    }

    /// The world failed us: `error` says how, and keeps its causes.
    pub(crate) fn runtime_from(error: impl std::error::Error + Send + Sync + 'static) -> CliError {
        CliError::of(Kind::Runtime, Box::new(error))
    }

    /// The world failed us: `error` (a cause the engine kept whole) says how.
    pub(crate) fn runtime_cause(error: Cause) -> CliError {
        CliError::of(Kind::Runtime, error)
    }

    /// Bad input said as `message`, caused by `error`.
    pub(crate) fn usage_error(
        message: impl Into<String>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> CliError {
        CliError::of(Kind::Usage, Box::new(Context { message: message.into(), source: Box::new(error) }))
    }

    /// The same error said as `message` (which says what it came of).
    pub(crate) fn reworded(self, message: impl Into<String>) -> CliError {
        CliError { error: Box::new(Context { message: message.into(), source: self.error }), ..self }
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> CliError {
        self.hints.push(hint.into());
        self
    }

    /// The message a user reads first.
    pub(crate) fn message(&self) -> String {
        self.error.to_string()
    }

    /// What caused it, outermost first, each said once: a cause whose words the message
    /// (or a cause above it) already holds is not said again.
    pub(crate) fn causes(&self) -> Vec<String> {
        let mut said = vec![self.message()];
        let mut out = Vec::new();
        let mut at = self.error.source();
        while let Some(cause) = at {
            let text = cause.to_string();
            if !text.is_empty() && !said.iter().any(|s| s.contains(&text)) {
                out.push(text.clone());
            }
            said.push(text);
            at = cause.source();
        }
        out
    }

    pub(crate) fn exit_code(&self) -> i32 {
        match self.kind {
            Kind::Usage => 2,
            Kind::Runtime => 1,
            Kind::Signal(signal) => 128 + signal,
        }
    }
}

/// A CliError of `kind` whose words are still to come: those of the error it is kept
/// with ([`keeping`]).
pub(crate) fn shell(kind: Kind) -> CliError {
    CliError::of(kind, Box::new(Said(String::new())))
}

/// `e`, as `shell` says it (its kind and hints): the error itself when the words are
/// its own, else the words over it; either way its causes are kept.
pub(crate) fn keeping(e: impl std::error::Error + Send + Sync + 'static, shell: CliError) -> CliError {
    let message = shell.message();
    let error: Cause = match message.is_empty() || message == e.to_string() {
        true => Box::new(e),
        false => Box::new(Context { message, source: Box::new(e) }),
    };
    CliError { error, ..shell }
}

impl From<WorkspaceError> for CliError {
    fn from(e: WorkspaceError) -> Self {
        let shell = match &e {
            WorkspaceError::NotEmpty(_) => shell(Kind::Usage).hint("give a new or empty directory"),
            WorkspaceError::NotAWorkspace(path) if path.exists() && !path.is_dir() => {
                return CliError::usage(format!("`{}` is a file, not a workspace", path.display()))
                    .hint("`-w` (and OFFSHOOT_WORKSPACE) names a workspace's directory");
            }
            WorkspaceError::NotAWorkspace(path) => {
                shell(Kind::Usage).hint(format!("`offshoot new {}` makes one there", path.display()))
            }
            WorkspaceError::NoLineage { known, .. } => {
                let first = known.first().map(String::as_str).unwrap_or("default");
                shell(Kind::Usage).hint(format!("`--lineage {first}` uses an existing one"))
            }
            WorkspaceError::Config(_) => shell(Kind::Usage)
                .hint("`offshoot config edit` opens the config to fix it; `offshoot config validate` checks it"),
            WorkspaceError::ConfigKey { .. } => shell(Kind::Usage),
            _ => shell(Kind::Runtime),
        };
        keeping(e, shell)
    }
}

impl From<IdError> for CliError {
    fn from(e: IdError) -> Self {
        CliError::usage_from(e)
    }
}

impl From<AgentError> for CliError {
    fn from(e: AgentError) -> Self {
        let e = match e {
            AgentError::Workspace(w) => return w.into(),
            e => e,
        };
        let shell = match &e {
            AgentError::Unknown(_) => shell(Kind::Usage).hint("`offshoot ls` lists the agents of this workspace"),
            AgentError::Sandbox { role, .. } => shell(Kind::Usage).hint(sandbox_hint(role)),
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
            | AgentError::Snapshot(_) => shell(Kind::Usage),
            _ => shell(Kind::Runtime),
        };
        keeping(e, shell)
    }
}

impl From<ModelError> for CliError {
    fn from(e: ModelError) -> Self {
        let shell = match &e {
            ModelError::MissingKey { var, .. } => shell(Kind::Usage)
                .hint(format!("export {var}=… and try again; keys are read only from the environment")),
            ModelError::UnknownRole { .. } => shell(Kind::Usage),
            ModelError::Call(call) => call_error(call, e.to_string(), None),
            ModelError::Recording { .. } => shell(Kind::Runtime),
        };
        keeping(e, shell)
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
            err.hint(format!(
                "gave up after {attempts} attempts; `retry.patience_secs` and `retry.max_attempts` in the config set how long and how many"
            ))
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
                let hinted = call_error(&call, message.clone(), Some((id.as_str(), step)));
                CliError { error: Box::new(Context { message, source: Box::new(call) }), ..hinted }
            }
            DriverError::Model { id, step, source, .. } => {
                let base: CliError = source.into();
                let message = format!("step {step} of agent `{id}` failed: {}", base.message());
                base.reworded(message)
            }
            DriverError::Workspace(w) => w.into(),
            e => driver_error(e),
        }
    }
}

/// A driver's error that is not a failed model call.
fn driver_error(e: DriverError) -> CliError {
    let shell = match &e {
            DriverError::Unknown(_) => shell(Kind::Usage),
            DriverError::NotClaimed { .. } => shell(Kind::Usage).hint(
                "`offshoot worker` here drives what it claims; to work on an agent yourself, `offshoot pull` it into another workspace",
            ),
            DriverError::Interrupted { id, reason } => CliError {
                kind: Kind::Signal(reason.signal()),
                error: Box::new(Said(String::new())),
                hints: vec![format!(
                    "everything up to the cut is committed (the call it cut short is answered as {}); `offshoot run {id}` continues it",
                    reason.words()
                )],
            },
            DriverError::Exhausted { id, spend } => {
                let raise: Vec<String> = domain::budget::raised(spend)
                    .into_iter()
                    .map(|(key, value)| format!("budgets.{key} {value}"))
                    .collect();
                let err = shell(Kind::Runtime);
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
            DriverError::ContextFull { id, role, .. } => shell(Kind::Runtime).hint(format!(
                "`offshoot compact {id}` replaces its older steps with a summary, then `offshoot run {id}` goes on; if the model takes more, raise `roles.{role}.context_window`"
            )),
            DriverError::Conflicted { id, path, .. } => shell(Kind::Runtime).hint(format!(
                "no compactor writes one (`write_summary` refuses markers): `{path}` was changed on the branch `agents/{id}` by hand; fix it there with a commit, then `offshoot run {id}`"
            )),
            DriverError::Damaged { id, .. } => {
                let hint = format!("its branch `agents/{id}` was changed by hand; other agents are not affected");
                shell(Kind::Runtime).hint(hint)
            }
            DriverError::RoleGone { .. } => shell(Kind::Usage),
            DriverError::Sandbox { role, .. } => shell(Kind::Usage).hint(sandbox_hint(role)),
            _ => shell(Kind::Runtime),
    };
    keeping(e, shell)
}

impl From<ProjectError> for CliError {
    fn from(e: ProjectError) -> Self {
        let e = match e {
            ProjectError::Agent(a) => return a.into(),
            ProjectError::Workspace(w) => return w.into(),
            e => e,
        };
        let shell = match &e {
            ProjectError::NoCommits(_) => shell(Kind::Usage)
                .hint("commit once in it (`git commit --allow-empty -m start` will do), or give `-w` for a workspace of its own"),
            ProjectError::NotFastForward { branch, .. } => shell(Kind::Usage).hint(format!(
                "`--force` moves `{branch}` anyway (its commits stay in the project's reflog), or `--branch` names another"
            )),
            ProjectError::Conflicts { .. } => shell(Kind::Usage)
                .hint("nothing was changed; commit or stash your changes to those files, or take the work with `offshoot export`"),
            ProjectError::NotProject
            | ProjectError::UnknownBase(_)
            | ProjectError::NoBase(_)
            | ProjectError::BadBranch(_)
            | ProjectError::CheckedOut(_) => shell(Kind::Usage),
            _ => shell(Kind::Runtime),
        };
        keeping(e, shell)
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
        CliError::runtime_from(e)
    }
}

impl From<RuntimeError> for CliError {
    fn from(e: RuntimeError) -> Self {
        CliError::runtime_from(e)
    }
}

impl From<InspectError> for CliError {
    fn from(e: InspectError) -> Self {
        match e {
            InspectError::Agent(a) => a.into(),
            InspectError::Workspace(w) => w.into(),
            e @ InspectError::NoStep { .. } => CliError::usage_from(e),
            e => CliError::runtime_from(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error whose words leave out what caused it, or (`whole`) already say it.
    #[derive(Debug)]
    struct Read {
        whole: bool,
        source: std::io::Error,
    }

    impl std::fmt::Display for Read {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self.whole {
                true => write!(f, "cannot read the config: {}", self.source),
                false => f.write_str("cannot read the config"),
            }
        }
    }

    impl std::error::Error for Read {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    fn terse(source: std::io::Error) -> Read {
        Read { whole: false, source }
    }

    fn whole(source: std::io::Error) -> Read {
        Read { whole: true, source }
    }

    fn denied() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied")
    }

    #[test]
    fn a_cause_is_said_once_and_only_when_the_message_leaves_it_out() {
        let said = CliError::runtime_from(terse(denied()));
        assert_eq!(
            (said.message(), said.causes()),
            ("cannot read the config".into(), vec!["permission denied".into()])
        );
        let full = CliError::runtime_from(whole(denied()));
        assert_eq!(full.message(), "cannot read the config: permission denied");
        assert!(full.causes().is_empty());
        // The cli's words over an error keep it, and its cause, below them.
        let worded = CliError::runtime_from(terse(denied())).reworded("step 2 of agent `a` failed");
        assert_eq!(worded.causes(), ["cannot read the config", "permission denied"]);
        assert_eq!(worded.exit_code(), 1);
    }

    #[test]
    fn an_error_said_in_its_own_words_keeps_its_kind_and_hints() {
        let kept = keeping(terse(denied()), shell(Kind::Usage).hint("fix it"));
        assert_eq!(
            (kept.message(), kept.exit_code(), kept.hints.clone()),
            ("cannot read the config".into(), 2, vec!["fix it".into()])
        );
        assert_eq!(kept.causes(), ["permission denied"]);
    }
}
