use serde_json::json;

use crate::cli::{CliError, Ctx};

/// The git remotes this workspace shares agents through (scale-out: a remote is any git
/// server speaking the smart protocol — `git://`, `ssh://`, `https://` — or a path)
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Args {
    /// Add a remote
    Add {
        /// Its name (as git's remote names go)
        name: String,
        /// Where it is: `git://host/repo.git`, `ssh://…`, `https://…`, `user@host:path` or a path
        url: String,
    },
    /// List the remotes: name and URL
    List,
    /// Remove a remote (nothing on it changes)
    Remove {
        /// Its name
        name: String,
    },
}

/// What is wrong with `url` as a remote's URL, if anything.
pub(crate) fn url_problem(url: &str) -> Option<String> {
    if let Some(problem) = infra::git::transport::problem(url) {
        return Some(format!("cannot be reached: {problem}"));
    }
    url_form(url).map(str::to_owned)
}

fn url_form(url: &str) -> Option<&'static str> {
    if url.trim().is_empty() || url.trim() != url || url.chars().any(char::is_control) {
        return Some("must be a URL or path without spaces around it or control characters");
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "git" | "ssh" | "http" | "https" | "file") {
            return Some("must use git://, ssh://, http://, https:// or file://, or be a path or user@host:path");
        }
        let authority = rest.split('/').next().unwrap_or("");
        // A password in the URL would be kept in the workspace's config and shown by `list`.
        if authority.rsplit_once('@').is_some_and(|(user, _)| user.contains(':')) {
            return Some("may not hold a password (`user:password@`): use ssh keys or a credential helper");
        }
        if scheme != "file" && authority.is_empty() {
            return Some("has no host");
        }
    }
    None
}

pub(crate) fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let git = |e: infra::git::GitError| CliError::runtime_from(e);
    match args {
        Args::Add { name, url } => {
            if !infra::git::valid_remote_name(name) {
                return Err(CliError::usage(format!(
                    "remote name `{name}` is not one git takes, or has a `/` (e.g. `origin`, `fleet`)"
                )));
            }
            if let Some(problem) = url_problem(url) {
                return Err(CliError::usage(format!("remote URL `{url}` {problem}")));
            }
            if ws.repo.remotes().map_err(git)?.iter().any(|(n, _)| n == name) {
                return Err(CliError::usage(format!("remote `{name}` exists already"))
                    .hint(format!("`offshoot remote remove {name}` first to point it elsewhere")));
            }
            ws.repo.add_remote(name, url).map_err(git)?;
            ctx.out.progress(&format!("· added remote `{name}`: {url}"));
        }
        Args::List => {
            for (name, url) in ws.repo.remotes().map_err(git)? {
                let url = infra::git::remote::shown_url(&url);
                if ctx.out.json {
                    ctx.out.event(&json!({"name": name, "url": url}));
                } else {
                    ctx.out.line(&format!("{name}\t{url}"));
                }
            }
        }
        Args::Remove { name } => {
            if !ws.repo.remotes().map_err(git)?.iter().any(|(n, _)| n == name) {
                return Err(
                    CliError::usage(format!("there is no remote `{name}`")).hint("`offshoot remote list` lists them")
                );
            }
            // Mirrors first: a remove killed between the two is done again in full.
            engine::fleet::remote::forget_mirrors(&ws, name).map_err(super::sync::error)?;
            ws.repo.remove_remote(name).map_err(git)?;
            ctx.out.progress(&format!("· removed remote `{name}` (nothing on it changed)"));
        }
    }
    Ok(())
}
