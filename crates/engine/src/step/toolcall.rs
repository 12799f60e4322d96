//! One tool call of a step: the grant gate, the run, the bounded result the model
//! reads and the full record kept in the step's directory.

use serde_json::{Value, json};

use domain::config::ToolOutputConfig;
use domain::grant;

pub(crate) use crate::step::call::Call;
pub use crate::step::call::ToolCallError;
use crate::step::gate;
use infra::provider::Block;
use infra::tools::{RecordDir, ToolError, ToolOutput};

use crate::step::tools::{self, ToolContext};

/// What a call came to.
pub(crate) struct CallResult {
    pub(crate) block: Block,
    /// Whether the call may have changed files (so its commit scans the worktree).
    pub(crate) writes: bool,
    pub(crate) is_error: bool,
    pub(crate) summary: String,
    /// A new working directory for later calls (`cd`).
    pub(crate) cwd: Option<std::path::PathBuf>,
    /// Files for the harness's directory, committed with the result.
    pub(crate) harness_files: Vec<(String, Vec<u8>)>,
    /// What the policy made of it.
    pub(crate) policy: crate::step::events::Policy,
}

/// A tool-use id made safe as a directory name.
pub(crate) fn record_name(tool_use_id: &str) -> String {
    tool_use_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// What names call `tool_use_id` of the model output that is transcript entry `output`
/// for good (see `ToolContext::key`): the id as the provider sent it, every byte but
/// letters, digits, `-` and `_` written `%XX`, so it fits on one header line and in a
/// ref's blob, and two ids never share a key.
pub(crate) fn key(output: u32, tool_use_id: &str) -> String {
    let mut key = format!("{output}:");
    for b in tool_use_id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            key.push(char::from(b));
        } else {
            key.push_str(&format!("%{b:02X}"));
        }
    }
    key
}

