"""dsh serve --http driven by the official Python MCP SDK (streamable HTTP, the 2025-11-25
handshake: one Mcp-Session-Id per client session).

argv: URL TOKEN WORKSPACE. Two client sessions: the first lists tools, reads and edits a file,
is denied a write, answers an ask yes and no, calls an upstream tool, makes 10 concurrent safe
calls; the second may not edit the file the first read (read-before-edit is per session).
Prints `OK` and exits 0 when every check holds; raises otherwise.
"""

import sys
import time

import anyio
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, TOKEN, WORKSPACE = sys.argv[1:4]
asked = []


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def elicit(context, params):
    asked.append(params.message)
    if "ask-yes" in params.message:
        return types.ElicitResult(action="accept", content={})
    return types.ElicitResult(action="decline")


def http():
    return create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})


async def first():
    async with http() as client, streamable_http_client(URL, http_client=client) as (read, write):
        async with ClientSession(read, write, elicitation_callback=elicit) as s:
            await s.initialize()

            tools = (await s.list_tools()).tools
            names = [t.name for t in tools]
            assert names == sorted(names), names
            for name in ["read_file", "edit_file", "write_file", "mcp__test__echo", "mcp__test__peek"]:
                assert name in names, (name, names)
            by_name = {t.name: t for t in tools}
            assert by_name["read_file"].annotations.read_only_hint is True
            assert by_name["write_file"].annotations.destructive_hint is True

            # Read, then edit: read-before-edit holds across requests.
            read = await s.call_tool("read_file", {"path": "notes.txt"})
            assert not read.is_error and "hello" in text(read), text(read)
            unread = await s.call_tool("edit_file", {"path": "other.txt", "old_string": "x", "new_string": "y"})
            assert unread.is_error, text(unread)
            edit = await s.call_tool("edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "bye"})
            assert not edit.is_error, text(edit)
            with open(f"{WORKSPACE}/notes.txt") as f:
                assert f.read().startswith("bye"), "the edit did not land"

            # A denied write, and an ask answered yes then no (elicitation over HTTP).
            denied = await s.call_tool("write_file", {"path": "secret.txt", "content": "x"})
            assert denied.is_error and text(denied).startswith("DENIED"), text(denied)
            yes = await s.call_tool("write_file", {"path": "ask-yes.txt", "content": "ok"})
            assert not yes.is_error, text(yes)
            no = await s.call_tool("write_file", {"path": "ask-no.txt", "content": "no"})
            assert no.is_error and text(no).startswith("DENIED"), text(no)
            assert len(asked) == 2, asked

            echo = await s.call_tool("mcp__test__echo", {"text": "through dsh"})
            assert not echo.is_error and "through dsh" in text(echo), text(echo)

            # 10 concurrent safe calls overlap.
            started = time.monotonic()
            async with anyio.create_task_group() as tg:
                for _ in range(10):
                    tg.start_soon(s.call_tool, "mcp__test__peek", {"ms": 300})
            wall = time.monotonic() - started
            assert wall < 2.5, f"10 calls of 300 ms took {wall:.2f} s"


async def second():
    async with http() as client, streamable_http_client(URL, http_client=client) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            # This session never read notes.txt: the other session's read does not count.
            edit = await s.call_tool("edit_file", {"path": "notes.txt", "old_string": "bye", "new_string": "again"})
            assert edit.is_error, text(edit)


async def main():
    await first()
    await second()
    print("OK")


anyio.run(main)
