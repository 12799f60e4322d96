//! Starting a root agent on a goal, as `offshoot prompt` does: everything it asks for is
//! checked before anything is made (the role, its key, the thinking asked, where in the
//! project it starts, the ignored paths it copies), then the agent is made and either
//! left for the caller to drive or handed to a remote's workers.

use std::path::PathBuf;

use domain::id::AgentId;
use infra::git::{GitError, UserRepo};
use infra::provider::Reasoning;
use infra::time::Timestamp;

use crate::Env;
use crate::agents::{self, AgentError, ProjectStart, Start};
use crate::fleet::remote::{self, Remote, RemoteError};
use crate::ops::project::{self, ProjectError};
use crate::step::model::{self, ModelError};
use crate::store::warm;
use crate::store::workspace::{ConfigFiles, Workspace, WorkspaceError, validate_files};

/// `offshoot prompt`, resolved.
pub struct Prompt<'a> {
    /// The goal: its first message.
    pub message: &'a str,
    pub name: Option<&'a str>,
    pub role: &'a str,
    pub lineage: &'a str,
    /// In a project: the revision to start from (HEAD when `None`), and whether the
    /// uncommitted changes of the user's working tree go along.
    pub base: Option<&'a str>,
    pub with_changes: bool,
    /// The user's git config files: who authors the commit of work taken along.
    pub git_config: &'a [PathBuf],
    /// Ignored paths of the user's checkout copied into its directory.
    pub copy_ignored: &'a [String],
    /// A model in place of its role's, and thinking asked of it.
    pub model: Option<&'a str>,
    pub reasoning: Option<Reasoning>,
    /// The permission mode to run in, in place of the role's.
    pub mode: Option<domain::config::Mode>,
    /// What the run does when a call needs a yes.
    pub on_ask: Option<domain::question::OnAsk>,
    /// The remote whose workers drive it instead of this machine.
    pub on: Option<&'a str>,
    pub env: &'a Env,
}

/// An agent started.
pub struct Prompted {
    pub id: AgentId,
    /// In a project: where it started, and the uncommitted changes left behind.
    pub start: Option<(ProjectStart, Vec<String>)>,
    /// The ignored paths being copied into its directory.
    pub copied: Vec<String>,
    /// Whether the project's commit had a `.offshoot/` of its own, left out of the
    /// agent's tree (only the harness writes there).
    pub left_out_harness_dir: bool,
    /// The remote it was handed to; `None`: it is the caller's to drive.
    pub handed: Option<Remote>,
}

