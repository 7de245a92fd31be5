"""What a key's node offers, and the script-free ways to make a check and a change atomic.

The core learns what each server offers on every new connection (HELLO's server, version and
modules, and ``COMMAND INFO`` of the commands whose names differ): ``Client.offers``. Where a
server has them, a lock's release is one DELIFEQ (Valkey 9.0) or DELEX IFEQ (Redis 8.4), and a
compare-and-set one SET IFEQ (Valkey 8.1, Redis 8.4): no script. Elsewhere the Lua scripts of
``_scripts`` stay. A script refused (an ACL user without ``@scripting``, a Valkey 9.1 without
its lua module) is noted on the node (``Client.refuse_scripts``, until a new connection
learns again), and what has a script-free way takes it from then on; what has none raises
``ScriptingUnavailableError``, naming what would make it work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redoxide import _scripts
from redoxide._protocols import owner
from redoxide.exceptions import NoPermError, ResponseError, ScriptingUnavailableError

if TYPE_CHECKING:
    from redoxide._protocols import ClientLike
    from redoxide._redoxide import Client
    from redoxide.plans import Plan

__all__ = [
    "conditional_delete",
    "consequences",
    "has",
    "node_of",
    "offer_refused",
    "refused",
    "release_command",
    "scripts_refused",
    "scripts_unavailable",
]

#: What makes an operation that needs a script work, for the message of its error.
_REMEDY = (
    "grant the ACL user +@scripting (and load Valkey's lua module), or use a server with a "
    "script-free way: Valkey 8.1+ (SET IFEQ), Valkey 9.0+ (DELIFEQ) or Redis 8.4+ (DELEX)"
)


def node_of(client: ClientLike, key: str) -> Client | None:
    """The Rust client of the primary that owns `key` now (None while that is not known)."""
    return owner(client, key)


def has(node: Client | None, name: str) -> bool:
    """Whether `node` offers `name` ("MSETEX", "SET IFEQ", "DELIFEQ", "DELEX", "CLUSTERSCAN",
    "Lua"): False while it is not known."""
    if node is None:
        return False
    offers = node.offers
    return offers is not None and name in offers["offers"]


def scripts_refused(node: Client | None) -> bool:
    """Whether scripts are known not to run on `node` (refused, or no Lua engine)."""
    return node is not None and node.scripts_refused


def refused(exc: BaseException) -> bool:
    """Whether `exc`, the failure of EVAL or EVALSHA, says scripts do not run for this client:
    NOPERM (an ACL user without ``@scripting``), or a server without a Lua engine (Valkey 9.1
    without its module: "Could not find scripting engine"), or without EVAL at all."""
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc).lower()
    if isinstance(exc, NoPermError):
        # Refused EVAL / EVALSHA itself, not a key or a command a script ran (that is ERR).
        return "'eval' command" in text or "'evalsha' command" in text
    return "scripting engine" in text or ("unknown command" in text and "eval" in text)


def offer_refused(exc: BaseException, name: str) -> bool:
    """Whether `exc` is the server refusing `name` ("MSETEX"...), a command it offered: NOPERM
    for it (an ACL that lists commands by name, written before the command existed), or an
    unknown command (a node not upgraded yet, reached by a redirect during a rolling upgrade).
    Then today's way works: the caller notes it on the node (``Client.refuse``) and retries."""
    if not isinstance(exc, ResponseError):
        return False
    text = str(exc).lower()
    command = name.split()[0].lower()
    if isinstance(exc, NoPermError):
        return f"'{command}' command" in text
    return "unknown command" in text and f"'{command}'" in text


def note_refused(node: Client | None) -> Plan[None]:
    """Remember on `node` that scripts are refused (until a new connection learns again),
    having learnt first what it offers if no connection's handshake told yet."""
    if node is None:
        return
    if node.offers is None:
        yield from _learn(node)
    node.refuse_scripts()


