//! Dynamic shell completion: the shell asks the binary (`COMPLETE=<shell> offshoot --
//! <words>`), which completes verbs and flags from the command definition and agent
//! arguments from the agents of the workspace the words name.

use std::path::PathBuf;

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};

use engine::agents;
use engine::store::workspace::Workspace;

use super::Ctx;

/// The completer of every argument that names an agent (id or name).
pub(crate) fn agents_completer() -> ArgValueCandidates {
    ArgValueCandidates::new(agent_candidates)
}

/// Every agent's id and name in the workspace being completed in; nothing when there is
/// none (completing never creates a workspace).
fn agent_candidates() -> Vec<CompletionCandidate> {
    let ctx = Ctx::from_env(workspace_in_words(), false);
    let Ok(ws) = Workspace::open(&ctx.workspace_path()) else { return Vec::new() };
    let Ok(list) = agents::list(&ws) else { return Vec::new() };
    let mut out = Vec::new();
    for l in list {
        let name = l.facts.and_then(|f| f.name);
        out.push(CompletionCandidate::new(l.id.as_str()).help(name.clone().map(Into::into)));
        if let Some(name) = name {
            out.push(CompletionCandidate::new(name).help(Some(l.id.to_string().into())));
        }
    }
    out
}

/// The workspace the words being completed give with `-w`/`--workspace`, else the one
/// `OFFSHOOT_WORKSPACE` names.
fn workspace_in_words() -> Option<PathBuf> {
    // (The line being completed comes after the `--` the shell's script passes.)
    let words: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let line = match words.iter().position(|w| w == "--") {
        Some(at) => words[at + 1..].to_vec(),
        None => words,
    };
    workspaces_in(line).pop().or_else(workspace_from_env)
}

/// Every workspace `words` (a command line after the program) give with `-w` or
/// `--workspace`, in order, wherever they are (before `--`). (clap keeps a global
/// option's values of one level only: `-w A serve -w B` parses as `-w B`.)
pub(crate) fn workspaces_in(words: Vec<std::ffi::OsString>) -> Vec<PathBuf> {
    let mut given = Vec::new();
    let mut words = words.into_iter();
    while let Some(word) = words.next() {
        let Some(w) = word.to_str() else { continue };
        if w == "--" {
            break;
        }
        if w == "-w" || w == "--workspace" {
            given.extend(words.next().map(PathBuf::from));
        } else if let Some(path) = w.strip_prefix("--workspace=").or(w.strip_prefix("-w=")) {
            given.push(PathBuf::from(path));
        } else if let Some(path) = w.strip_prefix("-w").filter(|p| !p.is_empty()) {
            given.push(PathBuf::from(path));
        }
    }
    given
}

/// The workspace `OFFSHOOT_WORKSPACE` names (an empty value names none).
pub(crate) fn workspace_from_env() -> Option<PathBuf> {
    std::env::var_os("OFFSHOOT_WORKSPACE").filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The script that registers dynamic completion for `shell` (what `COMPLETE=<shell>
/// offshoot` prints).
pub(crate) fn registration(shell: &str, buf: &mut dyn std::io::Write) -> std::io::Result<()> {
    let shells = clap_complete::env::Shells::builtins();
    let Some(completer) = shells.completer(shell) else {
        return Err(std::io::Error::other(format!("no dynamic completion for `{shell}`")));
    };
    let bin = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("offshoot"));
    let bin = bin.to_string_lossy();
    completer.write_registration("COMPLETE", "offshoot", "offshoot", &bin, buf)
}

/// Answers a completion request when the shell made this call (`COMPLETE` is set), and
/// exits; returns at once otherwise.
pub(crate) fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(<super::Cli as clap::CommandFactory>::command).complete();
}