#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("role `{role}` cannot be asked for {asked:?}: {rule}")]
    Reasoning { role: String, asked: Reasoning, rule: String },
    #[error("model `{model}` has no price, and budgets.max_cost_usd caps what its calls cost")]
    Unpriced { model: String },
    #[error("`{pattern}` {problem}")]
    CopyIgnored { pattern: String, problem: String },
    #[error("copying ignored paths is for a project: there is no checkout to copy from")]
    CopyIgnoredOutsideProject,
    #[error("cannot read the ignored files of your checkout: {0}")]
    CopyIgnoredUnread(#[source] GitError),
    /// The first path that cannot be copied, and the paths the checkout ignores.
    #[error("`{path}` {why}")]
    NotCopied { path: String, why: String, ignored: Vec<String> },
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    Workspace(#[from] WorkspaceError),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Project(#[from] ProjectError),
    #[error(transparent)]
    Agent(#[from] AgentError),
}

type Result<T> = std::result::Result<T, PromptError>;

/// Starts a root agent as `p` says, in `ws`.
pub fn start(ws: &Workspace, p: &Prompt) -> Result<Prompted> {
    let fleet = p.on.map(|name| remote::resolve(ws, Some(name))).transpose()?;
    let (_, config) = ws.config(p.lineage)?;
    // A missing key or an unknown role is refused before anything is created (and so
    // is a sandbox this kernel cannot enforce, by `create_root`).
    runnable(&config, p)?;
    // Work taken along is the user's own commit, authored as git would author it.
    let author = ws.user_repo()?.and_then(|u| u.identity(p.git_config));
    let start = project::start_point(ws, p.base, p.with_changes, author.as_ref())?;
    let copied = copyable(ws, p.copy_ignored)?;
    let left_out_harness_dir = match &start {
        Some((s, _)) => ws.repo.entry_id(s.base, domain::agent::DIR).map_err(WorkspaceError::from)?.is_some(),
        None => false,
    };
    let spawn = Start {
        message: p.message,
        name: p.name,
        now: Timestamp::now(),
        random: crate::random_u32(),
        env: p.env,
        project: start.as_ref().map(|(s, _)| s),
        model: p.model,
        reasoning: p.reasoning.as_ref(),
        copy_ignored: p.copy_ignored,
        mode: p.mode,
        on_ask: p.on_ask,
    };
    let id = agents::create_root(ws, p.role, p.lineage, &spawn)?;
    if let Some(remote) = &fleet
        && let Err(e) = remote::hand_over(ws, remote, &id)
    {
        // Refused there: nothing of it stays here.
        agents::discard(ws, &id);
        return Err(e.into());
    }
    Ok(Prompted { id, start, copied, left_out_harness_dir, handed: fleet })
}

/// Refuses `p` in a workspace not made yet, which would start from the config `files`
/// in the user's repository `user` (a project) — before the workspace is made, so
/// a refused first prompt leaves nothing behind.
pub fn check_unmade(files: &ConfigFiles, user: Option<&UserRepo>, p: &Prompt) -> Result<()> {
    if p.lineage != "default" {
        let known = vec!["default".to_owned()];
        return Err(WorkspaceError::NoLineage { lineage: p.lineage.to_owned(), known }.into());
    }
    let config = validate_files(files).map_err(WorkspaceError::from)?;
    runnable(&config, p)?;
    let Some(user) = user else {
        return match p.base.is_some() || p.with_changes {
            true => Err(ProjectError::NotProject.into()),
            false => Ok(()),
        };
    };
    match p.base {
        Some(rev) if user.resolve(rev).is_none() => Err(ProjectError::UnknownBase(rev.to_owned()).into()),
        None if user.head().map_err(ProjectError::from)?.is_none() => {
            Err(ProjectError::NoCommits(user.root().display().to_string()).into())
        }
        _ => Ok(()),
    }
}

/// Whether `config` can run `p`'s role as asked: the role, its key, the thinking.
fn runnable(config: &domain::config::Config, p: &Prompt) -> Result<()> {
    let plan = model::plan(config, p.lineage, p.role, p.env)?;
    // A cost limit is never passed unknowingly: a model without a price is refused.
    let model = p.model.unwrap_or(&plan.model);
    if domain::budget::caps_cost(&config.budgets) && !config.prices.contains_key(model) {
        return Err(PromptError::Unpriced { model: model.to_owned() });
    }
    if let Some(asked) = &p.reasoning {
        config.check_reasoning(p.role, asked).map_err(|rule| PromptError::Reasoning {
            role: p.role.to_owned(),
            asked: asked.clone(),
            rule,
        })?;
    }
    Ok(())
}

/// The ignored paths of the user's checkout `patterns` names, when every one can be
/// copied (a plain relative path, in a project, ignored there, no workspace's).
fn copyable(ws: &Workspace, patterns: &[String]) -> Result<Vec<String>> {
    if patterns.is_empty() {
        return Ok(Vec::new());
    }
    for pattern in patterns {
        if let Some(problem) = domain::agent::copy_ignored_problem(pattern) {
            return Err(PromptError::CopyIgnored { pattern: pattern.clone(), problem: problem.to_string() });
        }
    }
    let user = ws.user_repo()?.ok_or(PromptError::CopyIgnoredOutsideProject)?;
    let (chosen, refused) = warm::select(&user, patterns).map_err(PromptError::CopyIgnoredUnread)?;
    if let Some((path, why)) = refused.into_iter().next() {
        let ignored = user.ignored_paths().unwrap_or_default();
        return Err(PromptError::NotCopied { path, why: why.to_string(), ignored });
    }
    Ok(chosen)
}