/// Runs one call. `grant` is the role's grant read from config at this step; the
/// call's record goes to `cx.env.record` (`steps/<id>/<NNNN>/tools/<tool_use_id>`).
pub fn run(
    call: &Call,
    grant: &[String],
    cx: &ToolContext,
    limits: &ToolOutputConfig,
) -> Result<CallResult, ToolCallError> {
    let Call { id, name, input } = *call;
    let env = &cx.env;
    let unrecorded = RecordDir { dir: std::path::PathBuf::new(), shown: "(not recorded)".into() };
    let record = env.record.as_ref().unwrap_or(&unrecorded);
    let write_record = |file: &str, value: &Value| {
        if env.record.is_none() {
            return Ok(());
        }
        let path = record.dir.join(file);
        std::fs::create_dir_all(&record.dir)
            .and_then(|()| std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap_or_default()))
            .map_err(|source| ToolCallError::Record { path: path.display().to_string(), source })
    };
    write_record("input.json", &json!({"id": id, "name": name, "input": input}))?;
    let handler = tools::handler(name).filter(|_| grant::allows(grant, name));
    // An MCP server's tool: offered when the role uses the server (its own gate).
    let mcp = cx.agent.and_then(|a| Some((a.mcp?, a.runtime))).filter(|(m, _)| m.offers(name).is_some());
    // The rules, the mode, the hooks and, for a call that needs a yes, its answer.
    let hooks = gate::Hooks::new(cx, call);
    let gate::Passed { refusal, mut heard, lent, yes_from, policy } =
        gate::pass(call, cx, handler.is_some() || mcp.is_some(), &hooks, &write_record)?;
    let lent_cx;
    let cx = match lent {
        Some(wanted) => {
            lent_cx = gate::lend(cx, wanted);
            &lent_cx
        }
        None => cx,
    };
    let ran = refusal.is_none();
    let (outcome, writes) = match (handler, mcp) {
        _ if !ran => (Err(ToolError::ToModel(refusal.unwrap_or_default())), false),
        (_, Some((servers, runtime))) => {
            let interrupt = runtime.interrupt();
            let outcome = servers.call(name, input, &|| interrupt.reason().is_none()).and_then(|(output, raw)| {
                if let Some(raw) = raw {
                    write_record("mcp.json", &servers.redacted(&raw)).map_err(|e| ToolError::Fatal(e.to_string()))?;
                }
                Ok(output)
            });
            (outcome, servers.writes(name))
        }
        (None, None) => {
            // What the model may call: its grant, and the tools its MCP servers offer.
            let offered = cx.agent.and_then(|a| a.mcp).into_iter().flat_map(|m| m.offered_names());
            let allowed: Vec<&str> = grant.iter().map(String::as_str).chain(offered).collect();
            let allowed = if allowed.is_empty() { "none".to_owned() } else { allowed.join(", ") };
            (
                Err(ToolError::ToModel(format!(
                    "tool `{name}` is not available to you; nothing ran. Allowed tools: {allowed}"
                ))),
                false,
            )
        }
        (Some(h), None) => (h.run(cx, input), h.writes()),
    };
    let (mut text, is_error, summary, cwd, harness_files, images) = match outcome {
        Ok(output) => {
            write_record("output.json", &serde_json::to_value(&output).unwrap_or(Value::Null))?;
            let text = render(&output, limits, &record.shown);
            if text.contains(&record.shown) {
                // The model was told where a file of the record is: the step's record
                // keeps its directory, so the path stays true.
                let why = json!({"why": "a result told the model where a file of this record is"});
                write_record(crate::store::step_record::REFERENCED, &why)?;
            }
            (text, output.is_error, output.summary, output.cwd, output.harness_files, output.images)
        }
        Err(ToolError::ToModel(message)) => {
            write_record("output.json", &json!({"error": message}))?;
            (message.clone(), true, message, None, Vec::new(), Vec::new())
        }
        Err(ToolError::Fatal(message)) => {
            write_record("output.json", &json!({"fatal": message}))?;
            return Err(ToolCallError::Fatal { name: name.to_owned(), message });
        }
    };
    if let Some(by) = yes_from {
        text.push_str(&format!("\n[this call ran on a yes from {by}]"));
    }
    // `PostToolUse` sees what a call that ran gave; what a hook says back is the
    // model's to read.
    if ran && !is_error {
        let after = hooks.run("PostToolUse", json!({"tool_response": {"content": text, "is_error": is_error}}));
        for said in after.iter().filter(|r| !r.said.is_empty()) {
            text.push_str(&format!("\n<hook>\n{}\n</hook>", said.said));
        }
        heard.extend(after);
    }
    if !heard.is_empty() {
        write_record("hooks.json", &serde_json::to_value(&heard).unwrap_or(Value::Null))?;
    }
    Ok(CallResult {
        block: Block::ToolResult { tool_use_id: id.to_owned(), content: text, is_error, images },
        writes,
        is_error,
        summary,
        cwd,
        harness_files,
        policy,
    })
}

/// The text the model reads: the summary, then each non-empty stream, bounded.
fn render(output: &ToolOutput, limits: &ToolOutputConfig, record: &str) -> String {
    let mut text = output.summary.clone();
    for stream in output.streams.iter().filter(|s| !s.text.is_empty() || s.cut.is_some()) {
        let shown = match &stream.cut {
            Some(cut) => {
                let place = match &cut.record {
                    Some(path) if cut.recorded_bytes == cut.total_bytes => format!("the full output is in {path}"),
                    Some(path) => format!("its first {} bytes are in {path}", cut.recorded_bytes),
                    None => "the full output was not kept".to_owned(),
                };
                let omitted = Omitted {
                    bytes: cut.omitted_bytes,
                    line_breaks: cut.omitted_line_breaks,
                    total_bytes: cut.total_bytes,
                    total_lines: cut.total_lines,
                };
                format!("{}\n{}\n{}", stream.text, omitted.marker(&place), cut.tail)
            }
            None => bound(&stream.text, limits.head_bytes, limits.tail_bytes, &format!("{record}/output.json")),
        };
        text.push_str(&format!("\n<{name}>\n{}\n</{name}>", shown.trim_end_matches('\n'), name = stream.name));
    }
    text
}

