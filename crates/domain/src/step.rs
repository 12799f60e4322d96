//! A step's record, `steps/<id>/NNNN/meta.json`: written before its model call (so a
//! call a crash cut short still shows) and again when the call ends.

use serde::{Deserialize, Serialize};

use infra::provider::Usage;
use infra::provider::transport::AttemptRecord;

/// How a step's call came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOutcome {
    /// On record before the call; still so when its driver died during it.
    Running,
    Ok,
    Error,
    /// A call whose driver died: what a `running` record of a driver no longer there is
    /// shown as (never written).
    Interrupted,
}

/// What `meta.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepMeta {
    pub step: u32,
    /// The branch tip the request was assembled from.
    #[serde(default)]
    pub commit: String,
    /// The config commit the call ran with.
    #[serde(default)]
    pub config: String,
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub protocol: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub started: String,
    pub outcome: StepOutcome,
    #[serde(default)]
    pub ended: Option<String>,
    #[serde(default)]
    pub millis: Option<u64>,
    /// Each attempt of the call (status, error, retry-after, time), as the transport
    /// reported it.
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub error: Option<String>,
    /// The transcript entry the output was committed as.
    #[serde(default)]
    pub entry: Option<String>,
    /// What was sent: the body's size and digest (`show --request` assembles the body
    /// again from `commit` and `config` and checks it against this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<Sent>,
    /// The request's size as the window check measures it (see `context::measured_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_bytes: Option<u64>,
    /// The offshoot that assembled the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The call failed on faults worth retrying that outlasted its retries (the
    /// provider down or unreachable), not on a refusal: a worker pauses the agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outage: bool,
}

/// A request body as it went out: how long it was and its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub bytes: u64,
    pub sha256: String,
}

impl StepMeta {
    /// A record not written yet: nothing known but that a call is about to start.
    pub fn unwritten() -> StepMeta {
        StepMeta {
            step: 0,
            commit: String::new(),
            config: String::new(),
            agent: String::new(),
            provider: String::new(),
            protocol: String::new(),
            model: String::new(),
            started: String::new(),
            outcome: StepOutcome::Running,
            ended: None,
            millis: None,
            attempts: Vec::new(),
            usage: None,
            error: None,
            entry: None,
            sent: None,
            measured_bytes: None,
            version: None,
            outage: false,
        }
    }

    /// As it is shown: a `running` record whose driver is gone (`live` false) was cut short.
    pub fn shown(mut self, live: bool) -> StepMeta {
        if self.outcome == StepOutcome::Running && !live {
            self.outcome = StepOutcome::Interrupted;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_what_it_writes_and_a_dead_running_one_shows_interrupted() {
        let meta = StepMeta {
            step: 3,
            commit: "c".into(),
            config: "k".into(),
            agent: "k7q2mx".into(),
            provider: "anthropic".into(),
            protocol: "anthropic".into(),
            model: "m".into(),
            started: "2026-12-01T00:00:00Z".into(),
            ..StepMeta::unwritten()
        };
        let text = serde_json::to_string(&meta).expect("json");
        assert!(text.contains("\"outcome\":\"running\""), "{text}");
        assert_eq!(serde_json::from_str::<StepMeta>(&text).expect("parse"), meta);
        assert_eq!(meta.clone().shown(true).outcome, StepOutcome::Running);
        assert_eq!(meta.shown(false).outcome, StepOutcome::Interrupted);
        // What older drivers wrote before a call: the fields it had then.
        let old: StepMeta = serde_json::from_str(r#"{"step": 1, "outcome": "ok"}"#).expect("old");
        assert_eq!((old.step, old.outcome, old.usage), (1, StepOutcome::Ok, None));
    }
}
