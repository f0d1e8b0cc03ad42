//! What read-before-edit remembers, kept in the session log so that a session continued from
//! its log remembers it too.
//!
//! Every result of a file tool that changed the monitor's records (a read that showed a file,
//! a write, an edit, a patch) carries them in its `meta` under [`RECORDS_KEY`]: a list of
//! `{"path": P, "sha256": HEX}` (`null` for a deleted file), the path as the monitor keys it.
//! [`FsToolset`]'s [`ResumeFromLog`] reads them back, each under the agent of its `tool/call`,
//! in log order, and puts the outcome back in the monitor. Only what the model was shown is
//! restored, with the hash of the very bytes shown; the rule still compares that hash with the
//! file as it is when the change comes, so a file changed since is refused as before.
//!
//! Sub-calls of code mode (`tool/code-dispatch`) keep no meta: their reads are not restored,
//! and an edit relying on one is refused until the file is read again.

use crate::hash::ContentHash;
use crate::toolset::FsToolset;
use async_trait::async_trait;
use dsh_core::event::EventBody;
use dsh_core::{ResumeFromLog, SessionEvent};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The key of a result's meta (and of the tool's value) that holds its records.
pub const RECORDS_KEY: &str = "fsRecords";

/// One record as a log keeps it: `path` now hashes to `hash` (`None`: it was deleted).
pub(crate) fn entry(path: &str, hash: Option<ContentHash>) -> Value {
    json!({"path": path, "sha256": hash.map(|h| h.to_hex())})
}

/// Adds `records` to a tool's value (an object) under [`RECORDS_KEY`].
pub(crate) fn with_records(mut value: Value, records: Vec<Value>) -> Value {
    if let Value::Object(map) = &mut value {
        map.insert(RECORDS_KEY.into(), Value::Array(records));
    }
    value
}

/// The meta a file tool keeps with its result: the records its value carries, if any.
pub(crate) fn meta_of(value: &Value) -> Option<Map<String, Value>> {
    let records = value.get(RECORDS_KEY)?.as_array()?;
    let mut meta = Map::new();
    meta.insert(RECORDS_KEY.into(), Value::Array(records.clone()));
    Some(meta)
}

/// The records a log holds, replayed in order: agent → path → hash. A delete forgets the path
/// for every agent, as the monitor does; an entry that does not read as a record is skipped
/// (a record missing only refuses more).
pub fn records_in(events: &[SessionEvent]) -> HashMap<Arc<str>, HashMap<String, ContentHash>> {
    let mut agents: HashMap<u64, Arc<str>> = HashMap::new();
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut records: HashMap<Arc<str>, HashMap<String, ContentHash>> = HashMap::new();
    for event in events {
        match &event.body {
            EventBody::ToolCall(call) => {
                let agent = names
                    .entry(call.agent.clone())
                    .or_insert_with(|| Arc::from(call.agent.as_str()))
                    .clone();
                agents.insert(event.seq, agent);
            }
            EventBody::ToolResult {
                data,
                source_event_seqs,
                ..
            } => {
                let Some(list) = data
                    .meta
                    .as_ref()
                    .and_then(|m| m.get(RECORDS_KEY))
                    .and_then(Value::as_array)
                else {
                    continue;
                };
                // A failed result records nothing, whatever its meta says.
                if data.error.is_some() {
                    continue;
                }
                let Some(agent) = source_event_seqs.first().and_then(|s| agents.get(s)) else {
                    continue;
                };
                for item in list {
                    let Some(path) = item.get("path").and_then(Value::as_str) else {
                        continue;
                    };
                    match item.get("sha256") {
                        Some(Value::Null) => {
                            for held in records.values_mut() {
                                held.remove(path);
                            }
                        }
                        Some(Value::String(hex)) => {
                            if let Some(hash) = ContentHash::from_hex(hex) {
                                records
                                    .entry(agent.clone())
                                    .or_default()
                                    .insert(path.to_string(), hash);
                            }
                        }
                        _ => {}
                    }
                }
            }
            EventBody::CodeDispatch(_) | EventBody::UserMessage(_) => {}
        }
    }
    records
}

#[async_trait]
impl ResumeFromLog for FsToolset {
    fn name(&self) -> &str {
        "read-before-edit"
    }

    async fn resume(&self, events: &[SessionEvent]) -> Result<(), String> {
        let records: Vec<(String, String, ContentHash)> = records_in(events)
            .into_iter()
            .flat_map(|(agent, paths)| {
                paths
                    .into_iter()
                    .map(move |(path, hash)| (agent.to_string(), path, hash))
            })
            .collect();
        if records.is_empty() {
            return Ok(());
        }
        let count = records.len();
        self.monitor()
            .restore(records)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            records = count,
            "read-before-edit resumed from the session log"
        );
        Ok(())
    }
}