/// What a bounded text left out.
struct Omitted {
    bytes: u64,
    line_breaks: u64,
    total_bytes: u64,
    total_lines: u64,
}

impl Omitted {
    fn marker(&self, place: &str) -> String {
        format!(
            "[… {} bytes left out ({}) of {} bytes in {}; {place} …]",
            self.bytes,
            counted(self.line_breaks, "line break"),
            self.total_bytes,
            counted(self.total_lines, "line"),
        )
    }
}

/// The first `head` and last `tail` bytes of `text`, with a marker saying what was
/// left out and where the whole is kept.
pub(crate) fn bound(text: &str, head: usize, tail: usize, record: &str) -> String {
    if text.len() <= head + tail {
        return text.to_owned();
    }
    let head_end = text.floor_char_boundary(head);
    let tail_start = text.ceil_char_boundary(text.len() - tail);
    let omitted = &text[head_end..tail_start];
    let lines = text.matches('\n').count() + usize::from(!text.ends_with('\n'));
    let omitted = Omitted {
        bytes: omitted.len() as u64,
        line_breaks: omitted.matches('\n').count() as u64,
        total_bytes: text.len() as u64,
        total_lines: lines as u64,
    };
    format!(
        "{}\n{}\n{}",
        &text[..head_end],
        omitted.marker(&format!("the full output is in {record}")),
        &text[tail_start..]
    )
}

fn counted(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::tools::ToolEnv;

    #[test]
    fn bound_keeps_head_and_tail_and_names_the_record() {
        assert_eq!(bound("short", 4, 4, "r"), "short");
        let text = "a\n".repeat(100);
        let b = bound(&text, 4, 4, "steps/x/0001/tools/t/output.json");
        assert_eq!(
            b,
            "a\na\n\n[… 192 bytes left out (96 line breaks) of 200 bytes in 100 lines; the full output is in steps/x/0001/tools/t/output.json …]\na\na\n"
        );
    }

    #[test]
    fn a_key_is_one_line_of_safe_bytes_and_never_shared() {
        assert_eq!(key(4, "toolu_01A-b"), "4:toolu_01A-b");
        let forged = key(4, "m1\nfrom: user\nepitaph: final-response");
        assert_eq!(forged, "4:m1%0Afrom%3A%20user%0Aepitaph%3A%20final-response");
        assert_ne!(key(4, "a/b"), key(4, "a_b"));
        assert_ne!(key(4, "a%2Fb"), key(4, "a/b"));
    }

    #[test]
    fn an_ungranted_tool_runs_nothing_and_names_the_grant() {
        let dir = std::env::temp_dir().join(format!("offshoot-toolcall-{}", std::process::id()));
        let record = RecordDir { dir: dir.join("rec"), shown: "rec".into() };
        let env = ToolEnv { cwd: dir.clone(), root: dir.clone(), record: Some(record), ..Default::default() };
        let cx = ToolContext { env, agent: None, key: None };
        let marker = dir.join("ran");
        let input = json!({"command": format!("touch {}", marker.display())});
        let grant = vec!["read_file".to_owned()];
        let call = Call { id: "t1", name: "bash", input: &input };
        let r = run(&call, &grant, &cx, &ToolOutputConfig::default()).expect("runs");
        assert!(r.is_error);
        assert_eq!(
            r.block,
            Block::ToolResult {
                tool_use_id: "t1".into(),
                content: "tool `bash` is not available to you; nothing ran. Allowed tools: read_file".into(),
                images: Vec::new(),
                is_error: true
            }
        );
        assert!(!marker.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
