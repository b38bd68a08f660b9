"""What the load benchmark reads from the server's ``/metrics``: counters, gauges, and quantiles
of a histogram over one phase (the difference of two scrapes)."""

from __future__ import annotations

import asyncio
import math
import re
import time

import httpx

_BUCKET = re.compile(r'^(?P<name>[\w:]+)_bucket\{(?:[^}]*,)?le="(?P<le>[^"]+)"[^}]*\} (?P<v>\S+)$')


async def scrape_text(client: httpx.AsyncClient, url: str) -> str:
    return (await client.get(f"{url}/metrics")).text


def samples(text: str) -> dict[str, float]:
    """The unlabelled samples of a ``/metrics`` page."""
    pairs = [line.rpartition(" ") for line in text.splitlines() if line[:1] not in ("", "#")]
    return {name: float(value) for name, _, value in pairs if "{" not in name}


async def scrape(client: httpx.AsyncClient, url: str) -> dict[str, float]:
    return samples(await scrape_text(client, url))


def buckets(text: str, name: str) -> dict[float, float]:
    """Cumulative counts of histogram ``name`` by upper bound (``+Inf`` included)."""
    found: dict[float, float] = {}
    for line in text.splitlines():
        match = _BUCKET.match(line)
        if match and match["name"] == name:
            found[math.inf if match["le"] == "+Inf" else float(match["le"])] = float(match["v"])
    return found


def histogram_quantile(before: str, after: str, name: str, q: float) -> float | None:
    """The upper bound of the bucket holding quantile ``q`` of the observations made between two
    scrapes (as Prometheus' ``histogram_quantile`` without interpolation); None if none."""
    start, end = buckets(before, name), buckets(after, name)
    counts = sorted((le, end[le] - start.get(le, 0.0)) for le in end)
    total = counts[-1][1] if counts else 0.0
    if total <= 0:
        return None
    return next(le for le, cumulative in counts if cumulative >= q * total)


def generated(before: dict[str, float], after: dict[str, float]) -> int | None:
    key = "ragguard:generation_tokens_total"
    return round(after[key] - before[key]) if key in before and key in after else None


async def wait_drained(client: httpx.AsyncClient, url: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = await scrape(client, url)
        if not sum(m.get(f"ragguard:num_requests_{k}", 0) for k in ("running", "waiting")):
            return
        await asyncio.sleep(0.5)
