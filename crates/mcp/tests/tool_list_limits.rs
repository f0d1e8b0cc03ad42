//! A server's tool list is held to pages, tools and bytes: a server that pages forever (or
//! lists too much) fails to start, naming the limit, long before the startup timeout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::{quick, servers};
use dsh_mcp::{McpError, McpOptions, McpToolSource};
use std::time::{Duration, Instant};

/// Starts a raw server paging forever with `per_page` tools a page; the error it gives.
async fn endless(per_page: &str, options: McpOptions) -> (String, Duration) {
    let started = Instant::now();
    let e = McpToolSource::start_with(
        servers(&[("pager", vec!["raw", "--endless", per_page])]),
        options,
    )
    .await
    .unwrap_err();
    assert!(matches!(e, McpError::Start { .. }), "{e:?}");
    (e.to_string(), started.elapsed())
}

fn patient() -> McpOptions {
    // The caps, not the timeout, must stop the listing.
    McpOptions {
        startup_timeout: Duration::from_secs(120),
        ..quick()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_that_never_ends_stops_at_the_page_limit() {
    let (e, took) = endless("1", patient()).await;
    assert!(
        e.starts_with("MCP server `pager` could not start")
            && e.contains("100 pages")
            && e.contains("max_tool_pages"),
        "{e}"
    );
    assert!(took < Duration::from_secs(60), "{took:?}");

    let options = McpOptions {
        max_tool_pages: 3,
        ..patient()
    };
    let (e, _) = endless("1", options).await;
    assert!(e.contains("3 pages"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_tools_stop_at_the_tool_limit() {
    // 50 a page reaches 1,000 tools before 100 pages.
    let (e, took) = endless("50", patient()).await;
    assert!(e.contains("1000 tools") && e.contains("max_tools"), "{e}");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_too_large_stops_at_the_byte_limit() {
    let options = McpOptions {
        max_tool_list_bytes: 4_000,
        ..patient()
    };
    let (e, _) = endless("20", options).await;
    assert!(
        e.contains("4000 bytes") && e.contains("max_tool_list_bytes"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_within_the_limits_starts() {
    let options = McpOptions {
        max_tools: 7,
        max_tool_pages: 1,
        ..quick()
    };
    let source = McpToolSource::start_with(servers(&[("raw", vec!["raw"])]), options)
        .await
        .unwrap();
    assert_eq!(source.tools().len(), 7);
    source.shutdown().await;
}
