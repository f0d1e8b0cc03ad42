//! The stateless 2026-07-28 era: no `initialize`, a protocol version on every request, no
//! `Mcp-Session-Id`, and no server-to-client request (an `ask` becomes an
//! `InputRequiredResult`).
//!
//! - Which dsh session a request goes to is named by the client: `_meta` key
//!   [`SESSION_META_KEY`] of the request's params, or the [`SESSION_HEADER`] header (both
//!   given: they must agree). Without a name, every request of one bearer token goes to one
//!   session. The session's id (and log file name, `<id>.jsonl`) is `<scope>-<name>`, or
//!   `<scope>` unnamed, where the scope is the guard's [`SessionScope`]: 12 hex digits of a
//!   digest of the token, or `local` when no token is configured. So a token can only ever
//!   reach its own sessions, whatever name it gives, and the names survive a restart.
//! - A name is 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.`: anything else (`../x`,
//!   `/`, NUL, control characters, empty, too long) is refused with a JSON-RPC error before
//!   anything is opened.
//! - The `requestState` of an `ask` is signed ([`StateKey`], HMAC-SHA256 under a random key of
//!   the server), binding the call id, the session and the tool with its arguments.

use crate::admission::SESSION_LIMIT_CODE;
use crate::http_guard::SessionScope;
use crate::limits::{ServeLimits, SessionTable, Slot};
use crate::server::DshServer;
use crate::{ElicitingApprover, ServeConfig};
use dsh_scheduler::{Harness, SchedulerConfig};
use hmac::{Hmac, KeyInit, Mac};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer};
use serde_json::Value;
use sha2_hmac::Sha256;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The `_meta` key of a request's params that names its dsh session (2026-07-28 era).
pub const SESSION_META_KEY: &str = "dev.dsh/session";
/// The HTTP header that names a request's dsh session (2026-07-28 era), when `_meta` does not.
pub const SESSION_HEADER: &str = "dsh-session";
/// The longest session name.
pub const MAX_SESSION_NAME: usize = 64;

/// Whether a request is of the stateless era (a protocol version without `initialize`).
pub(crate) fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// Whether `name` may name a session: 1 to [`MAX_SESSION_NAME`] of `A-Z a-z 0-9 . _ -`, not
/// starting with `.` (it becomes part of a file name).
///
/// ```
/// assert!(dsh_serve::valid_session_name("review-42"));
/// for hostile in ["", "../x", "a/b", "a\0b", ".hidden", "tab\there"] {
///     assert!(!dsh_serve::valid_session_name(hostile));
/// }
/// ```
pub fn valid_session_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_SESSION_NAME
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn refuse(why: String) -> McpError {
    McpError::invalid_params(why, None)
}

/// The id of the dsh session a request of the stateless era goes to (see the module's doc).
pub(crate) fn session_id(context: &RequestContext<RoleServer>) -> Result<String, McpError> {
    let parts = context.extensions.get::<http::request::Parts>();
    let Some(scope) = parts.and_then(|p| p.extensions.get::<SessionScope>()) else {
        return Err(McpError::internal_error(
            "the request did not pass dsh's HTTP guard",
            None,
        ));
    };
    let from_meta = match context.meta.get(SESSION_META_KEY) {
        None => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => {
            return Err(refuse(format!(
                "_meta `{SESSION_META_KEY}` must be a string (the dsh session's name)"
            )));
        }
    };
    let from_header = match parts.and_then(|p| p.headers.get(SESSION_HEADER)) {
        None => None,
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| {
                    refuse(
                        "the Dsh-Session header is refused: a session name is 1 to 64 of the \
                         characters A-Z a-z 0-9 . _ -"
                            .into(),
                    )
                })?
                .to_string(),
        ),
    };
    let name = match (from_meta, from_header) {
        (Some(meta), Some(header)) if meta != header => {
            return Err(refuse(format!(
                "_meta `{SESSION_META_KEY}` and the Dsh-Session header name two sessions"
            )));
        }
        (meta, header) => meta.or(header),
    };
    match name {
        None => Ok(scope.0.clone()),
        Some(name) if valid_session_name(&name) => Ok(format!("{}-{name}", scope.0)),
        Some(name) => {
            let shown: String = name.chars().take(80).collect();
            Err(refuse(format!(
                "the dsh session name {shown:?} is refused: a session name is 1 to \
                 {MAX_SESSION_NAME} of the characters A-Z a-z 0-9 . _ - and does not start \
                 with '.'"
            )))
        }
    }
}

type HmacSha256 = Hmac<Sha256>;

