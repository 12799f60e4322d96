//! The typed `offshoot.toml`, its validation (errors name file, line and key) and
//! its JSON Schema. A config is one commit of a `config/<lineage>` branch: this
//! file plus `souls/<role>.md` and `skills/<name>/`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::grant::{self, Holder};

mod calls;
mod mcp;
mod telemetry;
mod validate;

pub use calls::{ProviderConfig, RetryConfig};
pub use mcp::{McpServer, STARTUP_TIMEOUT_SECS, TOOL_TIMEOUT_SECS, check_server_name, check_servers};
pub use telemetry::TelemetryConfig;

pub const FILE: &str = "offshoot.toml";

/// The embedded default config tree: (path, contents).
pub const DEFAULT_FILES: &[(&str, &str)] = &[
    (FILE, include_str!("../../../../templates/default/offshoot.toml")),
    ("souls/worker.md", include_str!("../../../../templates/default/souls/worker.md")),
    ("souls/openai.md", include_str!("../../../../templates/default/souls/openai.md")),
    ("souls/compactor.md", include_str!("../../../../templates/default/souls/compactor.md")),
    ("skills/offshoot/SKILL.md", include_str!("../../../../templates/default/skills/offshoot/SKILL.md")),
];

/// The whole of `offshoot.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Format version; must be 1.
    pub(crate) version: u32,
    /// Model endpoints by name.
    #[serde(default)]
    pub providers: BTreeMap<String, ProviderConfig>,
    /// What agents can be configured as, by name.
    #[serde(default)]
    pub roles: BTreeMap<String, RoleConfig>,
    #[serde(default)]
    pub compaction: CompactionConfig,
    #[serde(default)]
    pub budgets: BudgetConfig,
    /// List prices by model name, for `budgets.max_cost_usd` and the costs `tree`
    /// shows.
    #[serde(default)]
    pub prices: BTreeMap<String, Price>,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub tool_output: ToolOutputConfig,
    #[serde(default)]
    pub tool_env: ToolEnvConfig,
    #[serde(default)]
    pub(crate) git: GitConfig,
    /// MCP servers whose tools agents may use, by name (the tools are offered as
    /// `mcp__<server>__<tool>`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Rules every role's tool calls are held to (`allow`, `ask`, `deny`, in Claude
    /// Code's syntax: `bash(git push:*)`, `Read(./.env)`); a role's own add to them.
    #[serde(default, skip_serializing_if = "is_default")]
    pub permissions: crate::permissions::Permissions,
    /// The user's programs run at events of every agent's life (`[[hooks.PreToolUse]]`
    /// with `matcher`, `command`, `timeout`), in Claude Code's wire format.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: crate::hooks::Hooks,
    /// Where traces of every agent go (OpenTelemetry, OTLP over HTTP) when the standard
    /// variables do not say. A machine's own setting: a fleet worker keeps its own over
    /// a remote's, as it does its providers.
    #[serde(default, skip_serializing_if = "is_default")]
    pub telemetry: TelemetryConfig,
    /// What project files the user trusted add (`offshoot config trust`): never read
    /// from `offshoot.toml`, set by the engine for a project's agents.
    #[serde(skip)]
    #[schemars(skip)]
    pub project: Option<Project>,
}

/// The trusted part of a project: where its checkout is (its hooks' `CLAUDE_PROJECT_DIR`)
/// and the rules of each trusted file (their hooks are in `hooks`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Project {
    pub root: String,
    pub permissions: Vec<(String, crate::permissions::Permissions)>,
}

impl Config {
    /// Adds what the trusted project `file` carries: its hooks after the config's own,
    /// its rules as a set of their own (named by the file).
    pub fn add_trusted(&mut self, root: &str, file: &str, carried: crate::trust::Carried) {
        for (event, groups) in carried.hooks {
            self.hooks.entry(event).or_default().extend(groups);
        }
        let project = self.project.get_or_insert_with(|| Project { root: root.to_owned(), ..Project::default() });
        project.permissions.push((file.to_owned(), carried.permissions));
    }
}

fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// Adjustments to the environment tool commands run with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolEnvConfig {
    /// Variables whose names look secret (`*KEY*`, `*TOKEN*`, …) that tools may
    /// still see; a provider's `api_key_env` can never be kept.
    #[serde(default)]
    pub(crate) keep: Vec<String>,
    /// Variables set for every tool command (last, over everything else).
    #[serde(default)]
    pub(crate) set: BTreeMap<String, String>,
    /// Paths no sandboxed command and no file tool reads, whatever the role (credential
    /// stores: `~` is the user's home); a role reads one it lists in its `read_paths`.
    #[serde(default = "default_hidden_paths")]
    pub hidden_paths: Vec<String>,
}

/// The credential stores kept from tools when the config does not list its own.
pub const HIDDEN_PATHS: &[&str] = &[
    "~/.ssh",
    "~/.aws",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker/config.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/gh",
    "~/.gnupg",
    "~/.cargo/credentials.toml",
];

fn default_hidden_paths() -> Vec<String> {
    HIDDEN_PATHS.iter().map(|p| (*p).to_owned()).collect()
}

impl Default for ToolEnvConfig {
    fn default() -> Self {
        ToolEnvConfig { keep: Vec::new(), set: BTreeMap::new(), hidden_paths: default_hidden_paths() }
    }
}

/// The identity agents commit under in their own repository.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct GitConfig {
    /// Default: the agent's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    /// Default: `<name>@offshoot.invalid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) email: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoleConfig {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    #[serde(default = "default_max_output")]
    pub max_output_tokens: u32,
    /// The tools this role may run (its grant).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Rules of this role's own, on top of `[permissions]`.
    #[serde(default, skip_serializing_if = "is_default")]
    pub permissions: crate::permissions::Permissions,
    #[serde(default)]
    pub context: ContextRules,
    /// How far this role's agents go without a yes: `read-only`, `ask`,
    /// `workspace-write` (the default) or `full` (no sandbox, as `sandbox = "none"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// How this role's tool commands are confined.
    #[serde(default)]
    pub sandbox: Sandbox,
    /// With `sandbox = "workspace-write"`: whether tool commands may reach the
    /// network (`false`: no socket of theirs leaves the sandbox).
    #[serde(default = "yes")]
    pub network: bool,
    /// Absolute paths outside the agent's directory its tools may also write.
    #[serde(default)]
    pub write_paths: Vec<String>,
    /// Paths of `tool_env.hidden_paths` its tools may read all the same (`~/.aws` for a
    /// role that deploys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_paths: Vec<String>,
    /// At most this many processes at once in one command's tree.
    #[serde(default = "default_max_processes")]
    pub max_processes: u64,
    /// No file a command writes may grow past this many bytes.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// Work products larger than this many bytes stay on disk but out of the agent's
    /// history.
    #[serde(default = "default_max_commit_file_bytes")]
    pub max_commit_file_bytes: u64,
    /// Anthropic's extended thinking: at most this many tokens of it before each answer
    /// (1,024 or more, and under `max_output_tokens`, which counts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) thinking_budget: Option<u32>,
    /// OpenAI's reasoning effort (Chat Completions and Responses): `minimal`, `low`,
    /// `medium` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reasoning_effort: Option<String>,
    /// The MCP servers whose tools this role gets (default: every server; the
    /// compactor never gets any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mcp_servers: Option<Vec<String>>,
    /// In a project: ignored paths of the user's checkout (plain relative paths, such
    /// as `target` or `web/node_modules`) copied into a new agent's directory, so its
    /// first build is warm. Never in its history.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copy_ignored: Vec<String>,
}

