"""dsh serve --http driven by the official Python MCP SDK in the stateless 2026-07-28 era (no
initialize: the SDK's `Client(mode="2026-07-28")` puts the version and capabilities in every
request's `_meta`).

argv: URL TOKEN WORKSPACE. Session `py` (named by the Dsh-Session header): list tools, read then
edit a file across requests, an ask answered yes and no through the elicitation callback (the
SDK drives the InputRequiredResult rounds). Session `py-meta` (named by `_meta`
`dev.dsh/session`): the same edit without a read is refused (read-before-edit is per session).
Prints `OK` and exits 0 when every check holds; raises otherwise.
"""

import sys

import anyio
import mcp_types as types
from mcp.client.client import Client
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


def http(**headers):
    return create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}", **headers})


async def main():
    async with http(**{"Dsh-Session": "py"}) as hc:
        async with Client(
            streamable_http_client(URL, http_client=hc), mode="2026-07-28", elicitation_callback=elicit
        ) as c:
            assert c.protocol_version == "2026-07-28", c.protocol_version
            names = [t.name for t in (await c.list_tools()).tools]
            for name in ["read_file", "edit_file", "write_file"]:
                assert name in names, (name, names)
            read = await c.call_tool("read_file", {"path": "notes.txt"})
            assert not read.is_error and "hello" in text(read), text(read)
            edit = await c.call_tool("edit_file", {"path": "notes.txt", "old_string": "hello", "new_string": "bye"})
            assert not edit.is_error, text(edit)
            with open(f"{WORKSPACE}/notes.txt") as f:
                assert f.read().startswith("bye"), "the edit did not land"
            yes = await c.call_tool("write_file", {"path": "ask-yes.txt", "content": "yes"})
            assert not yes.is_error, text(yes)
            no = await c.call_tool("write_file", {"path": "ask-no.txt", "content": "no"})
            assert no.is_error and text(no).startswith("DENIED"), text(no)
            assert len(asked) == 2, asked
    async with http() as hc:
        async with Client(
            streamable_http_client(URL, http_client=hc), mode="2026-07-28", elicitation_callback=elicit
        ) as c:
            unread = await c.call_tool(
                "edit_file",
                {"path": "notes.txt", "old_string": "bye", "new_string": "again"},
                meta={"dev.dsh/session": "py-meta"},
            )
            assert unread.is_error, text(unread)
    print("OK")


anyio.run(main)
