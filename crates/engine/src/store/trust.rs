//! Which project files the user trusted (`offshoot config trust`), as the workspace
//! keeps them: `trust/<file>.json` with the digest of the content trusted — the file and
//! every file of the checkout its hooks name. A file whose digest changed is not trusted
//! until trusted again. Read from the user's checkout, never from an agent's directory.

use std::path::Path;

use serde::{Deserialize, Serialize};

use domain::config::Config;
use domain::trust::{self, Carried};
use infra::time::Timestamp;

use crate::store::workspace::Workspace;

/// Whether a file's content is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Standing {
    Trusted,
    /// Trusted once, changed since.
    Changed,
    /// Never trusted.
    New,
}

/// A project file that may carry hooks and rules, as it is now.
#[derive(Debug, Clone, Serialize)]
pub struct ProjectFile {
    pub path: String,
    /// The digest of the file and the files its hooks name.
    pub digest: String,
    /// Files of the checkout its hooks name (trusted with it).
    pub named: Vec<String>,
    pub standing: Standing,
    /// What it says, or why it does not read.
    #[serde(skip)]
    pub carried: Result<Carried, String>,
}

#[derive(Serialize, Deserialize)]
struct Record {
    path: String,
    digest: String,
    at: String,
}

/// The project files of `ws`'s checkout (none outside project mode), with their standing.
pub fn found(ws: &Workspace) -> Vec<ProjectFile> {
    let Ok(Some(user)) = ws.user_repo() else { return Vec::new() };
    let root = user.root().to_owned();
    trust::FILES.iter().filter_map(|path| project_file(ws, &root, path)).collect()
}

fn project_file(ws: &Workspace, root: &Path, path: &str) -> Option<ProjectFile> {
    let bytes = std::fs::read(root.join(path)).ok()?;
    let carried = trust::read(path, &bytes);
    let root_text = root.display().to_string();
    let named = carried.as_ref().map(|c| trust::named_files(&c.hooks, &root_text)).unwrap_or_default();
    // The digest covers the file, everything beside and below it (`.claude/hooks/…`,
    // whatever a hook runs from there, however its command names it) and every other
    // file of the checkout its hooks name, each by path and length.
    let dir = Path::new(path).parent().map(Path::to_owned).unwrap_or_default();
    let mut covered = vec![path.to_owned()];
    covered.extend(files_below(root, &dir));
    covered.extend(named.iter().cloned());
    covered.sort();
    covered.dedup();
    let mut all = Vec::new();
    for file in &covered {
        let at = root.join(file);
        let link = std::fs::read_link(&at).map(|t| t.display().to_string()).unwrap_or_default();
        let content = std::fs::read(&at).unwrap_or_default();
        all.extend(format!("{}:{file}\0{}:{link}\0{}:", file.len(), link.len(), content.len()).as_bytes());
        all.extend(content);
    }
    let digest = infra::git::blob_id(&all).map(|id| id.to_string()).unwrap_or_default();
    let kept: Option<Record> = std::fs::read(record_path(ws, path)).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let standing = match kept {
        Some(r) if r.digest == digest && !digest.is_empty() => Standing::Trusted,
        Some(_) => Standing::Changed,
        None => Standing::New,
    };
    Some(ProjectFile { path: path.to_owned(), digest, named, standing, carried })
}

/// The files below `dir` of the checkout at `root` (links as links), by path, at most a
/// few thousand.
fn files_below(root: &Path, dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(at) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&at)) else { continue };
        for entry in entries.flatten() {
            let rel = at.join(entry.file_name());
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(rel),
                Ok(_) => found.push(rel.display().to_string()),
                Err(_) => {}
            }
            if found.len() > 5000 {
                return found;
            }
        }
    }
    found
}

fn record_path(ws: &Workspace, path: &str) -> std::path::PathBuf {
    ws.layout.trust().join(format!("{}.json", path.replace('/', "%")))
}

/// Trusts `file` as it is now.
pub fn trust(ws: &Workspace, file: &ProjectFile) -> std::io::Result<()> {
    let record = Record { path: file.path.clone(), digest: file.digest.clone(), at: Timestamp::now().to_string() };
    let path = record_path(ws, &file.path);
    std::fs::create_dir_all(ws.layout.trust())?;
    let tmp = path.with_extension(format!("tmp{}", crate::random_u32()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&record).unwrap_or_default())?;
    std::fs::rename(&tmp, &path)
}

/// `config` with what the trusted project files of `ws` carry; the files that are
/// there and not trusted as they are now, by path.
pub fn apply(ws: &Workspace, config: &mut Config) -> Vec<String> {
    let Ok(Some(user)) = ws.user_repo() else { return Vec::new() };
    let root = user.root().display().to_string();
    let mut untrusted = Vec::new();
    for file in found(ws) {
        match (file.standing, file.carried) {
            (Standing::Trusted, Ok(carried)) => config.add_trusted(&root, &file.path, carried),
            _ => untrusted.push(file.path),
        }
    }
    untrusted
}