impl Config {
    /// Whether role `role` can ask its model for `reasoning`: a thinking budget of
    /// Anthropic's (1,024 or more, under the role's output limit) or an effort of
    /// OpenAI's (`minimal`, `low`, `medium`, `high`), each only of a provider that speaks it.
    pub fn check_reasoning(&self, role: &str, reasoning: &infra::provider::Reasoning) -> Result<(), String> {
        use infra::provider::Protocol::{Anthropic, OpenaiChat, OpenaiResponses};
        use infra::provider::Reasoning;
        let Some(r) = self.role(role) else { return Err(format!("role `{role}` does not exist")) };
        let protocol = self.providers.get(&r.provider).map(|p| p.protocol);
        match reasoning {
            Reasoning::ThinkingBudget(budget) => {
                if protocol != Some(Anthropic) {
                    return Err(format!(
                        "is Anthropic's extended thinking; provider `{}` does not speak it (OpenAI's is `reasoning_effort`)",
                        r.provider
                    ));
                }
                if *budget < 1024 || *budget >= r.max_output_tokens {
                    return Err(format!(
                        "must be 1024 or more and under `max_output_tokens` ({})",
                        r.max_output_tokens
                    ));
                }
            }
            Reasoning::Effort(effort) => {
                if !matches!(protocol, Some(OpenaiChat | OpenaiResponses)) {
                    return Err(format!(
                        "is OpenAI's reasoning effort; provider `{}` does not speak it (Anthropic's is `thinking_budget`)",
                        r.provider
                    ));
                }
                if !["minimal", "low", "medium", "high"].contains(&effort.as_str()) {
                    return Err(format!("`{effort}` is not one of minimal, low, medium, high"));
                }
            }
        }
        Ok(())
    }
}

impl RoleConfig {
    /// What the role asks of the model's thinking, as a request carries it.
    pub fn reasoning(&self) -> Option<infra::provider::Reasoning> {
        use infra::provider::Reasoning;
        self.thinking_budget
            .map(Reasoning::ThinkingBudget)
            .or_else(|| self.reasoning_effort.clone().map(Reasoning::Effort))
    }
}

fn yes() -> bool {
    true
}

fn default_max_processes() -> u64 {
    1024
}

fn default_max_file_bytes() -> u64 {
    1 << 30
}

fn default_max_commit_file_bytes() -> u64 {
    100 << 20
}

/// How tool commands are confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Sandbox {
    /// Full access: commands run unconfined, as you, and may read and write
    /// whatever you can (your keys and other agents included). Said at every start.
    None,
    /// The default: commands run in namespaces of their own under Landlock; writes
    /// only in the agent's directory, its git, its temporary directory and
    /// `write_paths`; no reads of the workspace's internals, other agents or other
    /// workspaces; no access to the driver.
    #[default]
    WorkspaceWrite,
}

/// A permission mode: how far an agent goes without a person's yes. Ordered from the
/// most confined; a child runs in the most confined of its own and its ancestors'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Reads and searches only: no file tool writes, commands run with nothing
    /// writable but the agent's temporary directory.
    ReadOnly,
    /// Every command and every file write needs a yes, but what an allow rule names;
    /// reads and searches do not ask.
    Ask,
    /// No questions inside the sandbox (the default).
    WorkspaceWrite,
    /// No sandbox: commands run as you (`sandbox = "none"`).
    Full,
}

impl Mode {
    pub const ALL: [Mode; 4] = [Mode::ReadOnly, Mode::Ask, Mode::WorkspaceWrite, Mode::Full];

    pub fn word(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::Ask => "ask",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::Full => "full",
        }
    }

    /// `text` as a mode; what the modes are otherwise.
    pub fn parse(text: &str) -> Result<Mode, String> {
        Mode::ALL.into_iter().find(|m| m.word() == text.trim()).ok_or_else(|| {
            let all: Vec<&str> = Mode::ALL.iter().map(|m| m.word()).collect();
            format!("`{text}` is not a mode (modes: {})", all.join(", "))
        })
    }
}

impl RoleConfig {
    /// The role's mode: as set, else what its sandbox says.
    pub fn mode(&self) -> Mode {
        self.mode.unwrap_or(match self.sandbox {
            Sandbox::None => Mode::Full,
            Sandbox::WorkspaceWrite => Mode::WorkspaceWrite,
        })
    }

    /// The role run in `mode` (a run's `--mode`, or the meet with an ancestor's): `full`
    /// drops the sandbox, any other keeps it.
    pub fn in_mode(mut self, mode: Mode) -> RoleConfig {
        self.mode = Some(mode);
        self.sandbox = if mode == Mode::Full { Sandbox::None } else { Sandbox::WorkspaceWrite };
        self
    }
}

