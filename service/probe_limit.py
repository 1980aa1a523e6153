"""The rate limit of the unkeyed probes (/healthz, /readyz; GET, HEAD and any other method): a token bucket per
client address (FILL_PROBE_RATE a second, bursts of FILL_PROBE_BURST; a rate of 0: off), so that one client flooding
the open routes gets 429 with Retry-After while every other address, the kubelet's among them, keeps its own full
bucket. The table of buckets holds at most `max_addresses` addresses, the least recently seen dropped first, so a
flood from many addresses cannot grow the memory. Every bucket is touched on the event loop only (no lock)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from service.errors import error_response

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
MAX_ADDRESSES = 4096  # buckets kept; a dropped address starts again with a full bucket
_EPSILON = 1e-9  # a token refilled to within rounding of 1 is a token


class ProbeBuckets:
    """Token buckets by client address: each refills `rate` tokens a second up to `burst` and a request takes one.
    `clock` (seconds, default time.monotonic) is injectable so that tests need no real waiting."""

    def __init__(
        self, rate: float, burst: int, max_addresses: int = MAX_ADDRESSES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.max_addresses = max_addresses
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, when counted)

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, address: str) -> float:
        """0.0 when `address` may make a request now (its token taken); else the seconds until its next token."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        tokens, then = self._buckets.pop(address, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - then) * self.rate)
        wait = 0.0
        if tokens >= 1 - _EPSILON:
            tokens = max(0.0, tokens - 1)
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[address] = (tokens, now)  # the most recently seen last
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        return wait


class ProbeLimit:
    """The middleware: a request for a probe path past its address's bucket gets 429 (kind overloaded) with
    Retry-After, naming the limit and its settings; every other request passes untouched."""

    def __init__(self, app: ASGIApp, buckets: ProbeBuckets) -> None:
        self.app = app
        self.buckets = buckets

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") not in PROBE_PATHS or not self.buckets.enabled:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        wait = self.buckets.take(str(client[0]) if client else "")
        if wait <= 0:
            await self.app(scope, receive, send)
            return
        await error_response(
            "overloaded",
            f"too many probe requests from this address: /healthz and /readyz allow {self.buckets.rate:g} a second "
            f"per client address, in bursts of up to {self.buckets.burst:g} (FILL_PROBE_RATE, FILL_PROBE_BURST; "
            "FILL_PROBE_RATE=0 turns the limit off)",
            headers={"Retry-After": str(max(1, math.ceil(wait)))},
        )(scope, receive, send)
