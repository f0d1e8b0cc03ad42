"""A fleet of dsh serve --http --store nodes behind a round-robin balancer, driven by the official
Python MCP SDK in the stateless 2026-07-28 era.

argv: URL WORKSPACE SESSION OTHER. Session SESSION (the Dsh-Session header): read, then edit, then
shell across requests (pausing so the session goes idle and may move to the other node); session
OTHER: the same edit without a read is refused. Prints `OK` and exits 0 when every check holds;
raises otherwise.
"""

import sys
import time

import anyio
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, WORKSPACE, SESSION, OTHER = sys.argv[1:5]


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def call(c, tool, args):
    # A node answers SESSION_BUSY (-32002, retryable) while the other still holds the session.
    for _ in range(200):
        try:
            return await c.call_tool(tool, args)
        except Exception as e:  # the SDK raises the JSON-RPC error
            if "-32002" not in repr(e) and "busy" not in str(e):
                raise
            time.sleep(0.05)
    raise AssertionError("still busy")


async def main():
    async with create_mcp_http_client(headers={"Dsh-Session": SESSION}) as hc:
        async with Client(streamable_http_client(URL, http_client=hc), mode="2026-07-28") as c:
            read = await call(c, "read_file", {"path": "notes.txt"})
            assert not read.is_error and "hello" in text(read), text(read)
            await anyio.sleep(0.4)
            edit = await call(c, "edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "bye"})
            assert not edit.is_error, text(edit)
            await anyio.sleep(0.4)
            shell = await call(c, "shell", {"command": "cat notes.txt"})
            assert not shell.is_error and "bye" in text(shell), text(shell)
            with open(f"{WORKSPACE}/notes.txt") as f:
                assert f.read().startswith("bye"), "the edit did not land"
    async with create_mcp_http_client(headers={"Dsh-Session": OTHER}) as hc:
        async with Client(streamable_http_client(URL, http_client=hc), mode="2026-07-28") as c:
            for _ in range(2):
                unread = await call(c, "edit_file", {"path": "notes.txt", "old_string": "bye", "new_string": "x"})
                assert unread.is_error and "has not been read" in text(unread), text(unread)
    print("OK")


anyio.run(main)
