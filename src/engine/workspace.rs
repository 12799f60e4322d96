//! Workspaces: creating one (bare repository, skeleton, first config commit),
//! opening one, and reading and writing its config lineages.

use std::path::{Path, PathBuf};

use crate::domain::agent;
use crate::domain::config::{self, Config, ConfigError};
use crate::domain::layout::Layout;
use crate::infra::git::{CommitId, GitError, Project, Repo, TreeEdit};

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("`{0}` is not empty")]
    NotEmpty(PathBuf),
    #[error("`{0}` is not an offshoot workspace (it has no repo.git)")]
    NotAWorkspace(PathBuf),
    #[error("config lineage `{0}` does not exist")]
    NoLineage(String),
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Config(#[from] ConfigError),
}

type Result<T> = std::result::Result<T, WorkspaceError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkspaceError + '_ {
    move |source| WorkspaceError::Io { path: path.to_owned(), source }
}

/// An open workspace: its layout, the harness's repository and the agents'.
pub struct Workspace {
    pub layout: Layout,
    pub repo: Repo,
    pub project: Project,
}

/// A config's skills: name → files (path inside the skill, bytes).
pub type Skills = std::collections::BTreeMap<String, Vec<(String, Vec<u8>)>>;

/// The files of a config tree: (path, bytes).
pub type ConfigFiles = Vec<(String, Vec<u8>)>;

/// The embedded default config, with any file in `override_dir` replacing the
/// embedded file of the same path (and adding new ones).
pub fn template_files(override_dir: Option<&Path>) -> Result<ConfigFiles> {
    let mut files: ConfigFiles =
        config::DEFAULT_FILES.iter().map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec())).collect();
    let Some(dir) = override_dir.filter(|d| d.is_dir()) else {
        return Ok(files);
    };
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io(&d))? {
            let path = entry.map_err(io(&d))?.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let bytes = std::fs::read(&path).map_err(io(&path))?;
            files.retain(|(p, _)| *p != rel);
            files.push((rel, bytes));
        }
    }
    files.sort();
    Ok(files)
}

/// Validates a config tree before anything is written.
pub fn validate_files(files: &ConfigFiles) -> std::result::Result<Config, ConfigError> {
    let text = files
        .iter()
        .find(|(p, _)| p == config::FILE)
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    Config::parse(&text, &|path| files.iter().any(|(p, _)| p == path))
}

impl Workspace {
    /// Creates a workspace at `root` (parents too) with `files` as the first commit
    /// of `config/default`. Refuses a non-empty target; validates before writing.
    pub fn create(root: &Path, files: &ConfigFiles) -> Result<Workspace> {
        if root.exists() && std::fs::read_dir(root).map_err(io(root))?.next().is_some() {
            return Err(WorkspaceError::NotEmpty(root.to_owned()));
        }
        validate_files(files)?;
        let existed = root.exists();
        let made = Self::lay_out(root, files);
        if made.is_err() && !existed {
            let _ = std::fs::remove_dir_all(root);
        }
        made
    }

