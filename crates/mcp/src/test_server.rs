//! A small MCP server over stdio, for tests (feature `test-server`): the binary
//! `dsh-mcp-test-server` runs [`serve_stdio`].
//!
//! Its tools: `echo {text}`, `peek {ms?}` (read-only; records how many ran at once), `stats`
//! (the most `peek`/`echo` bodies that ran at once, by tool), `slow {ms}` (sleeps without
//! blocking the server), `hang` (blocks the whole server, so that it cannot even answer a
//! ping), `crash` (the process exits), `fail` (`isError: true`), `image` (text and an image),
//! `add {a, b}` (structured output with an output schema), `pid` (the process id, to tell a
//! restarted server from the first), `env {name}` (an environment variable, or `(unset)`),
//! and `tag {label, ms?}` (read-only; the same `structuredContent` for every label, with a
//! text that names the label).
//! It writes a line to stderr when it starts and before it crashes.
//!
//! Run with the first argument `raw`, it is instead a hand-written server that sends what
//! rmcp's server side will not: see [`raw`](self) below.

mod raw;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{Json, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `echo`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EchoArgs {
    /// The text to send back.
    pub text: String,
}

/// `peek`'s and `slow`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// How long to take, in milliseconds.
    #[serde(default)]
    pub ms: u64,
}

/// `add`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// One term.
    pub a: i64,
    /// The other.
    pub b: i64,
}

/// `add`'s structured result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Sum {
    /// `a + b`.
    pub sum: i64,
}

/// `env`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct EnvArgs {
    /// The variable.
    pub name: String,
}

/// `tag`'s arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct TagArgs {
    /// The label the text names.
    pub label: String,
    /// How long to take, in milliseconds.
    #[serde(default)]
    pub ms: u64,
}

#[derive(Default)]
struct Overlap {
    active: AtomicUsize,
    max: Mutex<BTreeMap<&'static str, usize>>,
}

struct Active<'a> {
    overlap: &'a Overlap,
}

impl<'a> Active<'a> {
    fn enter(overlap: &'a Overlap, tool: &'static str) -> Active<'a> {
        let now = overlap.active.fetch_add(1, Ordering::SeqCst) + 1;
        if let Ok(mut max) = overlap.max.lock() {
            let seen = max.entry(tool).or_insert(0);
            *seen = (*seen).max(now);
        }
        Active { overlap }
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.overlap.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The test server.
#[derive(Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
    overlap: Arc<Overlap>,
}

impl Default for TestServer {
    fn default() -> Self {
        TestServer::new()
    }
}

#[tool_router(router = tool_router)]
impl TestServer {
    /// A server with fresh counters.
    pub fn new() -> TestServer {
        TestServer {
            tool_router: Self::tool_router(),
            overlap: Arc::new(Overlap::default()),
        }
    }

    #[tool(description = "Returns its text")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        let _active = Active::enter(&self.overlap, "echo");
        tokio::time::sleep(Duration::from_millis(50)).await;
        args.text
    }

    #[tool(
        description = "Looks without touching anything",
        annotations(read_only_hint = true)
    )]
    async fn peek(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        let _active = Active::enter(&self.overlap, "peek");
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        "peeked".to_string()
    }

    #[tool(
        description = "The most calls of each tool that ran at once",
        annotations(read_only_hint = true)
    )]
    async fn stats(&self) -> String {
        let max = self
            .overlap
            .max
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default();
        serde_json::to_string(&max).unwrap_or_default()
    }

    #[tool(description = "Sleeps, without blocking the server")]
    async fn slow(&self, Parameters(args): Parameters<SleepArgs>) -> String {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        format!("slept {} ms", args.ms)
    }

    #[tool(description = "Blocks the whole server for 30 s")]
    async fn hang(&self) -> String {
        std::thread::sleep(Duration::from_secs(30));
        "woke up".to_string()
    }

    #[tool(description = "Makes the server exit")]
    async fn crash(&self) -> String {
        eprintln!("dsh-mcp-test-server: crashing on purpose");
        std::process::exit(3)
    }

    #[tool(description = "Reports an error")]
    async fn fail(&self) -> Result<String, String> {
        Err("it failed on purpose".to_string())
    }

    #[tool(description = "Returns text and an image")]
    async fn image(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("a pixel:"),
            ContentBlock::image("iVBORw0KGgo=", "image/png"),
        ])
    }

    #[tool(description = "Adds two numbers, with a structured result")]
    async fn add(&self, Parameters(args): Parameters<AddArgs>) -> Json<Sum> {
        Json(Sum {
            sum: args.a + args.b,
        })
    }

    #[tool(
        description = "The same structured result for every label, with a text naming it",
        annotations(read_only_hint = true)
    )]
    async fn tag(&self, Parameters(args): Parameters<TagArgs>) -> CallToolResult {
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        let mut result =
            CallToolResult::success(vec![ContentBlock::text(format!("tagged {}", args.label))]);
        result.structured_content = Some(serde_json::json!({"ok": true}));
        result
    }

    #[tool(description = "The server's process id")]
    async fn pid(&self) -> String {
        std::process::id().to_string()
    }

    #[tool(description = "An environment variable of the server")]
    async fn env(&self, Parameters(args): Parameters<EnvArgs>) -> String {
        std::env::var(&args.name).unwrap_or_else(|_| "(unset)".to_string())
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {}

/// Serves [`TestServer`] on stdin/stdout until the client goes away.
pub async fn serve_stdio() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    eprintln!("dsh-mcp-test-server: ready (pid {})", std::process::id());
    let service = TestServer::new().serve(rmcp::transport::stdio()).await?;
    service.waiting().await?;
    Ok(())
}

/// Runs [`serve_stdio`] on a current-thread runtime (so `hang` blocks everything); returns
/// the process's exit code. With the arguments `raw …`, runs the hand-written server that
/// answers with lines that are not valid messages, or a tool list that never ends
/// (`raw --endless N`, `raw --tools JSON`, `raw --long-bytes N`).
pub fn main_exit_code() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("raw") {
        return raw::serve(&args[1..]);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("dsh-mcp-test-server: {e}");
            return 1;
        }
    };
    match runtime.block_on(serve_stdio()) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("dsh-mcp-test-server: {e}");
            1
        }
    }
}
