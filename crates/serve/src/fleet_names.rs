//! The dsh session a 2025-11-25 client names (`Dsh-Session`, or `_meta` `dev.dsh/session`),
//! so that its session outlives the node and the MCP session that served it.

use rmcp::RoleServer;
use rmcp::service::RequestContext;

/// The session id (`<scope>-<name>`, as in the stateless era) a request of a 2025-11-25
/// client names; `None` when it names none; why, when the name is refused.
pub(crate) fn named(context: &RequestContext<RoleServer>) -> Result<Option<String>, String> {
    let header = context
        .extensions
        .get::<http::request::Parts>()
        .is_some_and(|parts| parts.headers.contains_key(crate::SESSION_HEADER));
    let meta = context.meta.get(crate::SESSION_META_KEY).is_some();
    if !header && !meta {
        return Ok(None);
    }
    crate::stateless::session_id(context)
        .map(Some)
        .map_err(|e| e.message.to_string())
}