/// The key `requestState`s are signed with: random, made when the server starts, never
/// leaves it (a state from an earlier run is refused).
pub(crate) struct StateKey([u8; 32]);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(redacted)")
    }
}

const STATE_PREFIX: &str = "dsh1";

/// `value` with the keys of every object sorted: the same arguments always sign the same.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut pairs: Vec<(&String, &Value)> = map.iter().collect();
            pairs.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                pairs
                    .into_iter()
                    .map(|(k, v)| (k.clone(), canonical(v)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

impl StateKey {
    pub(crate) fn random() -> StateKey {
        StateKey(rand::random())
    }

    /// The key of a fleet, shared by its nodes.
    pub(crate) fn from_bytes(key: [u8; 32]) -> StateKey {
        StateKey(key)
    }

    /// HMAC-SHA256 over the length-prefixed fields: a domain label, the session, the call
    /// id, the tool, and the canonical JSON of the arguments.
    fn mac(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Option<HmacSha256> {
        let mut mac = HmacSha256::new_from_slice(&self.0).ok()?;
        let arguments = canonical(arguments).to_string();
        for field in [
            "dsh-serve/requestState/v1".as_bytes(),
            session.as_bytes(),
            call_id.as_bytes(),
            tool.as_bytes(),
            arguments.as_bytes(),
        ] {
            mac.update(&(field.len() as u64).to_be_bytes());
            mac.update(field);
        }
        Some(mac)
    }

    /// The `requestState` of call `call_id` of `session`, made with `tool` and `arguments`:
    /// `dsh1.<call id>.<tag in hex>`.
    pub(crate) fn seal(
        &self,
        session: &str,
        call_id: &str,
        tool: &str,
        arguments: &Value,
    ) -> Option<String> {
        let tag = self
            .mac(session, call_id, tool, arguments)?
            .finalize()
            .into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        Some(format!("{STATE_PREFIX}.{call_id}.{hex}"))
    }

    /// The call id of `state`, when this server signed it for this session, tool and
    /// arguments (compared in constant time); `None` for anything else.
    pub(crate) fn open(
        &self,
        state: &str,
        session: &str,
        tool: &str,
        arguments: &Value,
    ) -> Option<String> {
        let mut fields = state.split('.');
        let (Some(STATE_PREFIX), Some(call_id), Some(hex), None) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return None;
        };
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let tag: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        self.mac(session, call_id, tool, arguments)?
            .verify_slice(&tag)
            .ok()
            .map(|()| call_id.to_string())
    }
}

/// A named session's server while it is live, and the place it takes in the [`SessionTable`].
struct Live {
    server: DshServer,
    last_seen: Instant,
    _slot: Slot,
}

/// The sessions of the stateless era, shared by every request of one `dsh serve --http`: one
/// [`DshServer`] per session id, opened on its first call (its step, read-before-edit and
/// waiting `ask`s live there, not in any request). Each counts in the [`SessionTable`]'s
/// bounds; one with nothing in flight for the idle timeout is released (its log closed, its
/// memory given back), and its next request reopens it from its log.
pub struct StatelessSessions {
    harness: Harness,
    scheduler: SchedulerConfig,
    approver: Arc<ElicitingApprover>,
    config: ServeConfig,
    /// Random per server run: the call ids of a named session (whose log a later run may
    /// continue) are `mcp_<run>_<n>`.
    run: String,
    /// The number of the next call of any named session of this run (so that a session
    /// reopened from its log never repeats a call id of this run).
    next_call: Arc<AtomicU64>,
    table: Arc<SessionTable>,
    servers: Mutex<HashMap<String, Live>>,
}

impl std::fmt::Debug for StatelessSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatelessSessions")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

impl StatelessSessions {
    /// The sessions of the stateless era of `harness` (whose approval responder should be
    /// `approver`).
    pub fn new(
        harness: Harness,
        scheduler: SchedulerConfig,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
    ) -> Arc<StatelessSessions> {
        let table = SessionTable::new(ServeLimits::default());
        Self::bounded(harness, scheduler, approver, config, table)
    }

    /// [`StatelessSessions::new`], counted in `table` (the one given to
    /// [`crate::serve_http_bounded`]), whose reaper releases the idle ones.
    pub fn bounded(
        harness: Harness,
        scheduler: SchedulerConfig,
        approver: Arc<ElicitingApprover>,
        config: ServeConfig,
        table: Arc<SessionTable>,
    ) -> Arc<StatelessSessions> {
        let run: [u8; 4] = rand::random();
        let sessions = Arc::new(StatelessSessions {
            harness,
            scheduler,
            approver,
            config,
            run: run.iter().map(|b| format!("{b:02x}")).collect(),
            next_call: Arc::new(AtomicU64::new(1)),
            table: table.clone(),
            servers: Mutex::new(HashMap::new()),
        });
        table.serve_named(Arc::downgrade(&sessions));
        sessions
    }

    /// Releases the sessions with nothing in flight (no request holds their server, no call
    /// runs, no `ask` waits) since `idle`: their servers are dropped, which closes their logs.
    /// Answers how many.
    pub(crate) fn release_idle(&self, idle: Duration) -> usize {
        let now = Instant::now();
        let released: Vec<Live> = {
            let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
            let mut idle_ids = Vec::new();
            for (id, live) in servers.iter_mut() {
                if !live.server.is_unused() {
                    live.last_seen = now;
                } else if now.duration_since(live.last_seen) >= idle {
                    idle_ids.push(id.clone());
                }
            }
            idle_ids
                .iter()
                .filter_map(|id| servers.remove(id))
                .collect()
        };
        // Dropped outside the lock: each gives its slot back (which locks the table).
        let count = released.len();
        drop(released);
        count
    }

    /// The server of one HTTP client session or request (what `serve_http`'s factory makes):
    /// a 2025-11-25 client's own [`DshServer::per_client`], which also serves the requests
    /// of the stateless era by handing them to the session they name.
    pub fn client_server(self: &Arc<Self>) -> DshServer {
        DshServer::per_client(
            self.harness.clone(),
            self.scheduler.clone(),
            self.approver.clone(),
            self.config.clone(),
        )
        .serving_stateless(self.clone())
    }

    /// The server of the session a request of the stateless era names; made when `create`
    /// (a new call), else it must exist already (an answer to an `ask`).
    pub(crate) fn server(
        &self,
        context: &RequestContext<RoleServer>,
        create: bool,
    ) -> Result<DshServer, McpError> {
        let id = session_id(context)?;
        let mut servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(live) = servers.get_mut(&id) {
            live.last_seen = Instant::now();
            return Ok(live.server.clone());
        }
        // A node of a fleet opens the session for a retry too: the call may wait on the node
        // holding it, which the busy answer names.
        if !create && self.config.fleet.is_none() {
            return Err(refuse(
                "the requestState is not valid for this call and session (forged, altered, or \
                 made for another call or session)"
                    .into(),
            ));
        }
        let scope = id.split('-').next().unwrap_or_default();
        let slot = self.table.reserve(scope).map_err(|full| {
            tracing::warn!(session = %id, ?full, "refused a new session at the bound");
            McpError::new(
                rmcp::model::ErrorCode(SESSION_LIMIT_CODE),
                full.sessions_message(self.table.limits()),
                None,
            )
        })?;
        let server = DshServer::named(
            self.harness.clone(),
            self.scheduler.clone(),
            self.approver.clone(),
            self.config.clone(),
            id.clone(),
            format!("mcp_{}_", self.run),
            self.next_call.clone(),
        );
        servers.insert(
            id,
            Live {
                server: server.clone(),
                last_seen: Instant::now(),
                _slot: slot,
            },
        );
        Ok(server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_state_opens_only_for_its_call_session_tool_and_arguments() {
        let key = StateKey::random();
        let args = json!({"path": "ask-a.txt", "content": "x"});
        let state = key.seal("s1", "mcp_1", "write_file", &args).unwrap();
        assert_eq!(
            key.open(&state, "s1", "write_file", &args).as_deref(),
            Some("mcp_1")
        );
        // Key order does not matter.
        let reordered = json!({"content": "x", "path": "ask-a.txt"});
        assert!(key.open(&state, "s1", "write_file", &reordered).is_some());
        assert!(key.open(&state, "s2", "write_file", &args).is_none());
        assert!(key.open(&state, "s1", "edit_file", &args).is_none());
        assert!(
            key.open(
                &state,
                "s1",
                "write_file",
                &json!({"path": "ask-b.txt", "content": "x"})
            )
            .is_none()
        );
        let other_call = state.replace("mcp_1", "mcp_2");
        assert!(key.open(&other_call, "s1", "write_file", &args).is_none());
        let mut flipped = state.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(key.open(&flipped, "s1", "write_file", &args).is_none());
        assert!(
            StateKey::random()
                .open(&state, "s1", "write_file", &args)
                .is_none()
        );
        for junk in ["", "dsh1", "dsh1.mcp_1", "dsh1.mcp_1.zz", "x.y.z.w"] {
            assert!(
                key.open(junk, "s1", "write_file", &args).is_none(),
                "{junk}"
            );
        }
    }
}
