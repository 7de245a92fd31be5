"""Type stubs for the compiled core (checked against the binary by stubtest)."""

from asyncio import AbstractEventLoop
from collections.abc import Awaitable, Callable, Generator, Iterable, Sequence
from contextvars import Context
from typing import Any, Literal, final, overload

# One command: its name, then its arguments.
_Command = Sequence[str | bytes | int | float]

__version__: str
# Whether this build counts (the "stats" cargo feature): without it, stats() is all zeros.
STATS_ENABLED: bool
__all__ = [
    "STATS_ENABLED",
    "Bridge",
    "Client",
    "Credentials",
    "Holding",
    "NearCache",
    "Pending",
    "Ready",
    "__version__",
    "_flush_writes",
    "_interpreter_exits",
    "command_facts",
    "current_bridge",
    "decode_many",
    "fanout",
    "key_slot",
    "key_slots",
    "lz4_compress",
    "lz4_decompress",
    "zstd_compress",
    "zstd_decompress",
]

@final
class Credentials:
    """The current credentials of one CREDENTIAL_PROVIDER (see redoxide._credentials)."""

    def __new__(cls) -> Credentials: ...
    def set(self, username: str | None, password: str) -> bool: ...
    @property
    def generation(self) -> int: ...
    def wait_for_request(self, timeout: float) -> bool: ...
    def fail(self, message: str) -> None: ...
    def close(self) -> None: ...
    def reopen(self) -> None: ...

