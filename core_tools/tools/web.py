"""Safe page download for the `fetch` tool: SSRF guard at connect time, size and time caps, readable text."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

import httpcore
import httpx

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# (host, port) -> the addresses a connection may go to; injectable so tests never need real DNS.
Resolver = Callable[[str, int], Awaitable[list[str]]]
AddressPolicy = Callable[[IPAddress], bool]

MAX_REDIRECTS = 5
DEFAULT_MAX_BYTES = 2 * 1024 * 1024
USER_AGENT = "Mozilla/5.0 (compatible; telegram-assistant/0.1; +https://github.com/)"

_TEXT_TYPES = ("text/plain", "application/json", "text/markdown", "text/csv", "application/xml", "text/xml")
_HTML_TYPES = ("text/html", "application/xhtml+xml")


class BlockedAddressError(Exception):
    """A connection was refused because the target resolves to an address the policy forbids."""


class FetchError(Exception):
    """A page could not be fetched; the message is safe to show the model."""


def is_public_address(ip: IPAddress) -> bool:
    """Return True when `ip` is a globally routable unicast address (the only kind fetch may reach)."""
    # An IPv4-mapped IPv6 address (::ffff:127.0.0.1) reaches the IPv4 host, so judge that one.
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    ):
        return False
    # is_global also excludes shared address space (100.64/10, carrier NAT) and similar non-public ranges.
    return ip.is_global


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve `host` with the system resolver (literal IPs come back unchanged)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[str] = []
    for info in infos:
        addr = str(info[4][0])
        if addr not in seen:
            seen.append(addr)
    return seen


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Network backend that resolves, checks every address, then connects to a checked IP.

    Checking inside connect_tcp (rather than before the request) covers every redirect hop and closes the
    DNS-rebinding window: the socket goes to the exact address that was checked.
    """

    def __init__(self, policy: AddressPolicy, resolver: Resolver = system_resolver) -> None:
        self._policy = policy
        self._resolver = resolver
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface names it so
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to `host` only if every address it resolves to passes the policy."""
        try:
            addresses = await asyncio.wait_for(self._resolver(host, port), timeout)
        except (OSError, TimeoutError) as exc:
            raise httpcore.ConnectError(f"could not resolve {host}: {exc}") from exc
        if not addresses:
            raise httpcore.ConnectError(f"could not resolve {host}")
        # Every address must pass: a name that mixes public and private answers is refused whole.
        for addr in addresses:
            ip = ipaddress.ip_address(addr.split("%", 1)[0])
            if not self._policy(ip):
                shown = host if host == addr else f"{host} ({addr})"
                raise BlockedAddressError(
                    f"refusing to fetch {shown}: it is a private, loopback, link-local, multicast or "
                    "reserved address"
                )
        last: Exception | None = None
        for addr in addresses:
            try:
                return await self._inner.connect_tcp(
                    addr, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's backend interface names it so
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Refuse unix sockets: fetch only ever talks TCP."""
        raise BlockedAddressError("unix sockets are not allowed")

    async def sleep(self, seconds: float) -> None:
        """Delegate to the default backend."""
        await self._inner.sleep(seconds)


class GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx transport whose connection pool uses `GuardedBackend`."""

    def __init__(self, policy: AddressPolicy, resolver: Resolver = system_resolver) -> None:
        super().__init__(trust_env=False)
        # httpx has no public hook for the network backend, so swap the pool it built for one that uses ours.
        # (Env proxies are off above: a proxy would hide the real target from the address check.)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            network_backend=GuardedBackend(policy, resolver),
        )


@dataclass(frozen=True)
class FetchedPage:
    """A downloaded page reduced to text."""

    url: str
    final_url: str
    status: int
    content_type: str
    title: str | None
    text: str
    truncated: bool


class _TextDump(HTMLParser):
    """Stdlib HTML-to-text: visible text and the <title>, skipping scripts, styles and similar."""

    _SKIP = frozenset({"script", "style", "noscript", "template", "svg", "head", "iframe", "object"})
    _BLOCK = frozenset(
        {
            "p",
            "div",
            "br",
            "li",
            "tr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "section",
            "article",
            "pre",
            "blockquote",
            "table",
            "ul",
            "ol",
            "header",
            "footer",
            "dd",
            "dt",
            "hr",
        }
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in self._SKIP:
            self._skip_depth += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in self._SKIP:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title_parts.append(data)
        elif self._skip_depth == 0:
            self.parts.append(data)


_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n+")


def _tidy(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def html_to_text(html: str) -> str:
    """Return the visible text of an HTML fragment or page on one line (entities decoded, tags dropped)."""
    if "<" not in html and "&" not in html:
        return " ".join(html.split())  # no markup and no entities: parsing would return the same text
    parser = _TextDump()
    parser.feed(html)
    parser.close()
    return " ".join("".join(parser.parts).split())


def _html_title_and_dump(html: str) -> tuple[str | None, str]:
    parser = _TextDump()
    parser.feed(html)
    parser.close()
    title = " ".join("".join(parser.title_parts).split()) or None
    return title, _tidy("".join(parser.parts))


def extract_readable(html: str, url: str | None = None) -> tuple[str | None, str]:
    """Return (title, main text) of an HTML page: trafilatura, or a stdlib text dump when it finds nothing."""
    import trafilatura  # imported lazily: it pulls in lxml and friends, only needed when a page is fetched

    title, dump = _html_title_and_dump(html)
    text: str | None = None
    try:
        text = trafilatura.extract(html, url=url, include_comments=False, include_tables=True, fast=True)
    except Exception:  # trafilatura can trip over odd markup; the stdlib dump below is the fallback
        log.debug("trafilatura failed on %s", url, exc_info=True)
    return title, _tidy(text) if text and text.strip() else dump


def _decode(body: bytes, charset: str | None) -> str:
    if charset:
        try:
            return body.decode(charset, errors="replace")
        except LookupError:
            pass
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return body.decode("cp1252", errors="replace")


def _classify(content_type: str, body: bytes) -> str:
    """Return "html", "text" or "binary" from the media type, sniffing only when the server gave none."""
    if content_type in _HTML_TYPES:
        return "html"
    if (
        content_type in _TEXT_TYPES
        or content_type.startswith("text/")
        or content_type.endswith(("+json", "+xml"))
    ):
        return "text"
    if content_type in ("", "application/octet-stream") and b"\x00" not in body[:1024]:
        head = body[:512].lstrip().lower()
        return "html" if head.startswith((b"<!doctype html", b"<html")) else "text"
    return "binary"


class PageFetcher:
    """Downloads one URL with redirect, size and time limits and the address policy enforced."""

    def __init__(
        self,
        *,
        allow_private: bool = False,
        timeout_s: float = 15.0,
        max_bytes: int = DEFAULT_MAX_BYTES,
        resolver: Resolver = system_resolver,
        policy: AddressPolicy | None = None,
    ) -> None:
        self.allow_private = allow_private
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        chosen: AddressPolicy = policy or ((lambda _ip: True) if allow_private else is_public_address)
        self._client = httpx.AsyncClient(
            transport=GuardedTransport(chosen, resolver),
            follow_redirects=False,  # redirects are followed by hand so each hop's scheme is checked
            trust_env=False,
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
            headers={
                "User-Agent": USER_AGENT,
                "Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5",
            },
        )

    async def aclose(self) -> None:
        """Close the fetch client."""
        await self._client.aclose()

    @staticmethod
    def check_url(url: str) -> httpx.URL:
        """Parse `url` and refuse anything but http(s) with a host."""
        try:
            parsed = httpx.URL(url)
        except (httpx.InvalidURL, TypeError) as exc:
            raise FetchError(f"not a valid URL: {url[:200]!r}") from exc
        if parsed.scheme not in ("http", "https"):
            raise FetchError(
                f"only http and https URLs can be fetched, not {parsed.scheme or 'a bare path'}://"
            )
        if not parsed.host:
            raise FetchError(f"the URL has no host: {url[:200]!r}")
        return parsed

    async def fetch(self, url: str) -> tuple[httpx.URL, int, str, str | None, bytes, bool]:
        """Download `url`: (final URL, status, media type, charset, body, truncated), within the time cap."""
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._fetch(url)
        except TimeoutError as exc:
            raise FetchError(f"gave up after {self.timeout_s:g} s: the server was too slow") from exc
        except BlockedAddressError as exc:
            raise FetchError(
                str(exc) + " (the operator can allow this with the fetch allow-private setting)"
            ) from exc
        except httpx.TimeoutException as exc:
            raise FetchError(f"timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise FetchError(f"request failed: {type(exc).__name__}: {str(exc)[:200]}") from exc

    async def _fetch(self, url: str) -> tuple[httpx.URL, int, str, str | None, bytes, bool]:
        current = self.check_url(url)
        for _hop in range(MAX_REDIRECTS + 1):
            async with self._client.stream("GET", current) as resp:
                if resp.is_redirect:
                    location = resp.headers.get("location", "")
                    if not location:
                        raise FetchError(f"HTTP {resp.status_code} redirect without a Location header")
                    current = self.check_url(urljoin(str(current), location))
                    continue
                if resp.status_code >= 400:
                    raise FetchError(f"HTTP {resp.status_code} from {current.host}")
                media, charset = _media_type(resp.headers.get("content-type", ""))
                body = bytearray()
                truncated = False
                # Stop reading at the cap rather than trust Content-Length (absent or wrong on many servers).
                async for chunk in resp.aiter_bytes():
                    body.extend(chunk)
                    if len(body) >= self.max_bytes:
                        del body[self.max_bytes :]
                        truncated = True
                        break
                return current, resp.status_code, media, charset, bytes(body), truncated
        raise FetchError(f"more than {MAX_REDIRECTS} redirects")

    async def fetch_page(self, url: str) -> FetchedPage:
        """Download `url` and reduce it to readable text; binary content is refused."""
        final, status, media, charset, body, truncated = await self.fetch(url)
        kind = _classify(media, body)
        if kind == "binary":
            raise FetchError(f"{final} is {media or 'binary data'}, which cannot be read as text")
        text = _decode(body, charset)
        title: str | None = None
        if kind == "html":
            # trafilatura on a 2 MB page takes a noticeable CPU slice: keep it off the event loop.
            title, text = await asyncio.to_thread(extract_readable, text, str(final))
        else:
            text = text.strip()
        return FetchedPage(
            url=url,
            final_url=str(final),
            status=status,
            content_type=media or "unknown",
            title=title,
            text=text,
            truncated=truncated,
        )


def _media_type(header: str) -> tuple[str, str | None]:
    media, _, params = header.partition(";")
    charset: str | None = None
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.lower() == "charset" and value:
            charset = value.strip("\"' ")
    return media.strip().lower(), charset


def as_dict(page: FetchedPage, max_chars: int, offset: int = 0) -> dict[str, Any]:
    """Return the JSON-ready view of `page`: `max_chars` of its text from `offset`, and where to read on."""
    total = len(page.text)
    text = page.text[offset : offset + max_chars]
    end = min(total, offset + max_chars)
    out: dict[str, Any] = {
        "url": page.final_url,
        "title": page.title,
        "content_type": page.content_type,
        "text": text,
        "truncated": end < total or page.truncated,
    }
    if offset or end < total:
        out.update(offset=offset, total_chars=total, next_offset=end if end < total else None)
    if page.final_url != page.url:
        out["requested_url"] = page.url
    return out
