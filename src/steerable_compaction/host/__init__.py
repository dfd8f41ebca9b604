"""The host side: a session a host drives, its events, seed reconcile, the JSON-RPC sidecar.

`session` (`Session`, usable without any transport) sits on the loop and the record; `events`
maps record entries to host events; `reconcile` matches a host's history against the record;
`sessions` keeps several sessions by id; `protocol` frames JSON-RPC 2.0, `rpc` serves the
sessions over it and `stdio` runs that on stdin/stdout. Nothing below `host` imports it.
"""

from __future__ import annotations

from .events import EventSink, entry_event
from .protocol import RpcError
from .reconcile import ReconcilePlan, SeedConflictError, apply_reconcile, plan_reconcile
from .rpc import JsonRpcServer
from .session import EventTap, SendResult, Session
from .sessions import SessionError, Sessions
from .stdio import serve_stdio

__all__ = [
    "EventSink",
    "EventTap",
    "JsonRpcServer",
    "ReconcilePlan",
    "RpcError",
    "SeedConflictError",
    "SendResult",
    "Session",
    "SessionError",
    "Sessions",
    "apply_reconcile",
    "entry_event",
    "plan_reconcile",
    "serve_stdio",
]