def _learn(node: Client) -> Plan[None]:
    """Ask `node` what it offers (HELLO, and COMMAND INFO of the names that differ), as a new
    connection's handshake does."""
    hello, probe = yield node.pipeline_results, ([("HELLO",), ("COMMAND", "INFO", *_PROBED)],)
    if not isinstance(hello, list):
        return  # a server before 6: nothing to learn
    fields = {_text(k): v for k, v in zip(hello[::2], hello[1::2], strict=False)}
    modules = [
        _text(dict(zip(m[::2], m[1::2], strict=False)).get(b"name", b""))
        for m in fields.get("modules") or []
        if isinstance(m, list)
    ]
    probed = None
    if isinstance(probe, list) and len(probe) == len(_PROBED):
        probed = [entry is not None for entry in probe]
    node.learn_offers(
        _text(fields.get("server", b"")), _text(fields.get("version", b"")), modules, probed
    )


#: The commands a handshake probes by name, in the core's order (offers.rs, PROBED).
_PROBED = ("MSETEX", "DELIFEQ", "DELEX", "CLUSTERSCAN")


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def scripts_unavailable(what: str, cause: BaseException | None = None) -> ScriptingUnavailableError:
    """The error for `what`, which needs a script this server does not run for us."""
    exc = ScriptingUnavailableError(
        f"{what} needs a Lua script, and this server runs none for this client "
        f"(no @scripting permission, or no Lua engine), nor offers a script-free way: {_REMEDY}"
    )
    exc.__cause__ = cause
    return exc


def conditional_delete(
    node: Client | None, key: Any, value: Any, *, expiring: bool = False
) -> tuple[Any, ...] | None:
    """The one command that deletes `key` only while it holds `value` (DELIFEQ on Valkey 9.0+,
    DELEX IFEQ on Redis 8.4+; 1 if deleted, 0 if not), or None where the node has neither.
    With `expiring` (a lock's key, which nobody decodes), where there is SET IFEQ alone
    (Valkey 8.1): an empty value that expires in a millisecond, set only while it holds
    `value` (truthy if set): gone for anyone taking it with SET NX a moment later."""
    if has(node, "DELIFEQ"):
        return ("DELIFEQ", key, value)
    if has(node, "DELEX"):
        return ("DELEX", key, "IFEQ", value)
    if expiring and has(node, "SET IFEQ"):
        return ("SET", key, b"", "IFEQ", value, "PX", 1)
    return None


def release_command(
    node: Client | None, key: Any, token: Any, *, scripts: bool = True
) -> tuple[Any, ...] | None:
    """What gives a lock's key back only while it holds `token`: DELIFEQ / DELEX where
    offered, else the release script unless scripts are refused on `node` (or `scripts` is
    False: the caller just saw one refused), else SET IFEQ's expiring empty value (see
    conditional_delete); None where there is nothing of these."""
    command = conditional_delete(node, key, token)
    if command is not None:
        return command
    if scripts and not scripts_refused(node):
        return ("EVAL", _scripts.RELEASE, 1, key, token)
    return conditional_delete(node, key, token, expiring=True)


def consequences(node: Client | None) -> str:
    """What follows for the cache where scripts do not run on `node`, for a check's message."""
    if has(node, "SET IFEQ") and (has(node, "DELIFEQ") or has(node, "DELEX")):
        return (
            "every feature works without scripts; incr and decr take one more round trip "
            "(GET, then SET IFEQ)"
        )
    if has(node, "SET IFEQ"):
        return (
            "every feature works without scripts; incr and decr take one more round trip "
            "(GET, then SET IFEQ), and an incr_version across cluster slots raises "
            "ScriptingUnavailableError"
        )
    return (
        "incr, decr, a lock's release and extend, and an incr_version across cluster slots "
        "raise ScriptingUnavailableError (this server has no SET IFEQ, DELIFEQ or DELEX); "
        "get_or_set's stampede protection, incr_version and clear work without scripts"
    )
