//! Context assembly: the canonical request as a pure function of an agent's tree
//! at one commit and its role's rules. Frozen head (system, tools), slowly changing
//! body (pinned and ordered files), append-only tail (the transcript).

use std::collections::BTreeSet;

use serde_json::json;

use super::config::ContextRules;
use super::glob;
use super::grant;
use super::transcript::{self, Entry};
use infra::provider::{Block, Request, ToolSpec};

/// What assembly reads from an agent's tree.
#[derive(Debug, Clone, Default)]
pub struct Snapshot<'a> {
    pub goal: String,
    pub soul: String,
    pub name: Option<String>,
    /// The granted tools' schemas (`.offshoot/tools/*.json`, by file name).
    pub tools: Vec<ToolSpec>,
    pub entries: &'a [Entry],
    /// Files chosen by [`composed_paths`], with their text, in that order.
    pub composed: Vec<(String, String)>,
}

/// Which files of the tree the rules compose: pinned first, then each `order`
/// glob in turn; transcript entries never, each path once.
pub fn composed_paths(paths: &[String], rules: &ContextRules) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for pattern in rules.pinned.iter().chain(&rules.order) {
        for p in paths {
            if p.starts_with(".offshoot/messages/") || !glob::matches(pattern, p) {
                continue;
            }
            if seen.insert(p.clone()) {
                out.push(p.clone());
            }
        }
    }
    out
}

/// A rough token count (4 bytes a token): for budgets, not for billing.
fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

/// The files kept after the budget: pinned always, ordered ones oldest-first dropped.
fn within_budget<'a>(composed: &'a [(String, String)], rules: &ContextRules) -> Vec<&'a (String, String)> {
    let is_pinned = |p: &str| rules.pinned.iter().any(|g| glob::matches(g, p));
    let Some(budget) = rules.budget_tokens else {
        return composed.iter().collect();
    };
    let mut total: u64 = composed.iter().map(|(_, t)| estimate_tokens(t)).sum();
    let mut dropped = BTreeSet::new();
    for (path, text) in composed {
        if total <= budget {
            break;
        }
        if !is_pinned(path) {
            total -= estimate_tokens(text);
            dropped.insert(path.as_str());
        }
    }
    composed.iter().filter(|(p, _)| !dropped.contains(p.as_str())).collect()
}

/// A context file as it is appended to a tool result.
pub fn context_file_block(path: &str, text: &str) -> String {
    format!("\n\n<context-file path=\"{path}\">\n{}\n</context-file>", text.trim_end())
}

/// The context files the transcript has shown (in tool results), by path.
pub fn shown_context_files(entries: &[Entry]) -> BTreeSet<String> {
    let mut shown = BTreeSet::new();
    for e in entries {
        if let Entry::ToolResult { block: Block::ToolResult { content, .. }, .. } = e {
            for piece in content.split("<context-file path=\"").skip(1) {
                if let Some((path, _)) = piece.split_once("\">") {
                    shown.insert(path.to_owned());
                }
            }
        }
    }
    shown
}

pub(crate) fn system_prompt(s: &Snapshot) -> String {
    // (No goal when the turn that set it was refused and taken out: the conversation
    // holds what is asked.)
    let mut system = match s.goal.trim_end() {
        "" => String::new(),
        goal => format!("<goal>\n{goal}\n</goal>\n\n"),
    };
    if let Some(name) = &s.name {
        system.push_str(&format!("Your name is {name}.\n\n"));
    }
    system.push_str(s.soul.trim_end());
    system
}

/// The most images tool results send in one request (Anthropic takes 100 a request;
/// each costs about 1,600 tokens), and their most base64 (requests past 32 MB are refused).
const MAX_REQUEST_IMAGES: usize = 20;
const MAX_REQUEST_IMAGE_BYTES: usize = 20 * 1024 * 1024;

/// Keeps the images of the newest tool results within [`MAX_REQUEST_IMAGES`] and
/// [`MAX_REQUEST_IMAGE_BYTES`]; older results keep their text, which names each image.
/// (A request's earlier messages change only when an image falls out.)
fn newest_images(messages: &mut [infra::provider::Message]) {
    let (mut count, mut bytes) = (0, 0);
    for block in messages.iter_mut().rev().flat_map(|m| m.content.iter_mut().rev()) {
        if let Block::ToolResult { images, .. } = block {
            let mut kept = Vec::new();
            for picture in std::mem::take(images).into_iter().rev() {
                if count < MAX_REQUEST_IMAGES && bytes + picture.data.len() <= MAX_REQUEST_IMAGE_BYTES {
                    count += 1;
                    bytes += picture.data.len();
                    kept.push(picture);
                }
            }
            kept.reverse();
            *images = kept;
        }
    }
}

