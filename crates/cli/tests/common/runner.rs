//! The runner of the test programs that have no libtest harness (they are also the MCP test
//! server their tests start, when run with [`SERVE_ENV`] set).
#![allow(dead_code, clippy::print_stderr)]

/// Set in the environment of a test program started as dsh-mcp's MCP test server.
pub const SERVE_ENV: &str = "DSH_CLI_TEST_MCP_SERVER";

/// The `main` of such a program: serves MCP when started as the test server, else runs the
/// tests whose names contain one of the arguments that are not flags (all without any), each
/// caught so that one failure does not hide the others, says `test NAME ... ok|FAILED` for
/// each, and exits 101 when any failed.
pub fn main(tests: &[(&str, fn())]) {
    if std::env::var_os(SERVE_ENV).is_some() {
        std::process::exit(dsh_mcp::test_server::main_exit_code());
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let (mut passed, mut failed) = (0, 0);
    for (name, test) in tests {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(test) {
            Ok(()) => {
                passed += 1;
                eprintln!("test {name} ... ok");
            }
            Err(_) => {
                failed += 1;
                eprintln!("test {name} ... FAILED");
            }
        }
    }
    eprintln!("test result: {passed} passed; {failed} failed");
    if failed > 0 {
        std::process::exit(101);
    }
}
