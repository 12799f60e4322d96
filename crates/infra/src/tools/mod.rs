//! The built-in tools. A tool gets a working directory and its input and returns
//! output; it never touches the transcript. Descriptions live in `templates/tools/`.

mod apply_patch;
mod bash;
mod cd;
mod edit_file;
mod glob;
mod grep;
mod paths;
mod read_file;
mod write_file;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::door::{Beneath, DoorError, Kind};
use super::redact::Redactor;
use super::sandbox::Jail;
pub use paths::{PathPolicy, Place, resolve};

/// What the harness tells every tool about where it runs.
#[derive(Clone, Default)]
pub struct ToolEnv {
    pub cwd: PathBuf,
    /// The agent's directory (where `.offshoot/` is); for `offshoot tool`, the cwd.
    pub root: PathBuf,
    /// How commands are started.
    pub commands: Commands,
    /// Where this call's record goes (tools that record more than their output).
    pub record: Option<RecordDir>,
    /// Where file tools may read and write; `None` for a person running a tool by hand.
    pub paths: Option<Arc<PathPolicy>>,
}

/// How a tool starts commands: their whole environment, their sandbox, how much of
/// their output to keep, and whom to tell their process group.
#[derive(Clone)]
pub struct Commands {
    pub env: Vec<(String, String)>,
    /// The jail every command runs in (none: commands run unconfined).
    pub sandbox: Option<Arc<Jail>>,
    pub head_bytes: usize,
    pub tail_bytes: usize,
    /// Bytes of each output stream kept in the record.
    pub record_max_bytes: u64,
    pub on_spawn: Option<Arc<dyn Fn(u32) + Send + Sync>>,
    /// Secret values hidden from output and records.
    pub redactor: Option<Arc<Redactor>>,
    /// The network lent to this call's command by a person's yes, though its jail
    /// denies it (see `Jail::can_lend_network`).
    pub network_lent: bool,
}

impl Default for Commands {
    fn default() -> Self {
        Commands {
            env: Vec::new(),
            sandbox: None,
            head_bytes: 2048,
            tail_bytes: 2048,
            record_max_bytes: RECORD_MAX_BYTES,
            on_spawn: None,
            redactor: None,
            network_lent: false,
        }
    }
}

/// The largest file a file tool reads, edits or patches (10 MB).
pub(super) const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// Bytes of each output stream a command's record keeps (64 MiB): enough for any
/// log worth reading, and a bound on what `yes` can do to the disk.
pub(crate) const RECORD_MAX_BYTES: u64 = 64 << 20;

/// A call's record directory, and the same path as the model is told it.
#[derive(Debug, Clone)]
pub struct RecordDir {
    pub dir: PathBuf,
    pub shown: String,
}

/// One named stream of a tool's output (bounded separately for the model).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Stream {
    pub name: &'static str,
    /// The whole stream, or its head when it was cut.
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
}

impl Stream {
    pub fn whole(name: &'static str, text: String) -> Stream {
        Stream { name, text, cut: None }
    }
}

/// What a stream kept only the head and tail of lost in between.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cut {
    pub tail: String,
    pub omitted_bytes: u64,
    pub omitted_line_breaks: u64,
    pub total_bytes: u64,
    pub total_lines: u64,
    /// Where the whole stream is recorded, as the model is told it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<String>,
    pub recorded_bytes: u64,
}

/// A tool's full, unbounded output.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ToolOutput {
    /// A first line the model always sees whole (e.g. the exit code).
    pub summary: String,
    pub streams: Vec<Stream>,
    pub is_error: bool,
    /// The working directory later calls should use (`cd`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Files for the harness's own directory (paths under `.offshoot/`), written and
    /// committed with the result: a tool never writes there itself.
    #[serde(skip)]
    pub harness_files: Vec<(String, Vec<u8>)>,
    /// Images for the model (an MCP server's), sent with the result.
    #[serde(skip)]
    pub images: Vec<crate::provider::Picture>,
}

impl ToolOutput {
    /// An output that is one line and no streams.
    pub fn summary(text: String) -> ToolOutput {
        ToolOutput { summary: text, ..ToolOutput::default() }
    }
}

/// Who must hear about a failure: the model (as an error result), or the driver.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    ToModel(String),
    #[error("{0}")]
    Fatal(String),
}

/// A tool that needs only a directory and a way to start commands (its spec and how
/// its calls may run are in the domain's tool table).
pub struct Builtin {
    pub name: &'static str,
    run: fn(&ToolEnv, &Value) -> Result<ToolOutput, ToolError>,
}

/// The tools that only need a directory and a way to start commands.
pub const BUILTINS: &[Builtin] = &[
    Builtin { name: "bash", run: bash::run },
    Builtin { name: "write_file", run: write_file::run },
    Builtin { name: "edit_file", run: edit_file::run },
    Builtin { name: "apply_patch", run: apply_patch::run },
    Builtin { name: "grep", run: grep::run },
    Builtin { name: "glob", run: glob::run },
    Builtin { name: "cd", run: cd::run },
    Builtin { name: "read_file", run: read_file::run },
];