@final
class Client:
    def __new__(
        cls,
        url: str,
        *,
        connect_timeout: float,
        response_timeout: float,
        username: str | None = None,
        password: str | None = None,
        db: int | None = None,
        readonly: bool = False,
        tls_ca_certs: bytes | None = None,
        tls_certfile: bytes | None = None,
        tls_keyfile: bytes | None = None,
        tls_verify: bool = True,
        tls_check_hostname: bool = True,
        shared_sync: bool = False,
        credentials: Credentials | None = None,
    ) -> Client: ...
    @property
    def address(self) -> str: ...
    # {"enabled": bool, "calls": {family: n}, "errors": {family: {error class: n}}, "hits",
    # "misses", "bytes_sent", "bytes_received", "connections", "reconnects", "timeouts": int,
    # "latency": {family: {"bounds_us": [int], "counts": [int], "sum_us": float, "count": int}}}
    def stats(self) -> dict[str, Any]: ...
    def reset_stats(self, *, connections: bool = False) -> None: ...
    # {"server": str, "version": str, "modules": [str], "offers": [str], "refused": [str],
    # "scripts_refused": bool}, None until a connection told.
    @property
    def offers(self) -> dict[str, Any] | None: ...
    def learn_offers(
        self, server: str, version: str, modules: list[str], probed: list[bool] | None = None
    ) -> None: ...
    @property
    def scripts_refused(self) -> bool: ...
    def refuse_scripts(self) -> None: ...
    def refuse(self, name: str) -> None: ...
    @overload
    def get(self, key: str, bridge: None = None) -> bytes | None: ...
    @overload
    def get(self, key: str, bridge: Bridge) -> Awaitable[bytes | None]: ...
    @overload
    def set(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: None = None,
    ) -> bool: ...
    @overload
    def set(
        self, key: str, value: bytes, ttl_ms: int | None, nx: bool, xx: bool, bridge: Bridge
    ) -> Awaitable[bool]: ...
    @overload
    def mget(self, keys: Iterable[str | bytes], bridge: None = None) -> list[bytes | None]: ...
    @overload
    def mget(
        self, keys: Iterable[str | bytes], bridge: Bridge
    ) -> Awaitable[list[bytes | None]]: ...
    @overload
    def set_many(
        self,
        keys: Iterable[str | bytes],
        values: Iterable[bytes],
        ttl_ms: int | None = None,
        bridge: None = None,
    ) -> Any: ...
    @overload
    def set_many(
        self,
        keys: Iterable[str | bytes],
        values: Iterable[bytes],
        ttl_ms: int | None,
        bridge: Bridge,
    ) -> Awaitable[Any]: ...
    @overload
    def execute(self, args: _Command, bridge: None = None) -> Any: ...
    @overload
    def execute(self, args: _Command, bridge: Bridge) -> Awaitable[Any]: ...
    @overload
    def pipeline(self, commands: Iterable[_Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline(self, commands: Iterable[_Command], bridge: Bridge) -> Awaitable[list[Any]]: ...
    @overload
    def pipeline_results(self, commands: Iterable[_Command], bridge: None = None) -> list[Any]: ...
    @overload
    def pipeline_results(self, commands: Iterable[_Command], bridge: Bridge) -> Pending: ...

@final
class Bridge:
    def __new__(
        cls,
        event_loop: AbstractEventLoop,
        *,
        wakeup: Literal["eventfd", "pipe", "threadsafe"] | None = None,
    ) -> Bridge: ...
    def fileno(self) -> int | None: ...
    @property
    def wakeup(self) -> Literal["eventfd", "pipe", "threadsafe"]: ...
    def drain(self) -> None: ...

@final
class Pending:
    def __await__(self) -> Generator[Any, None, Any]: ...
    def __iter__(self) -> Pending: ...
    def __next__(self) -> Any: ...
    def sent_with(self, others: list[Pending]) -> None: ...
    # Future-like while its task waits on it (what asyncio's task asks of a future).
    _asyncio_future_blocking: bool | None
    def get_loop(self) -> AbstractEventLoop: ...
    def add_done_callback(
        self, callback: Callable[[Pending], object], *, context: Context | None = None
    ) -> None: ...
    def remove_done_callback(self, callback: Callable[[Pending], object]) -> int: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def cancelled(self) -> bool: ...
    def done(self) -> bool: ...
    def result(self) -> None: ...
    def exception(self) -> None: ...

@final
class Ready:
    def __new__(cls, value: Any) -> Ready: ...
    def __await__(self) -> Ready: ...
    def __iter__(self) -> Ready: ...
    def __next__(self) -> None: ...

@final
class Holding:
    def __await__(self) -> Holding: ...
    def __iter__(self) -> Holding: ...
    def __next__(self) -> Any: ...
    def send(self, value: Any) -> Any: ...
    def throw(self, *args: Any) -> Any: ...
    def close(self) -> None: ...

@final
class NearCache:
    def __new__(
        cls,
        prefixes: list[bytes],
        *,
        max_bytes: int,
        max_value_bytes: int,
        max_ttl: float,
        max_stale: float,
        marker: str | None = None,
        admit_after: int | None = None,
        logger: str | None = None,
    ) -> NearCache: ...
    def track(self, clients: list[Client], check_db: bool = True) -> None: ...
    def lookup(self, key: str | bytes) -> bytes | int | bool | None: ...
    def get(self, client: Client, key: str, bridge: Bridge | None = None) -> Any: ...
    def route(
        self,
        homes: Callable[[], Client | list[Client] | None],
        reads: bool,
        read: Callable[..., Any],
        recovered: Callable[[Any, str, Bridge], Awaitable[Any]],
        recovers: tuple[type[BaseException], ...],
        read_many: Callable[..., Any],
        finish: Callable[[list[Any], list[Any], list[Any], list[int], Bridge | None], Any],
        write: Callable[..., Any],
        rewritten: Callable[..., Awaitable[bool]],
        execute: Callable[..., Any],
    ) -> None: ...
    def get_routed(self, key: str, bridge: Bridge | None = None) -> Any: ...
    def set_routed(
        self,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Bridge | None = None,
    ) -> Any: ...
    def mget_routed(self, keys: Iterable[str | bytes], bridge: Bridge | None = None) -> Any: ...
    def set_many_parts(
        self,
        parts: list[tuple[Client, list[str | bytes], list[bytes]]],
        ttl_ms: int | None = None,
        bridge: Bridge | None = None,
    ) -> list[Any]: ...
    def mget(
        self,
        client: Client,
        rest: Callable[[list[Any], list[int], Any], Awaitable[list[Any]]],
        keys: Iterable[str | bytes],
        bridge: Bridge | None = None,
    ) -> Any: ...
    def has(self, key: str | bytes) -> bool: ...
    def set(
        self,
        client: Client,
        key: str,
        value: bytes,
        ttl_ms: int | None = None,
        nx: bool = False,
        xx: bool = False,
        bridge: Bridge | None = None,
    ) -> Any: ...
    def set_many(
        self,
        client: Client,
        keys: Iterable[str | bytes],
        values: Iterable[bytes],
        ttl_ms: int | None = None,
        bridge: Bridge | None = None,
    ) -> Any: ...
    def execute(self, client: Client, args: Sequence[Any], bridge: Bridge | None = None) -> Any: ...
    def execute_routed(self, args: Sequence[Any], bridge: Bridge | None = None) -> Any: ...
    def write_around(
        self,
        kind: int,
        what: Any,
        send: Callable[..., Any],
        args: tuple[Any, ...],
        bridge: Bridge | None = None,
    ) -> Any: ...
    def set_peers(self, peers: list[NearCache]) -> None: ...
    @overload
    def fill(self, client: Client, key: str, token: int, bridge: None = None) -> bytes | None: ...
    @overload
    def fill(self, client: Client, key: str, token: int, bridge: Bridge) -> Pending: ...
    @overload
    def fill_keys(
        self,
        client: Client,
        keys: Sequence[str | bytes],
        tokens: Sequence[int | None],
        raising: bool = False,
        bridge: None = None,
    ) -> list[Any]: ...
    @overload
    def fill_keys(
        self,
        client: Client,
        keys: Sequence[str | bytes],
        tokens: Sequence[int | None],
        raising: bool,
        bridge: Bridge,
    ) -> Pending: ...
    def fill_fanout(
        self, parts: list[tuple[Client, Sequence[str | bytes], Sequence[int | None]]]
    ) -> list[Any]: ...
    def cancel(self, key: str | bytes, token: int) -> None: ...
    def forget_keys(self, keys: Iterable[str | bytes], count: bool = True) -> bool: ...
    def flush(self, reason: str) -> None: ...
    def refusal(self) -> str: ...
    def notice(self) -> str: ...
    def marker(self) -> str: ...
    def stats(self) -> dict[str, Any]: ...

def _flush_writes() -> None: ...
def _interpreter_exits() -> None: ...
def current_bridge() -> Bridge: ...
def decode_many(
    keys: list[Any],
    values: list[bytes | None],
    loads: Callable[[bytes], Any],
    heads: bytes,
    decode: Callable[[bytes, Any], Any],
) -> dict[Any, Any] | None: ...
def lz4_compress(data: bytes, level: int = 0) -> bytes: ...
def lz4_decompress(data: bytes, max_size: int) -> bytes: ...
def zstd_compress(data: bytes, level: int = 3) -> bytes: ...
def zstd_decompress(data: bytes, max_size: int) -> bytes: ...
def key_slot(key: str | bytes) -> int: ...
def key_slots(keys: Iterable[str | bytes]) -> list[int]: ...

# {name: (effect, keys, route)}: the command table (src/commands.rs).
def command_facts() -> dict[
    str,
    tuple[
        Literal["read", "write", "flush", "control"],
        Literal[
            "none", "first", "two", "all", "pairs", "third", "counted", "streams", "counted_pairs"
        ],
        Literal[
            "slot",
            "each_key_summed",
            "each_key_in_order",
            "every_primary_summed",
            "every_primary_joined",
            "every_primary",
        ],
    ],
]: ...
def fanout(calls: Sequence[tuple[Client, Iterable[_Command]]]) -> list[Any]: ...