/// Builds the request a step sends.
pub fn assemble(s: &Snapshot, model: &str, max_output_tokens: u32, rules: &ContextRules) -> Request {
    let mut messages = transcript::to_messages(s.entries);
    newest_images(&mut messages);
    let files: Vec<Block> = within_budget(&s.composed, rules)
        .into_iter()
        .map(|(path, text)| Block::text(format!("<file path=\"{path}\">\n{}\n</file>", text.trim_end())))
        .collect();
    if let Some(first) = messages.first_mut()
        && !files.is_empty()
    {
        first.content.splice(0..0, files);
    }
    Request {
        model: model.to_owned(),
        max_output_tokens,
        system: system_prompt(s),
        tools: declared_tools(s),
        messages,
        reasoning: None,
    }
}

/// The granted tools plus every tool a `tool_use` of the history names (providers
/// refuse a history naming undeclared tools). Declared is not callable.
fn declared_tools(s: &Snapshot) -> Vec<ToolSpec> {
    let mut out = s.tools.clone();
    for e in s.entries {
        if let Entry::Output { output, .. } = e {
            for (_, name, _) in output.tool_uses() {
                if out.iter().any(|t| t.name == name) {
                    continue;
                }
                out.push(directory_tool(name).unwrap_or_else(|| ToolSpec {
                    name: name.to_owned(),
                    description: "A tool named in this conversation's history; it is not available to you now.".into(),
                    input_schema: json!({"type": "object"}),
                }));
            }
        }
    }
    out
}

/// The spec of `name` when it is a tool that needs only a directory.
fn directory_tool(name: &str) -> Option<ToolSpec> {
    grant::tool(name).filter(|t| t.runs == grant::Runs::Directory).map(grant::Tool::spec)
}

/// What one image counts for in a request's measured size: about what providers bill
/// for an image of a megapixel (1,600 tokens), at the 3 bytes a token of
/// [`request_tokens`] — not the length of its base64, which would count a 600 KB
/// screenshot as 200,000 tokens.
const IMAGE_BYTES: u64 = 1_600 * 3;

/// A request's size for [`request_tokens`]: its JSON's `json_len` bytes with each
/// image's base64 counted as [`IMAGE_BYTES`].
pub fn measured_bytes(request: &Request, json_len: u64) -> u64 {
    let mut base64 = 0u64;
    let mut images = 0u64;
    for block in request.messages.iter().flat_map(|m| &m.content) {
        match block {
            Block::Image { data, .. } => {
                base64 += data.len() as u64;
                images += 1;
            }
            Block::ToolResult { images: pictures, .. } => {
                base64 += pictures.iter().map(|p| p.data.len() as u64).sum::<u64>();
                images += pictures.len() as u64;
            }
            _ => {}
        }
    }
    json_len.saturating_sub(base64) + images * IMAGE_BYTES
}

