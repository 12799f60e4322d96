//! Inbox deposits: `inbox/<id>/<NNNN>-<sender>.md`, a small header, then the body.

use infra::time::Timestamp;

/// A message waiting for delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deposit {
    pub from: String,
    pub at: String,
    pub epitaph: Option<String>,
    pub terminal: Option<String>,
    /// What names the deposit for good (a `message` call's key): a call run again after
    /// a crash finds it, pending or delivered, and does not send it twice.
    pub key: Option<String>,
    /// The model the user chose with this message (from the user only).
    pub model: Option<String>,
    /// The thinking the user asked for with it (`agent::reasoning_text`'s line).
    pub reasoning: Option<String>,
    /// The mode the user set with it (`Mode::word`): the agent's from its delivery on.
    pub mode: Option<String>,
    pub body: String,
}

impl Deposit {
    pub fn new(from: &str, at: Timestamp, body: &str) -> Deposit {
        Deposit {
            from: from.to_owned(),
            at: at.to_string(),
            epitaph: None,
            terminal: None,
            key: None,
            model: None,
            reasoning: None,
            mode: None,
            body: body.to_owned(),
        }
    }

    /// A child's first message as its maker deposits it (its goal, from its parent),
    /// dated at its making: the same text when a driver makes it again from the dispatch
    /// commit because the maker was killed before depositing it, so that in a fleet a
    /// copy arriving after the other was delivered is known for it ([`identity`]) and
    /// not delivered twice. (For a root, from the user; made again, it lacks the model
    /// or thinking the user chose with it.)
    pub fn first_of(facts: &crate::agent::AgentFacts, goal: &str) -> Deposit {
        let from = facts.parent.as_deref().unwrap_or("user");
        Deposit { at: facts.created.clone(), ..Deposit::new(from, Timestamp::now(), goal) }
    }

    /// The file's text: the header, then the body.
    pub fn render(&self) -> String {
        let mut s = format!("---\nfrom: {}\nat: {}\n", self.from, self.at);
        if let Some(e) = &self.epitaph {
            s.push_str(&format!("epitaph: {e}\n"));
        }
        if let Some(t) = &self.terminal {
            s.push_str(&format!("terminal: {t}\n"));
        }
        if let Some(k) = &self.key {
            s.push_str(&format!("key: {k}\n"));
        }
        if let Some(m) = &self.model {
            s.push_str(&format!("model: {m}\n"));
        }
        if let Some(r) = &self.reasoning {
            s.push_str(&format!("reasoning: {r}\n"));
        }
        if let Some(m) = &self.mode {
            s.push_str(&format!("mode: {m}\n"));
        }
        s.push_str("---\n");
        s.push_str(&self.body);
        s
    }
}

/// What a delivered message's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub from: String,
    /// Set on results: `final-response`, `stopped`, `budget-exhausted`, `died`.
    pub epitaph: Option<String>,
    /// The sender's commit the result was made at.
    pub terminal: Option<String>,
    /// The key of the call that sent it, if one did.
    pub key: Option<String>,
    /// The model the user chose with it.
    pub model: Option<String>,
    /// The thinking the user asked for with it.
    pub reasoning: Option<String>,
    /// The mode the user set with it.
    pub mode: Option<String>,
}

impl Header {
    /// The header of a message's text, if it has one.
    pub fn parse(text: &str) -> Option<Header> {
        let rest = text.strip_prefix("---\n")?;
        let (head, _) = rest.split_once("\n---\n").or_else(|| rest.strip_suffix("\n---").map(|h| (h, "")))?;
        let mut header = Header {
            from: String::new(),
            epitaph: None,
            terminal: None,
            key: None,
            model: None,
            reasoning: None,
            mode: None,
        };
        for line in head.lines() {
            match line.split_once(": ") {
                Some(("from", v)) => header.from = v.to_owned(),
                Some(("epitaph", v)) => header.epitaph = Some(v.to_owned()),
                Some(("terminal", v)) => header.terminal = Some(v.to_owned()),
                Some(("key", v)) => header.key = Some(v.to_owned()),
                Some(("model", v)) => header.model = Some(v.to_owned()),
                Some(("reasoning", v)) => header.reasoning = Some(v.to_owned()),
                Some(("mode", v)) => header.mode = Some(v.to_owned()),
                _ => {}
            }
        }
        (!header.from.is_empty()).then_some(header)
    }
}

/// A message's text without its header.
pub fn body(text: &str) -> &str {
    text.strip_prefix("---\n").and_then(|rest| rest.split_once("\n---\n")).map_or(text, |(_, body)| body)
}

/// A deposit file's name: its number and sender, if it is one.
pub fn parse_name(name: &str) -> Option<(u32, &str)> {
    let stem = name.strip_suffix(".md")?;
    let (digits, sender) = stem.split_once('-')?;
    if digits.len() < 4 || !digits.bytes().all(|b| b.is_ascii_digit()) || sender.is_empty() {
        return None;
    }
    Some((digits.parse().ok()?, sender))
}

/// What names a message for good, wherever it travels: a result by its sender, kind and
/// terminal commit (one made again after a crash is the same result); a call's message
/// by its key; any other by its whole text (header and time included).
pub fn identity(text: &str) -> String {
    match Header::parse(text) {
        Some(Header { from, epitaph: Some(epitaph), terminal: Some(terminal), .. }) => {
            format!("result {from} {epitaph} {terminal}")
        }
        Some(Header { key: Some(key), .. }) => format!("key {key}"),
        _ => format!("text {text}"),
    }
}

/// Whether `sender` can name a deposit's sender (and so a part of its file's name): an
/// agent id, `user`, or another plain word — no path, no dot first.
pub fn plain_sender(sender: &str) -> bool {
    !sender.is_empty()
        && sender.len() <= 200
        && !sender.starts_with('.')
        && sender.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

pub fn file_name(number: u32, sender: &str) -> String {
    format!("{number:04}-{sender}.md")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_header_then_body() {
        let d = Deposit {
            from: "user".into(),
            at: "2026-11-29T22:00:00Z".into(),
            epitaph: None,
            terminal: None,
            key: None,
            model: None,
            reasoning: None,
            mode: None,
            body: "hi".into(),
        };
        assert_eq!(d.render(), "---\nfrom: user\nat: 2026-11-29T22:00:00Z\n---\nhi");
        let result = Deposit { epitaph: Some("final-response".into()), terminal: Some("abc".into()), ..d.clone() };
        let header = Header::parse(&result.render()).expect("header");
        assert_eq!(
            header,
            Header {
                from: "user".into(),
                epitaph: Some("final-response".into()),
                terminal: Some("abc".into()),
                key: None,
                model: None,
                reasoning: None,
                mode: None
            }
        );
        assert_eq!(body(&result.render()), "hi");
        let keyed = Deposit { key: Some("k7q2mx:4:toolu_1".into()), ..d.clone() };
        assert_eq!(Header::parse(&keyed.render()).and_then(|h| h.key).as_deref(), Some("k7q2mx:4:toolu_1"));
        let chosen = Deposit { model: Some("gpt-4.1".into()), ..d.clone() };
        assert_eq!(Header::parse(&chosen.render()).and_then(|h| h.model).as_deref(), Some("gpt-4.1"));
        assert_eq!(Header::parse("no header"), None);
        assert_eq!(parse_name("0012-user.md"), Some((12, "user")));
        assert_eq!(parse_name(".tmp-0012-user.md"), None);
        assert_eq!(file_name(3, "k7q2mx.1"), "0003-k7q2mx.1.md");
    }
}
