"""Where the suites find dsh: `DSH_URL` + `DSH_TOKEN` (streamable HTTP with a bearer token),
or `DSH_BIN` + `DSH_WORKSPACE` + `DSH_LOG` (stdio: a `dsh serve` started by the framework)."""
import os

HOOK_CONTEXT = "HOOK-CONTEXT-7f3a"
TOOLS = {"apply_patch", "edit_file", "glob", "grep", "list_dir", "read_file", "run_code",
         "shell", "write_file"}


def http():
    """(url, token) when the suite runs over HTTP, else None."""
    url = os.environ.get("DSH_URL")
    return (url, os.environ["DSH_TOKEN"]) if url else None


def stdio_command():
    """(command, args) of a stdio `dsh serve`."""
    args = ["serve", "--workspace", os.environ["DSH_WORKSPACE"], "--log", os.environ["DSH_LOG"],
            "--hooks", os.environ["DSH_HOOKS"], "--shell-sandbox", "full"]
    return os.environ["DSH_BIN"], args


def fastmcp_transport():
    """The target as a fastmcp transport (fastmcp's Client, and pydantic-ai's MCPToolset)."""
    from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
    if target := http():
        return StreamableHttpTransport(target[0], auth=target[1])
    command, args = stdio_command()
    return StdioTransport(command, args, keep_alive=False)


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