/// Estimated prompt tokens of a request of `bytes` bytes (as JSON), from the last call
/// that reported its prompt tokens (`last`: those tokens and that request's bytes):
/// growth at 3 bytes a token (a cautious rate for code and JSON), shrinkage in
/// proportion; with no call to go by, 3 bytes a token throughout.
pub fn request_tokens(bytes: u64, last: Option<(u64, u64)>) -> u64 {
    match last {
        Some((tokens, last_bytes)) if last_bytes > 0 && bytes >= last_bytes => tokens + (bytes - last_bytes) / 3,
        Some((tokens, last_bytes)) if last_bytes > 0 => tokens * bytes / last_bytes,
        _ => bytes / 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use infra::provider::{Output, Role, Stop, Usage};
    use pretty_assertions::assert_eq;

    #[test]
    fn a_request_carries_only_the_newest_images() {
        let picture = |n: usize| infra::provider::Picture { media_type: "image/png".into(), data: format!("{n}") };
        let result = |n: usize| Block::ToolResult {
            tool_use_id: format!("t{n}"),
            content: "x".into(),
            is_error: false,
            images: (0..8).map(|i| picture(n * 10 + i)).collect(),
        };
        let mut messages: Vec<infra::provider::Message> =
            (0..4).map(|n| infra::provider::Message { role: Role::User, content: vec![result(n)] }).collect();
        newest_images(&mut messages);
        let counts: Vec<usize> = messages
            .iter()
            .map(|m| match &m.content[0] {
                Block::ToolResult { images, .. } => images.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(counts, [0, 4, 8, 8]);
        // The newest of a result are the ones kept.
        let Block::ToolResult { images, .. } = &messages[1].content[0] else { panic!("result") };
        assert_eq!(images.iter().map(|p| p.data.as_str()).collect::<Vec<_>>(), ["14", "15", "16", "17"]);
    }

    #[test]
    fn an_image_counts_for_what_providers_bill_not_for_its_base64() {
        let picture = infra::provider::Picture { media_type: "image/png".into(), data: "A".repeat(600_000) };
        let result =
            Block::ToolResult { tool_use_id: "t".into(), content: "x".into(), is_error: false, images: vec![picture] };
        let request = Request {
            model: "m".into(),
            max_output_tokens: 1,
            system: String::new(),
            tools: Vec::new(),
            messages: vec![infra::provider::Message { role: Role::User, content: vec![result] }],
            reasoning: None,
        };
        assert_eq!(measured_bytes(&request, 600_100), 100 + IMAGE_BYTES);
    }

    #[test]
    fn request_size_is_estimated_from_the_last_reported_call() {
        assert_eq!(request_tokens(30_000, None), 10_000);
        assert_eq!(request_tokens(12_000, Some((2_500, 9_000))), 3_500);
        assert_eq!(request_tokens(4_500, Some((2_500, 9_000))), 1_250);
        assert_eq!(request_tokens(9_000, Some((2_500, 0))), 3_000);
    }

    fn entries() -> Vec<Entry> {
        vec![
            Entry::Message { number: 1, sender: "user".into(), text: "Count files".into() },
            Entry::Output {
                number: 2,
                model: "m".into(),
                output: Output {
                    content: vec![Block::ToolUse {
                        id: "t1".into(),
                        name: "bash".into(),
                        input: json!({"command": "ls"}),
                        arguments: None,
                    }],
                    usage: Usage::default(),
                    stop: Stop::ToolUse,
                    response_model: None,
                },
            },
        ]
    }

    fn snapshot(entries: &[Entry]) -> Snapshot<'_> {
        Snapshot {
            goal: "Count files".into(),
            soul: "Be careful.".into(),
            name: Some("PeachHollow".into()),
            tools: vec![directory_tool("read_file").expect("builtin")],
            entries,
            composed: vec![("AGENTS.md".into(), "Use tabs.\n".into())],
        }
    }

    #[test]
    fn assembles_system_files_transcript_and_history_tools() {
        let rules = ContextRules { pinned: vec!["AGENTS.md".into()], ..Default::default() };
        let entries = entries();
        let req = assemble(&snapshot(&entries), "m", 100, &rules);
        assert_eq!(req.system, "<goal>\nCount files\n</goal>\n\nYour name is PeachHollow.\n\nBe careful.");
        assert_eq!(req.messages[0].role, Role::User);
        assert_eq!(
            req.messages[0].content,
            vec![Block::text("<file path=\"AGENTS.md\">\nUse tabs.\n</file>"), Block::text("Count files")]
        );
        let names: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["read_file", "bash"]);
    }

    #[test]
    fn composition_follows_rules_and_budget() {
        let paths: Vec<String> = [
            "AGENTS.md",
            ".offshoot/summary/0001.md",
            ".offshoot/summary/0002.md",
            ".offshoot/messages/0001-user.md",
            "src/a.rs",
        ]
        .map(String::from)
        .to_vec();
        let rules = ContextRules {
            pinned: vec!["AGENTS.md".into()],
            order: vec![".offshoot/summary/**".into()],
            budget_tokens: Some(25),
            ..Default::default()
        };
        assert_eq!(
            composed_paths(&paths, &rules),
            vec!["AGENTS.md", ".offshoot/summary/0001.md", ".offshoot/summary/0002.md"]
        );
        let composed = vec![
            ("AGENTS.md".to_owned(), "x".repeat(40)),
            (".offshoot/summary/0001.md".to_owned(), "y".repeat(40)),
            (".offshoot/summary/0002.md".to_owned(), "z".repeat(40)),
        ];
        let kept: Vec<&str> = within_budget(&composed, &rules).iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(kept, vec!["AGENTS.md", ".offshoot/summary/0002.md"]);
    }
}