    fn lay_out(root: &Path, files: &ConfigFiles) -> Result<Workspace> {
        let layout = Layout::new(root);
        for dir in layout.skeleton() {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let repo = Repo::init(&layout.repo())?;
        let project = init_project(&layout)?;
        let edits: Vec<TreeEdit> =
            files.iter().map(|(p, b)| TreeEdit::Write { path: p.clone(), bytes: b.clone() }).collect();
        let commit = repo.commit_edits(&[], None, &edits, "config: initial configuration")?;
        repo.create_branch("config/default", commit, "config: initial configuration")?;
        Ok(Workspace { layout, repo, project })
    }

    pub fn open(root: &Path) -> Result<Workspace> {
        let layout = Layout::new(root);
        if !layout.repo().is_dir() {
            return Err(WorkspaceError::NotAWorkspace(root.to_owned()));
        }
        let repo = Repo::open(&layout.repo())?;
        // Workspaces made before agents had their own repository get one now.
        let project =
            if layout.project().is_dir() { Project::open(&layout.project())? } else { init_project(&layout)? };
        Ok(Workspace { layout, repo, project })
    }

    /// Opens `root`, creating it first if it does not exist or is empty.
    pub fn open_or_create(root: &Path, files: &ConfigFiles) -> Result<Workspace> {
        let empty = !root.exists() || std::fs::read_dir(root).map_err(io(root))?.next().is_none();
        if empty { Self::create(root, files) } else { Self::open(root) }
    }

    pub fn config_tip(&self, lineage: &str) -> Result<CommitId> {
        self.repo.branch_tip(&format!("config/{lineage}"))?.ok_or_else(|| WorkspaceError::NoLineage(lineage.to_owned()))
    }

    /// The config of `lineage` at commit `at`, parsed and validated.
    pub fn config_at(&self, at: CommitId) -> Result<Config> {
        let text = self.config_text_at(at)?;
        let has = |path: &str| self.repo.read_file(at, path).ok().flatten().is_some();
        Ok(Config::parse(&text, &has)?)
    }

    /// The config at the tip of `lineage`, with the tip's id.
    pub fn config(&self, lineage: &str) -> Result<(CommitId, Config)> {
        let tip = self.config_tip(lineage)?;
        Ok((tip, self.config_at(tip)?))
    }

    pub fn config_text_at(&self, at: CommitId) -> Result<String> {
        let bytes = self.repo.read_file(at, config::FILE)?.unwrap_or_default();
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The skills of the config at `at`: name → files (path inside the skill, bytes).
    pub fn skills(&self, at: CommitId) -> Result<Skills> {
        let mut skills = Skills::new();
        for (path, oid) in self.repo.list_files(at, "skills")? {
            let Some((name, rel)) = path.strip_prefix("skills/").and_then(|p| p.split_once('/')) else { continue };
            let bytes = self.repo.read_blob(oid)?;
            skills.entry(name.to_owned()).or_default().push((rel.to_owned(), bytes));
        }
        Ok(skills)
    }

    pub fn config_file(&self, at: CommitId, path: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.repo.read_file(at, path)?)
    }

    /// Authors a config commit on `lineage` writing `changes`; validates the result
    /// first. `None` when nothing would change.
    pub fn commit_config(&self, lineage: &str, changes: &ConfigFiles, message: &str) -> Result<Option<CommitId>> {
        let tip = self.config_tip(lineage)?;
        let mut changed = Vec::new();
        for (path, bytes) in changes {
            if self.repo.read_file(tip, path)?.as_deref() != Some(bytes.as_slice()) {
                changed.push(TreeEdit::Write { path: path.clone(), bytes: bytes.clone() });
            }
        }
        if changed.is_empty() {
            return Ok(None);
        }
        let text = match changes.iter().find(|(p, _)| p == config::FILE) {
            Some((_, b)) => String::from_utf8_lossy(b).into_owned(),
            None => self.config_text_at(tip)?,
        };
        let has = |path: &str| {
            changes.iter().any(|(p, _)| p == path) || self.repo.read_file(tip, path).ok().flatten().is_some()
        };
        Config::parse(&text, &has)?;
        let commit = self.repo.commit_edits(&[tip], Some(tip), &changed, message)?;
        self.repo.move_branch(&format!("config/{lineage}"), commit, tip, message)?;
        Ok(Some(commit))
    }
}

fn init_project(layout: &Layout) -> Result<Project> {
    Ok(Project::init(&layout.project(), agent::DIR, &layout.repo().join("objects"))?)
}

/// Sets one dotted key in TOML text, keeping comments and layout; `value` is TOML
/// if it parses as a TOML value, else a string.
pub fn set_key(text: &str, key: &str, value: &str) -> String {
    let rendered = render_value(value);
    let (table, leaf) = match key.rsplit_once('.') {
        Some((t, l)) => (t, l),
        None => ("", key),
    };
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut current = "";
    let mut header_at = if table.is_empty() { Some(0) } else { None };
    let mut insert_at = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            if current == table && header_at.is_some() && insert_at.is_none() {
                insert_at = Some(last_content_line(&lines, header_at.unwrap_or(0), i) + 1);
            }
            current = h.trim();
            if current == table {
                header_at = Some(i + 1);
            }
            continue;
        }
        let k = t.split('=').next().unwrap_or("").trim().trim_matches('"');
        if current == table && t.contains('=') && k == leaf {
            lines[i] = format!("{leaf} = {rendered}");
            return lines.join("\n") + "\n";
        }
    }
    match (header_at, insert_at) {
        (Some(h), Some(at)) => lines.insert(at.max(h), format!("{leaf} = {rendered}")),
        (Some(h), None) => {
            let at = last_content_line(&lines, h, lines.len()) + 1;
            lines.insert(at.max(h), format!("{leaf} = {rendered}"));
        }
        (None, _) => {
            lines.push(String::new());
            lines.push(format!("[{table}]"));
            lines.push(format!("{leaf} = {rendered}"));
        }
    }
    lines.join("\n") + "\n"
}

/// The index of the last non-blank line in `lines[from..to]`, or `from - 1`.
fn last_content_line(lines: &[String], from: usize, to: usize) -> usize {
    (from..to).rev().find(|&i| !lines[i].trim().is_empty()).unwrap_or(from.saturating_sub(1))
}

fn render_value(value: &str) -> String {
    let probe = format!("v = {value}");
    if toml::from_str::<toml::Table>(&probe).is_ok() {
        value.to_owned()
    } else {
        toml::Value::String(value.to_owned()).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn set_key_edits_in_place_adds_to_tables_and_makes_new_ones() {
        let text = "# top\nversion = 1\n\n[retry]\nmax_attempts = 4\n\n[tool_output]\nhead_bytes = 1\n";
        assert_eq!(
            set_key(text, "retry.max_attempts", "7"),
            "# top\nversion = 1\n\n[retry]\nmax_attempts = 7\n\n[tool_output]\nhead_bytes = 1\n"
        );
        assert_eq!(
            set_key(text, "retry.initial_backoff_ms", "10"),
            "# top\nversion = 1\n\n[retry]\nmax_attempts = 4\ninitial_backoff_ms = 10\n\n[tool_output]\nhead_bytes = 1\n"
        );
        assert_eq!(
            set_key(text, "providers.x.base_url", "http://h:1"),
            format!("{text}\n[providers.x]\nbase_url = \"http://h:1\"\n")
        );
        assert_eq!(set_key(text, "tool_output.tail_bytes", "5"), format!("{text}tail_bytes = 5\n"));
    }
}
