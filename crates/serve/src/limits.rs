//! The bounds of `dsh serve --http`: how many sessions live at once (both eras together,
//! overall and per token), how many requests one token has in flight, how long a request body
//! may take, and when an idle session gives back its log and memory.
//!
//! Every live session holds a [`Slot`] of the [`SessionTable`]; dropping the slot gives the
//! place back. The 2025-11-25 sessions (`Mcp-Session-Id`) are also kept here with the scope
//! (token) that opened them, so that no other token can reach them, and with what they have
//! in flight, so that the idle reaper never ends a session with a call running.

use crate::stateless::StatelessSessions;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// The bounds of one `dsh serve --http` (see the module's doc for what each covers).
#[derive(Debug, Clone)]
pub struct ServeLimits {
    /// Live sessions of both eras together. Default 256.
    pub max_sessions: usize,
    /// Live sessions of both eras opened with one token (or, without tokens, by everyone).
    /// Default 64.
    pub max_sessions_per_token: usize,
    /// Open HTTP connections. Default 512.
    pub max_connections: usize,
    /// Requests of one token in flight (a POST's answer stream counts until it closes; GET
    /// streams, at most one per live session, do not).
    /// Default 64.
    pub max_requests_per_token: usize,
    /// The time a request gets to send its whole body once its headers are in. Default 30 s.
    pub body_timeout: Duration,
    /// A session with nothing in flight for this long gives back its log and memory (a
    /// 2025-11-25 session ends: its id is then unknown, 404; a named 2026-07-28 session is
    /// reopened from its log by its next request). Default 300 s.
    pub idle_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        ServeLimits {
            max_sessions: 256,
            max_sessions_per_token: 64,
            max_connections: 512,
            max_requests_per_token: 64,
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Why a new session or request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Every place of the server is taken.
    Server,
    /// Every place of this token is taken.
    Token,
}

impl Full {
    /// The refusal's words, for the client.
    pub(crate) fn sessions_message(self, limits: &ServeLimits) -> String {
        match self {
            Full::Server => format!(
                "SESSION_LIMIT: the server holds its maximum of {} live sessions; retry later \
                 (idle sessions are released after {} s)",
                limits.max_sessions,
                limits.idle_timeout.as_secs()
            ),
            Full::Token => format!(
                "SESSION_LIMIT: this token holds its maximum of {} live sessions; end one \
                 (DELETE) or retry later (idle sessions are released after {} s)",
                limits.max_sessions_per_token,
                limits.idle_timeout.as_secs()
            ),
        }
    }
}

/// A 2025-11-25 session: whose it is and what it has in flight.
#[derive(Debug)]
struct Legacy {
    scope: String,
    in_flight: usize,
    last_seen: Instant,
    _slot: Slot,
}

#[derive(Debug, Default)]
struct Table {
    live: usize,
    per_scope: HashMap<String, usize>,
    requests: HashMap<String, usize>,
    legacy: HashMap<String, Legacy>,
}

/// The live sessions and requests of one server, shared by every connection.
#[derive(Debug)]
pub struct SessionTable {
    limits: ServeLimits,
    table: Mutex<Table>,
    /// The named sessions of the 2026-07-28 era counted here, released when idle.
    named: Mutex<Option<Weak<StatelessSessions>>>,
}

/// A place taken by a live session; dropping it gives the place back.
#[derive(Debug)]
pub(crate) struct Slot {
    table: Arc<SessionTable>,
    scope: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        table.live = table.live.saturating_sub(1);
        if let Some(n) = table.per_scope.get_mut(&self.scope) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.per_scope.remove(&self.scope);
            }
        }
    }
}

/// A request in flight of one scope (and, for a 2025-11-25 session, of that session).
#[derive(Debug)]
pub(crate) struct RequestTicket {
    table: Arc<SessionTable>,
    scope: String,
    session: Option<String>,
}

impl Drop for RequestTicket {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        if let Some(n) = table.requests.get_mut(&self.scope) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                table.requests.remove(&self.scope);
            }
        }
        if let Some(id) = &self.session
            && let Some(session) = table.legacy.get_mut(id)
        {
            session.in_flight = session.in_flight.saturating_sub(1);
            session.last_seen = Instant::now();
        }
    }
}

/// Why a request was not counted in.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The session it names is unknown, ended, or another token's.
    NotFound,
    /// Its token has its maximum of requests in flight.
    TooMany,
}

/// Whose a 2025-11-25 session id is, as a request with `scope` sees it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The request's own session.
    Own,
    /// Unknown, ended, or another token's: the same answer (404) for all three.
    NotFound,
}

impl SessionTable {
    /// An empty table under `limits`.
    pub fn new(limits: ServeLimits) -> Arc<SessionTable> {
        Arc::new(SessionTable {
            limits,
            table: Mutex::new(Table::default()),
            named: Mutex::new(None),
        })
    }