pub fn builtin(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// Refuses arguments that are not a JSON object (a model that sent malformed JSON).
pub fn require_object(name: &str, input: &Value) -> Result<(), ToolError> {
    if input.is_object() {
        return Ok(());
    }
    Err(ToolError::ToModel(format!(
        "the arguments of this `{name}` call are not a JSON object, so nothing ran; call it again with arguments matching its schema"
    )))
}

impl Builtin {
    pub fn run(&self, env: &ToolEnv, input: &Value) -> Result<ToolOutput, ToolError> {
        require_object(self.name, input)?;
        (self.run)(env, input)
    }
}

pub fn str_arg<'a>(input: &'a Value, key: &str) -> Result<&'a str, ToolError> {
    input
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ToolError::ToModel(format!("`{key}` is required and must be a string")))
}

fn u64_arg(input: &Value, key: &str) -> Result<Option<u64>, ToolError> {
    match input.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            v.as_u64().map(Some).ok_or_else(|| ToolError::ToModel(format!("`{key}` must be a positive integer")))
        }
    }
}

/// A path argument the tool will read, resolved and checked against the policy
/// (with none — a person running a tool by hand — only resolved).
fn read_path(env: &ToolEnv, path: &str) -> Result<PathBuf, ToolError> {
    match &env.paths {
        Some(policy) => policy.read(&env.cwd, path).map_err(ToolError::ToModel),
        None => Ok(paths::resolve(&env.cwd, path)),
    }
}

/// The text of the file at `path`, read as `read_file` reads (the path rules of
/// `paths`, then the door: no link followed past resolution, no FIFO or device, at most
/// [`MAX_FILE_BYTES`]); `None` when it may not be read or is not UTF-8 text. For what
/// the harness reads of an agent's files on its behalf (context files).
pub fn read_text_as_tool(paths: &PathPolicy, cwd: &Path, path: &Path) -> Option<String> {
    let resolved = paths.read(cwd, path.to_str()?).ok()?;
    let bytes = Target::beneath(Path::new("/"), &resolved, "").ok()?.read(MAX_FILE_BYTES).ok()?;
    String::from_utf8(bytes).ok()
}

/// A file a tool reads or writes: resolved (links that exist are followed to where
/// they lead, so the policy judges the real place), checked against the policy, and
/// then reached only through the door — beneath a directory handle, no symbolic link
/// followed in any component (a dangling one, or one swapped in since), no FIFO or
/// device opened, reads bounded.
pub(super) struct Target {
    door: Beneath,
    rel: PathBuf,
    /// The path as the model gave it, for what it is told.
    shown: String,
}

impl Target {
    /// The file `path` will be read from.
    fn to_read(env: &ToolEnv, path: &str) -> Result<Target, ToolError> {
        let resolved = read_path(env, path)?;
        Target::beneath(Path::new("/"), &resolved, path)
    }

    /// The file `path` will be written to: beneath the writable root holding it.
    fn to_write(env: &ToolEnv, path: &str) -> Result<Target, ToolError> {
        let resolved = match &env.paths {
            Some(policy) => policy.write(&env.cwd, path).map_err(ToolError::ToModel)?,
            None => paths::resolve(&env.cwd, path),
        };
        let root = env
            .paths
            .as_ref()
            .and_then(|p| p.writable.iter().filter(|w| resolved.starts_with(w)).max_by_key(|w| w.as_os_str().len()))
            .map_or(Path::new("/"), PathBuf::as_path);
        Target::beneath(root, &resolved, path)
    }

    fn beneath(root: &Path, resolved: &Path, shown: &str) -> Result<Target, ToolError> {
        let rel = resolved.strip_prefix(root).map_err(|_| ToolError::ToModel(format!("`{shown}` is not a path")))?;
        let door =
            Beneath::open(root).map_err(|e| ToolError::ToModel(format!("cannot reach `{}`: {e}", root.display())))?;
        Ok(Target { door, rel: rel.to_owned(), shown: shown.to_owned() })
    }

    /// What stands there now (`None`: nothing), a link at the last component not followed.
    fn kind(&self) -> Result<Option<Kind>, ToolError> {
        self.door.kind(&self.rel).map_err(|e| self.refused("read", e))
    }

    /// The whole file, refused over `max` bytes.
    fn read(&self, max: u64) -> Result<Vec<u8>, ToolError> {
        self.door.read(&self.rel, max).map_err(|e| self.refused("read", e))
    }

    /// Writes the file (its directories made, its mode kept); a link on the way is
    /// refused, never followed.
    fn write(&self, bytes: &[u8]) -> Result<(), ToolError> {
        self.door.write(&self.rel, bytes, None, false).map_err(|e| self.refused("write", e))
    }

    fn remove(&self) -> Result<(), ToolError> {
        self.door.remove(&self.rel).map_err(|e| self.refused("delete", e))
    }

    /// What the model is told when the door refuses.
    fn refused(&self, verb: &str, e: DoorError) -> ToolError {
        let path = &self.shown;
        ToolError::ToModel(match e {
            DoorError::Symlink(at) => format!(
                "cannot {verb} `{path}`: it passes through the symbolic link `{}`, and file tools never follow one; nothing was {}",
                at.display(),
                match verb {
                    "write" => "written",
                    "delete" => "deleted",
                    _ => "read",
                }
            ),
            DoorError::NotRegular(_) => format!("cannot {verb} `{path}`: it is not a regular file"),
            DoorError::NotADirectory(_) => {
                format!("cannot {verb} `{path}`: a part of its path is a file, not a directory")
            }
            DoorError::TooLarge { size, max, .. } => format!("`{path}` is {size} bytes, over the {max}-byte limit"),
            e if e.is_not_found() => format!("cannot {verb} `{path}`: there is no such file"),
            e => format!("cannot {verb} `{path}`: {e}"),
        })
    }
}