fn default_max_output() -> u32 {
    16_000
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextRules {
    /// Globs over the agent tree, always composed at the head of the conversation.
    #[serde(default)]
    pub pinned: Vec<String>,
    /// Globs composed after the pinned files, in this order, within the budget.
    #[serde(default)]
    pub order: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) budget_tokens: Option<u64>,
    #[serde(default)]
    pub(crate) overflow: Overflow,
    /// File names looked for in each directory from the top of the repository holding
    /// the working directory down to it; each found file is added once to the next
    /// tool result.
    #[serde(default = "default_context_files")]
    pub context_files: Vec<String>,
}

fn default_context_files() -> Vec<String> {
    vec!["AGENTS.md".to_owned(), "CLAUDE.md".to_owned()]
}

impl Default for ContextRules {
    fn default() -> Self {
        ContextRules {
            pinned: Vec::new(),
            order: Vec::new(),
            budget_tokens: None,
            overflow: Overflow::default(),
            context_files: default_context_files(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Overflow {
    /// Drop the earliest composed files of the `order` categories first.
    #[default]
    DropOldestSummaries,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    #[default]
    ContextPercent,
    EveryNSteps,
    Never,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactionConfig {
    #[serde(default)]
    pub trigger: Trigger,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) percent: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) steps: Option<u32>,
    #[serde(default = "default_keep_recent")]
    pub keep_recent_steps: u32,
    /// Whether a landing also removes the user's own messages of the compacted span
    /// (by default they stay word for word).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub drop_user_messages: bool,
}

fn default_keep_recent() -> u32 {
    2
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            trigger: Trigger::ContextPercent,
            percent: Some(70),
            steps: None,
            keep_recent_steps: 2,
            drop_user_messages: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    #[serde(default = "default_max_depth")]
    pub max_depth: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_wall_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_steps: Option<u64>,
}

/// One model's list prices, in US dollars per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Prompt tokens neither read from nor written to the cache.
    pub(crate) input: f64,
    pub(crate) output: f64,
    /// Prompt tokens served from the cache.
    pub(crate) cache_read: f64,
    /// Prompt tokens written to the cache.
    pub(crate) cache_write: f64,
}

fn default_max_depth() -> u32 {
    5
}

impl Default for BudgetConfig {
    fn default() -> Self {
        BudgetConfig { max_depth: 5, max_tokens: None, max_cost_usd: None, max_wall_seconds: None, max_steps: None }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolOutputConfig {
    #[serde(default = "default_bytes")]
    pub head_bytes: usize,
    #[serde(default = "default_bytes")]
    pub tail_bytes: usize,
}

fn default_bytes() -> usize {
    2048
}

impl Default for ToolOutputConfig {
    fn default() -> Self {
        ToolOutputConfig { head_bytes: 2048, tail_bytes: 2048 }
    }
}

/// A config that breaks a rule: where, which key, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}{}: `{key}`: {rule}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct ConfigError {
    pub(crate) file: String,
    pub(crate) line: Option<usize>,
    pub(crate) key: String,
    pub(crate) rule: String,
}

impl ConfigError {
    /// The error as it reads for the file at `path` (the user's own, not the tree's
    /// `offshoot.toml`).
    pub fn in_file(self, path: &std::path::Path) -> ConfigError {
        ConfigError { file: path.display().to_string(), ..self }
    }

    /// The error as it reads for `text`, a file laid over the config (at `path`), when
    /// the key it names is set there: that file and line, not the merged one's.
    pub fn cited_in(self, path: &std::path::Path, text: &str) -> ConfigError {
        match validate::line_of(text, &self.key) {
            Some(line) => ConfigError { file: path.display().to_string(), line: Some(line), ..self },
            None => self,
        }
    }
}

impl Config {
    /// A hook whose program is not there (`exists` says whether a program is), as the
    /// error `config set` refuses it with.
    pub fn missing_hook_program(&self, text: &str, exists: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
        for (event, groups) in &self.hooks {
            let commands = groups.iter().flat_map(|g| g.command.iter().chain(g.hooks.iter().map(|h| &h.command)));
            for command in commands {
                let Some(program) = crate::hooks::program(command) else { continue };
                // (A relative path would be looked for where the hook runs: a guard is
                // named where it is.)
                let relative = program.contains('/') && !program.starts_with('/') && !program.starts_with("~/");
                // (A program, or a script it is handed, where an agent may write is the
                // agent's to rewrite.)
                let paths = command.split_whitespace().map(|w| w.trim_matches(|c| c == '"' || c == '\''));
                let writable = paths.filter(|w| w.starts_with('/')).find_map(|word| {
                    self.roles.iter().find_map(|(name, r)| {
                        r.write_paths
                            .iter()
                            .find(|w| std::path::Path::new(word).starts_with(w))
                            .map(|w| (name, w, word))
                    })
                });
                if let Some((role, path, word)) = writable {
                    let rule = format!(
                        "the hook command `{command}` runs `{word}`, inside `{path}`, which role `{role}` may write (`write_paths`): an agent could rewrite it; keep hook programs where no agent writes"
                    );
                    let key = format!("hooks.{event}");
                    return Err(ConfigError { file: FILE.into(), line: validate::line_of(text, &key), rule, key });
                }
                let rule = match (relative, exists(program)) {
                    (true, _) => format!(
                        "the hook command `{command}` starts `{program}`, a relative path: name the program by its absolute path (or `~/…`), or as a program on PATH"
                    ),
                    (false, false) => format!(
                        "the hook command `{command}` starts `{program}`, which is not found (a path, or a program on PATH)"
                    ),
                    (false, true) => continue,
                };
                let key = format!("hooks.{event}");
                return Err(ConfigError { file: FILE.into(), line: validate::line_of(text, &key), rule, key });
            }
        }
        Ok(())
    }

    /// The permission rules role `role` is held to, each set with the key it is
    /// written under: `[permissions]`, then the role's own.
    pub fn permissions(&self, role: &str) -> Vec<(String, &crate::permissions::Permissions)> {
        let mut sets = vec![("permissions.".to_owned(), &self.permissions)];
        if let Some(r) = self.role(role) {
            sets.push((format!("roles.{role}.permissions."), &r.permissions));
        }
        for (file, p) in self.project.iter().flat_map(|p| &p.permissions) {
            sets.push((format!("{file} (trusted): permissions."), p));
        }
        sets
    }

    pub fn role(&self, name: &str) -> Option<&RoleConfig> {
        self.roles.get(name)
    }

    /// The tools role `name` may run: the compactor's fixed two, else the role's grant.
    pub fn grant(&self, name: &str) -> Vec<String> {
        if name == grant::COMPACTOR {
            return grant::held_by(Holder::Compactor).map(|t| t.name.to_owned()).collect();
        }
        self.role(name).map(|r| r.tools.clone()).unwrap_or_default()
    }

    /// The variables the config reads keys from: its providers' API keys and its MCP
    /// servers' bearer tokens. Tools never see them.
    pub fn api_key_variables(&self) -> Vec<&str> {
        let providers = self.providers.values().filter_map(|p| p.api_key_env.as_deref());
        providers.chain(self.mcp_servers.values().filter_map(|s| s.bearer_token_env_var.as_deref())).collect()
    }
}

/// The JSON Schema of `offshoot.toml`, as checked in at `docs/offshoot.schema.json`.
#[cfg(test)]
pub(crate) fn json_schema() -> String {
    let schema = schemars::schema_for!(Config);
    serde_json::to_string_pretty(&schema).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod schema_tests {
    /// The checked-in schema must match the types; `OFFSHOOT_BLESS=1 cargo test`
    /// rewrites it.
    #[test]
    fn checked_in_schema_matches_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/offshoot.schema.json");
        let fresh = super::json_schema();
        if std::env::var_os("OFFSHOOT_BLESS").is_some() {
            std::fs::write(path, &fresh).expect("write schema");
        }
        let checked_in = std::fs::read_to_string(path).unwrap_or_default();
        assert!(checked_in == fresh, "docs/offshoot.schema.json is stale: run `OFFSHOOT_BLESS=1 cargo test schema`");
    }
}
