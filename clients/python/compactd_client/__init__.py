"""A typed asyncio client for the compactd daemon.

It spawns ``compactd serve`` (``Client.spawn``) or attaches to a daemon that is already running
over a pair of streams (``Client.connect``), speaks JSON-RPC 2.0 with LSP framing, has one typed
method per request of the protocol (results decoded into the Structs of
``compactd_client.protocol``, generated from the daemon's protocol), and yields server notifications,
decoded too, as async iterators that start listening as soon as they are created::

    async with Client.spawn() as client:
        opened = await client.open_session(cwd=".", model="claude-sonnet-4-5")
        status = await client.tokens_status(opened.session_id)
        async with client.status_updates(opened.session_id) as updates:
            await client.compact_full(opened.session_id)
            async for note in updates:
                if note.phase == "completed":
                    break

The package never imports the daemon: it installs alone (``pip install compactd-client``).
"""

from __future__ import annotations

from compactd_client import protocol
from compactd_client._methods import TYPED_METHODS, TYPED_NOTIFICATIONS, TypedMethods
from compactd_client._subscriptions import Subscription
from compactd_client._transport import RpcError, default_command

__all__ = [
    "TYPED_METHODS",
    "TYPED_NOTIFICATIONS",
    "Client",
    "RpcError",
    "Subscription",
    "default_command",
    "protocol",
]


class Client(TypedMethods):
    """A connection to one daemon, with a typed method per request (see the module docstring)."""
