"""fastmcp's Client against dsh serve, driven as a scripted agent would drive it (fastmcp has no
model of its own)."""
import asyncio

from fastmcp import Client

from dsh_target import HOOK_CONTEXT, TOOLS, check, fastmcp_transport


def text(result):
    return "\n".join(b.text for b in result.content if getattr(b, "text", None))


async def main():
    async with Client(fastmcp_transport()) as client:
        tools = await client.list_tools()
        check(TOOLS <= {t.name for t in tools}, f"every tool is listed: {[t.name for t in tools]}")
        read = await client.call_tool("read_file", {"path": "a.txt", "offset": None, "limit": None})
        check(HOOK_CONTEXT in text(read), f"the hook context is in the text: {text(read)}")
        check(HOOK_CONTEXT in str(read.structured_content),
              f"and in the structured result: {read.structured_content}")
        grep = await client.call_tool("grep", {"pattern": "one", "path": "", "type": "",
                                               "glob": None, "head_limit": 0})
        check("a.txt" in text(grep), f"grep with empty optionals: {text(grep)}")
        edit = await client.call_tool("edit_file", {"path": "a.txt", "old_string": "one",
                                                    "new_string": "uno", "edits": None})
        check("Edited" in text(edit), text(edit))
        shell = await client.call_tool("shell", {"command": "echo from-shell"})
        check("from-shell" in text(shell), text(shell))
        denied = await client.call_tool("read_file", {"path": "../outside.txt"},
                                        raise_on_error=False)
        check(denied.is_error and text(denied).startswith("DENIED"), text(denied))
    print("OK")


asyncio.run(main())