    /// The bounds.
    pub fn limits(&self) -> &ServeLimits {
        &self.limits
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The number of live sessions of both eras.
    pub fn live(&self) -> usize {
        self.lock().live
    }

    /// Takes a place for a new session of `scope`, or says which bound is reached.
    pub(crate) fn reserve(self: &Arc<Self>, scope: &str) -> Result<Slot, Full> {
        let mut table = self.lock();
        if table.live >= self.limits.max_sessions {
            return Err(Full::Server);
        }
        let mine = table.per_scope.get(scope).copied().unwrap_or(0);
        if mine >= self.limits.max_sessions_per_token {
            return Err(Full::Token);
        }
        table.live += 1;
        *table.per_scope.entry(scope.to_string()).or_insert(0) += 1;
        Ok(Slot {
            table: self.clone(),
            scope: scope.to_string(),
        })
    }

    /// Counts a request of `scope` in flight (of `session`, a 2025-11-25 session id, when
    /// given: that session is then not idle), unless the session is not this scope's (or is
    /// gone: checked under the same lock as the count, so the reaper cannot end it between)
    /// or the scope has its maximum in flight.
    pub(crate) fn begin_request(
        self: &Arc<Self>,
        scope: &str,
        session: Option<&str>,
    ) -> Result<RequestTicket, Refused> {
        let mut table = self.lock();
        if let Some(id) = session
            && table.legacy.get(id).is_none_or(|s| s.scope != scope)
        {
            return Err(Refused::NotFound);
        }
        let mine = table.requests.get(scope).copied().unwrap_or(0);
        if mine >= self.limits.max_requests_per_token {
            return Err(Refused::TooMany);
        }
        *table.requests.entry(scope.to_string()).or_insert(0) += 1;
        if let Some(entry) = session.and_then(|id| table.legacy.get_mut(id)) {
            entry.in_flight += 1;
            entry.last_seen = Instant::now();
        }
        Ok(RequestTicket {
            table: self.clone(),
            scope: scope.to_string(),
            session: session.map(str::to_string),
        })
    }

    /// Whether the 2025-11-25 session `id` is one `scope` opened and still live.
    pub(crate) fn owner(&self, id: &str, scope: &str) -> Owner {
        match self.lock().legacy.get(id) {
            Some(session) if session.scope == scope => Owner::Own,
            _ => Owner::NotFound,
        }
    }

    /// Records the 2025-11-25 session `id`, opened by `slot`'s scope.
    pub(crate) fn bind(&self, id: &str, slot: Slot) {
        let scope = slot.scope.clone();
        // A replaced entry gives its slot back once the lock is let go (its drop locks).
        let replaced = self.lock().legacy.insert(
            id.to_string(),
            Legacy {
                scope,
                in_flight: 0,
                last_seen: Instant::now(),
                _slot: slot,
            },
        );
        drop(replaced);
    }

    /// Forgets the 2025-11-25 session `id` (ended); its place is given back.
    pub(crate) fn unbind(&self, id: &str) {
        let removed = self.lock().legacy.remove(id);
        drop(removed);
    }

    /// The named sessions whose idle ones [`SessionTable::release_idle_named`] releases.
    pub(crate) fn serve_named(&self, sessions: Weak<StatelessSessions>) {
        *self.named.lock().unwrap_or_else(|e| e.into_inner()) = Some(sessions);
    }

    /// Releases the named sessions idle since `idle`; answers how many.
    pub(crate) fn release_idle_named(&self, idle: Duration) -> usize {
        let sessions = self
            .named
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        sessions.map_or(0, |s| s.release_idle(idle))
    }

    /// Forgets, and answers, the 2025-11-25 sessions with nothing in flight since `idle`.
    pub(crate) fn take_idle(&self, idle: Duration) -> Vec<String> {
        let now = Instant::now();
        let mut table = self.lock();
        let ids: Vec<String> = table
            .legacy
            .iter()
            .filter(|(_, s)| s.in_flight == 0 && now.duration_since(s.last_seen) >= idle)
            .map(|(id, _)| id.clone())
            .collect();
        let removed: Vec<Legacy> = ids
            .iter()
            .filter_map(|id| table.legacy.remove(id))
            .collect();
        drop(table);
        drop(removed);
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_bounded_overall_and_per_scope_and_places_come_back() {
        let table = SessionTable::new(ServeLimits {
            max_sessions: 3,
            max_sessions_per_token: 2,
            ..ServeLimits::default()
        });
        let a1 = table.reserve("a").unwrap();
        let a2 = table.reserve("a").unwrap();
        assert_eq!(table.reserve("a").unwrap_err(), Full::Token);
        let b1 = table.reserve("b").unwrap();
        assert_eq!(table.reserve("c").unwrap_err(), Full::Server);
        drop(a1);
        let c1 = table.reserve("c").unwrap();
        assert_eq!(table.live(), 3);
        table.bind("id-1", a2);
        assert_eq!(table.owner("id-1", "a"), Owner::Own);
        assert_eq!(table.owner("id-1", "b"), Owner::NotFound);
        table.unbind("id-1");
        assert_eq!(table.owner("id-1", "a"), Owner::NotFound);
        assert_eq!(table.live(), 2);
        drop((b1, c1));
        assert_eq!(table.live(), 0);
    }

    #[test]
    fn a_session_with_a_request_in_flight_is_never_idle() {
        let table = SessionTable::new(ServeLimits::default());
        let slot = table.reserve("a").unwrap();
        table.bind("s", slot);
        assert_eq!(
            table.begin_request("b", Some("s")).unwrap_err(),
            Refused::NotFound
        );
        let ticket = table.begin_request("a", Some("s")).unwrap();
        assert!(table.take_idle(Duration::ZERO).is_empty());
        drop(ticket);
        assert_eq!(table.take_idle(Duration::ZERO), vec!["s".to_string()]);
        assert_eq!(table.live(), 0);
    }
}
