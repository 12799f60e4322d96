use serde_json::json;

use crate::cli::{CliError, Ctx};
use crate::domain::transcript::Entry;
use crate::engine::{agents, inspect};
use crate::infra::provider::Block;

/// Show an agent's conversation, tool calls summarised
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The agent's id or name
    pub agent: String,
}

pub fn run(ctx: &Ctx, args: &Args) -> Result<(), CliError> {
    let ws = ctx.workspace()?;
    let id = agents::resolve(&ws, &args.agent)?;
    for entry in inspect::transcript(&ws, &id)? {
        if ctx.out.json {
            ctx.out.event(&entry_json(&entry));
            continue;
        }
        ctx.out.line(&render(&entry));
    }
    Ok(())
}

fn entry_json(entry: &Entry) -> serde_json::Value {
    match entry {
        Entry::Message { number, sender, text } => json!({"n": number, "side": "user", "from": sender, "text": text}),
        Entry::Output { number, model, output } => {
            json!({"n": number, "side": "assistant", "model": model, "output": output})
        }
        Entry::ToolResult { number, block } => {
            json!({"n": number, "side": "tool", "result": block})
        }
    }
}

fn clip(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    if all.len() <= lines {
        return text.trim_end().to_owned();
    }
    format!("{}\n… ({} more lines)", all[..lines].join("\n"), all.len() - lines)
}

fn render(entry: &Entry) -> String {
    match entry {
        Entry::Message { number, sender, text } => {
            let body = text.split_once("\n---\n").map(|(_, b)| b).unwrap_or(text);
            format!("── {number:04} {sender}\n{}\n", body.trim_end())
        }
        Entry::Output { number, model, output } => {
            let mut s = format!("── {number:04} {model}\n");
            for b in &output.content {
                match b {
                    Block::Text { text } => s.push_str(&format!("{}\n", text.trim_end())),
                    Block::ToolUse { name, input, .. } => {
                        s.push_str(&format!("→ {name} {}\n", clip(&crate::cli::progress::call_gist(input), 3)));
                    }
                    Block::Thinking { thinking, .. } => s.push_str(&format!("(thinking: {} chars)\n", thinking.len())),
                    _ => {}
                }
            }
            s
        }
        Entry::ToolResult { number, block } => match block {
            Block::ToolResult { content, is_error, .. } => {
                let mark = if *is_error { "✗" } else { "←" };
                format!("── {number:04} tool {mark}\n{}\n", clip(content, 8))
            }
            _ => String::new(),
        },
    }
}
