//! A stdio `dsh serve` that cannot start (the log held by another writer past the wait, a bad
//! policy) still answers its client, so that the client shows why instead of a bare
//! "Connection closed": every request gets a JSON-RPC error naming the reason, until the
//! client closes stdin or a bound passes.

use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long a server that could not start keeps answering.
const ANSWER_FOR: Duration = Duration::from_secs(10);
/// The longest request line read (an `initialize` is far shorter).
const MAX_LINE: usize = 1024 * 1024;

/// JSON-RPC's "internal error".
const INTERNAL_ERROR: i64 = -32603;

/// The error answer to `line`, when it is a request (it has an `id`); none for anything else.
fn answer(line: &str, reason: &str) -> Option<String> {
    let request: Value = serde_json::from_str(line).ok()?;
    let id = request.get("id")?.clone();
    request.get("method")?;
    Some(
        json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": INTERNAL_ERROR, "message": format!("dsh serve could not start: {reason}")}
        })
        .to_string(),
    )
}

/// Answers every request on stdin with an error naming `reason`, until stdin ends or
/// [`ANSWER_FOR`] passes.
pub async fn refuse(reason: &str) {
    let answering = async {
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        let mut stdout = tokio::io::stdout();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.len() > MAX_LINE {
                return;
            }
            if let Some(reply) = answer(&line, reason) {
                let written = stdout.write_all(format!("{reply}\n").as_bytes()).await;
                if written.is_err() || stdout.flush().await.is_err() {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(ANSWER_FOR, answering).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_get_the_reason_and_the_rest_nothing() {
        let reply = answer(r#"{"jsonrpc":"2.0","id":7,"method":"initialize"}"#, "held").unwrap();
        let reply: Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(reply["id"], 7);
        assert_eq!(reply["error"]["message"], "dsh serve could not start: held");
        assert!(
            answer(
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                "x"
            )
            .is_none()
        );
        assert!(answer("not json", "x").is_none());
    }
}
