//! The MCP server dsh-mcp's tests launch (see `dsh_mcp::test_server`).

fn main() {
    std::process::exit(dsh_mcp::test_server::main_exit_code());
}
