//! What a call's command tried to reach: one record per connection attempt, for the result's
//! `meta.egress`.

use serde::Serialize;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a connection reached the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Via {
    /// `CONNECT host:port` (HTTPS and any other tunnel).
    #[serde(rename = "CONNECT")]
    Connect,
    /// A plain-HTTP request with an absolute URI.
    #[serde(rename = "HTTP")]
    Http,
    /// A SOCKS5 request.
    #[serde(rename = "SOCKS5")]
    Socks5,
    /// Something else (an unreadable request).
    #[serde(rename = "unknown")]
    Unknown,
}

/// One connection attempt, as `meta.egress` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Egress {
    /// The host as the client asked for it (a name or an IP literal).
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// How it was reached.
    pub via: Via,
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// The rule that decided (as written), `default` for the network default, or `null` when
    /// no rule was reached (a malformed request, a mismatch).
    pub rule: Option<String>,
    /// Why it was refused (absent when allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The address connected to (absent when refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Bytes sent to the destination.
    pub bytes_up: u64,
    /// Bytes received from it.
    pub bytes_down: u64,
}

/// The byte counters of one open connection.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub up: AtomicU64,
    pub down: AtomicU64,
}

struct Entry {
    record: Egress,
    counters: Option<Arc<Counters>>,
}

/// The records of one call, bounded: past `cap` records only a count is kept.
pub(crate) struct EgressLog {
    entries: Mutex<(Vec<Entry>, u64)>,
    cap: usize,
}

impl EgressLog {
    pub(crate) fn new(cap: usize) -> EgressLog {
        EgressLog {
            entries: Mutex::new((Vec::new(), 0)),
            cap,
        }
    }

    /// Adds a record; its byte counts follow `counters` until the log is read. Its index, if
    /// it was kept.
    pub(crate) fn push(&self, record: Egress, counters: Option<Arc<Counters>>) -> Option<usize> {
        let mut guard = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.0.len() < self.cap {
            guard.0.push(Entry { record, counters });
            Some(guard.0.len() - 1)
        } else {
            guard.1 += 1;
            None
        }
    }

    /// Turns a record into a refusal (a tunnel whose first bytes failed the check).
    pub(crate) fn refuse(&self, index: Option<usize>, reason: String) {
        let mut guard = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(entry) = index.and_then(|i| guard.0.get_mut(i)) {
            entry.record.decision = "deny";
            entry.record.reason = Some(reason);
            entry.record.address = None;
        }
    }

    /// The records so far, with their byte counts, and how many were left out.
    pub(crate) fn snapshot(&self) -> (Vec<Egress>, u64) {
        let guard = match self.entries.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let records = guard
            .0
            .iter()
            .map(|e| {
                let mut r = e.record.clone();
                if let Some(c) = &e.counters {
                    r.bytes_up = c.up.load(Ordering::Relaxed);
                    r.bytes_down = c.down.load(Ordering::Relaxed);
                }
                r
            })
            .collect();
        (records, guard.1)
    }
}

/// Everything one call's command tried to reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EgressReport {
    /// One record per attempt, in order (at most the proxy's record cap).
    pub records: Vec<Egress>,
    /// Attempts past the cap, counted only.
    pub omitted: u64,
}

impl EgressReport {
    /// The hosts refused, each once, in order.
    pub fn refused_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = Vec::new();
        for r in &self.records {
            if r.decision == "deny" && !hosts.contains(&r.host) {
                hosts.push(r.host.clone());
            }
        }
        hosts
    }

    /// The report as the result's `meta.egress` holds it: the records, and, when there are
    /// any, `egressRefused` (the refused hosts) and `egressOmitted`, which the caller puts
    /// beside it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.records).unwrap_or(serde_json::Value::Null)
    }
}
