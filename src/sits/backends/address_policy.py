"""Server-side request forgery guard: which addresses an upstream endpoint may point at.

Whoever can register a model through the admin API chooses where the gateway opens
connections, so an endpoint URL is untrusted input. The policy:

- always refused: link-local and cloud metadata services, unspecified, multicast, broadcast,
  reserved and documentation ranges, whatever the operator configures;
- loopback only with `allow_loopback` (on in the embedded, single-machine default);
- private ranges (RFC 1918, CGNAT, benchmarking, unique-local IPv6) only inside the
  operator's `allowed_private` networks;
- everything globally routable is allowed.

Two checks, both needed: `check_url` when an endpoint is registered (a clear 422 naming the
reason) and `AddressPolicy.refusal` again in `ConnectionPool` for every new connection,
because DNS may answer differently by then (rebinding).
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network
from urllib.parse import unquote_to_bytes

from sits.errors import UnprocessableRequest, UpstreamConnectError

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""(host, port) -> the addresses the host resolves to, as strings."""

RESOLVE_TIMEOUT_S = 5.0

_METADATA = "a link-local/cloud metadata address"

# Checked first so the message names the danger even where a broader range also matches.
_METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OCI, DigitalOcean, Hetzner, OpenStack
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity agent
        "100.100.100.200",  # Alibaba Cloud (inside CGNAT, so an allowlist must not open it)
        "168.63.129.16",  # Azure WireServer (a public address)
        "192.0.0.192",  # Oracle Cloud legacy metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6 (inside fc00::/7)
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
    )
)

_ALWAYS_REFUSED: tuple[tuple[IPNetwork, str], ...] = tuple(
    (ip_network(net), why)
    for net, why in (
        ("169.254.0.0/16", _METADATA),
        ("fe80::/10", _METADATA),
        ("0.0.0.0/8", "an unspecified ('this network') address"),  # Linux connects 0.0.0.0 to itself
        ("::/128", "the unspecified address"),
        ("255.255.255.255/32", "the broadcast address"),
        ("224.0.0.0/4", "a multicast address"),
        ("ff00::/8", "a multicast address"),
        ("240.0.0.0/4", "a reserved address"),
        ("192.0.0.0/24", "a reserved (IETF protocol assignment) address"),
        ("192.0.2.0/24", "a documentation address"),
        ("198.51.100.0/24", "a documentation address"),
        ("203.0.113.0/24", "a documentation address"),
        ("2001:db8::/32", "a documentation address"),
        ("3fff::/20", "a documentation address"),
        ("100::/64", "a discard-only address"),
        ("fec0::/10", "a deprecated site-local address"),
        # Where the IPv4 sits in a local-use NAT64 address depends on the deployment, so it
        # cannot be unwrapped and checked; refuse rather than guess.
        ("64:ff9b:1::/48", "a local-use NAT64 address"),
        ("::/8", "a reserved address"),
    )
)

_LOOPBACK = tuple(ip_network(n) for n in ("127.0.0.0/8", "::1/128"))

_PRIVATE = tuple(
    ip_network(n)
    for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "198.18.0.0/15", "fc00::/7")
)

_NAT64_WELL_KNOWN = ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ip_network("::/96")
_IPV4_TRANSLATED = ip_network("::ffff:0:0:0/96")  # SIIT, RFC 2765


def _embedded_ipv4(ip: IPv6Address) -> tuple[str, tuple[IPv4Address, ...]] | None:
    """The IPv4 addresses an IPv6 transition form carries, with the form's name."""
    if ip.ipv4_mapped is not None:
        return "an IPv4-mapped IPv6 address", (ip.ipv4_mapped,)
    low32 = IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _IPV4_TRANSLATED:
        return "an IPv4-translated IPv6 address", (low32,)
    if ip in _NAT64_WELL_KNOWN:
        return "a NAT64 IPv6 address", (low32,)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:  # :: and ::1 are themselves, not IPv4
        return "an IPv4-compatible IPv6 address", (low32,)
    if ip.sixtofour is not None:
        return "a 6to4 IPv6 address", (ip.sixtofour,)
    if ip.teredo is not None:
        return "a Teredo IPv6 address", ip.teredo
    return None


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """Which upstream addresses the gateway may connect to. Strings in `allowed_private`
    are parsed as networks, so settings can pass them through."""

    allow_loopback: bool = False
    allowed_private: tuple[IPNetwork, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_private", tuple(ip_network(n) for n in self.allowed_private))

    def refusal(self, ip: IPAddress) -> str | None:
        """Why `ip` is refused ("a link-local/cloud metadata address"), or None if allowed."""
        if isinstance(ip, IPv6Address):
            ip = IPv6Address(int(ip))  # a zone id (%eth0) does not change where the address leads
            embedded = _embedded_ipv4(ip)
            if embedded is not None:
                form, inner = embedded
                for v4 in inner:
                    why = self.refusal(v4)
                    if why is not None:
                        return f"{form} of {v4}, {why}"
                return None
        if ip in _METADATA_ADDRESSES:
            return _METADATA
        if any(ip.version == net.version and ip in net for net in _LOOPBACK):  # before ::/8, which holds ::1
            return None if self.allow_loopback else "a loopback address (allow_loopback is off)"
        for net, why in _ALWAYS_REFUSED:
            if ip.version == net.version and ip in net:
                return why
        if any(ip.version == net.version and ip in net for net in _PRIVATE) or not ip.is_global:
            if any(ip.version == net.version and ip in net for net in self.allowed_private):
                return None
            return "a private address outside the operator allowlist (allowed_private)"
        return None

    def check_ip(self, ip: IPAddress, *, param: str = "endpoint") -> None:
        """Raise `UnprocessableRequest` naming the reason if `ip` is refused."""
        why = self.refusal(ip)
        if why is not None:
            raise UnprocessableRequest(f"{param} address {ip} is {why}; refused", param=param)


@dataclass(frozen=True, slots=True)
class ParsedUpstreamUrl:
    """A checked upstream URL. `host` is normalised (lowercase ASCII name, dotted IPv4, or
    IPv6 without brackets); `path` has no trailing slash ("" for the root)."""

    scheme: str
    host: str
    port: int
    path: str


# Names that reach metadata services through cloud DNS or resolv.conf search domains;
# refused even where this machine's resolver would not know them.
METADATA_HOSTNAMES = frozenset({
    "metadata", "metadata.google.internal", "metadata.goog", "metadata.google",
    "instance-data", "instance-data.ec2.internal", "metadata.ec2.internal",
    "metadata.azure.internal", "metadata.tencentyun.com", "metadata.platformequinix.com",
    "metadata.packet.net",
})

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_FORBIDDEN = re.compile(r"[\x00-\x20#%/:<>?@\[\\\]^|\x7f]")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\Z")
_NUMBER = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)\Z")


async def system_resolver(host: str, port: int) -> tuple[str, ...]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return tuple(dict.fromkeys(str(info[4][0]) for info in infos))


async def check_url(
    url: str, policy: AddressPolicy, resolver: Resolver | None = None, param: str = "endpoint"
) -> ParsedUpstreamUrl:
    """Parse an upstream base URL and refuse it unless every address it leads to is allowed.

    Raises `UnprocessableRequest` (naming `param`) for a non-http(s) scheme, userinfo, a query
    or fragment, a bad host or port, a metadata hostname, a name that does not resolve within
    RESOLVE_TIMEOUT_S, or any refused address. The client never follows redirects, so the
    addresses checked here (and again at connect time) are the only ones contacted.
    """

    def refuse(why: str) -> UnprocessableRequest:
        # The URL itself is not echoed: it may carry credentials, and errors end up in logs.
        return UnprocessableRequest(f"{param} URL: {why}; refused", param=param)

    # Browsers read a backslash as "/", urllib does not; such disagreements are the attack.
    if not url.isprintable() or " " in url or "\\" in url:
        raise refuse("contains whitespace, control characters or backslashes")
    m = _SCHEME.match(url)
    if m is None:
        raise refuse("has no scheme")
    scheme = m.group(1).lower()
    if scheme not in _DEFAULT_PORTS:
        raise refuse(f"scheme {scheme!r} is not allowed (only http and https)")
    rest = url[m.end():]
    if not rest.startswith("//"):
        raise refuse("must start with scheme://host")
    rest = rest[2:]
    if "#" in rest or "?" in rest:
        raise refuse("an endpoint base URL takes no query or fragment")
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    if "@" in authority:
        raise refuse("credentials (user@host) in the URL are not allowed")
    if not path.isascii():
        raise refuse("path must be ASCII (percent-encode it)")
    raw_host, port = _split_port(authority, _DEFAULT_PORTS[scheme], refuse)
    ip, host = _normalise_host(raw_host, refuse)

    if ip is not None:
        policy.check_ip(ip, param=param)
    else:
        if host in METADATA_HOSTNAMES:
            raise refuse(f"host {host!r} is a cloud metadata service name")
        await _check_resolved(host, port, policy, resolver or system_resolver, param, refuse)
    return ParsedUpstreamUrl(scheme, host, port, path.rstrip("/"))


def _split_port(
    authority: str, default: int, refuse: Callable[[str], UnprocessableRequest]
) -> tuple[str, int]:
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise refuse("unterminated IPv6 literal")
        host, after = authority[: end + 1], authority[end + 1 :]
        if after and not after.startswith(":"):
            raise refuse("unexpected text after the IPv6 literal")
        port_text = after[1:] if after else None
    elif ":" in authority:
        host, port_text = authority.split(":", 1)
    else:
        host, port_text = authority, None
    if port_text is None:
        return host, default
    if not (port_text.isascii() and port_text.isdigit() and len(port_text) <= 5 and 0 < int(port_text) < 65536):
        raise refuse(f"port {port_text!r} is not a number from 1 to 65535")
    return host, int(port_text)


def _normalise_host(raw: str, refuse: Callable[[str], UnprocessableRequest]) -> tuple[IPAddress | None, str]:
    """(address, normalised host); address is None for a name that still needs resolving."""
    if raw.startswith("["):
        try:
            ip = IPv6Address(unquote_to_bytes(raw[1:-1]).decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise refuse("invalid IPv6 literal") from None
        return ip, str(IPv6Address(int(ip)))
    try:
        host = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("host is not valid UTF-8 after percent-decoding") from None
    if not host.isascii():
        try:  # IDNA maps look-alikes too: fullwidth digits and dots become ASCII
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            raise refuse("host is not a valid internationalised domain name") from None
    host = host.lower()
    if _HOST_FORBIDDEN.search(host):
        raise refuse("host contains a forbidden character")
    host = host.removesuffix(".")
    if not host:
        raise refuse("host is empty")
    labels = host.split(".")
    if _NUMBER.match(labels[-1]):  # browsers treat a host ending in a number as an address
        ip = _ipv4_like_inet_aton(labels, refuse)
        return ip, str(ip)
    if len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise refuse(f"host {host!r} is not a valid hostname")
    return None, host


def _ipv4_like_inet_aton(labels: list[str], refuse: Callable[[str], UnprocessableRequest]) -> IPv4Address:
    """Read a numeric host as browsers (WHATWG) and libc's inet_aton do: 1 to 4 parts, each
    decimal, 0x-hex or 0-octal, the last filling the remaining bytes ("169.254.43518")."""
    if len(labels) > 4 or not all(_NUMBER.match(label) for label in labels):
        raise refuse("host looks numeric but is not an IPv4 address")
    numbers = []
    for label in labels:
        if label.startswith("0x"):
            numbers.append(int(label[2:] or "0", 16))
        elif len(label) > 1 and label.startswith("0"):
            if not set(label) <= set("01234567"):
                raise refuse(f"invalid octal number {label!r} in IPv4 host")
            numbers.append(int(label, 8))
        else:
            numbers.append(int(label))
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (4 - len(head)):
        raise refuse("IPv4 host has a part out of range")
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return IPv4Address(value)


async def _check_resolved(
    host: str,
    port: int,
    policy: AddressPolicy,
    resolver: Resolver,
    param: str,
    refuse: Callable[[str], UnprocessableRequest],
) -> None:
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            addresses = await resolver(host, port)
    except TimeoutError:
        raise refuse(f"host {host!r} did not resolve within {RESOLVE_TIMEOUT_S:g}s") from None
    except OSError as exc:
        raise refuse(f"host {host!r} does not resolve ({exc.strerror or exc})") from None
    if not addresses:
        raise refuse(f"host {host!r} resolves to no address")
    for text in addresses:
        try:
            ip = ip_address(text)
        except ValueError:
            raise refuse(f"host {host!r} resolves to an unreadable address {text!r}") from None
        why = policy.refusal(ip)
        if why is not None:  # any one bad answer is enough: the client may pick it
            raise refuse(f"host {host!r} resolves to {ip}, {why}")


async def resolve_for_connect(host: str, port: int, policy: AddressPolicy) -> tuple[str, ...]:
    """The addresses to connect to for `host`, resolved now and every one checked.

    For `ConnectionPool`: connecting to these addresses (not the name) closes the window in
    which DNS could answer differently between check and connect. A refused address raises
    `UpstreamConnectError` naming the reason; resolver failures propagate as `OSError`.
    """
    addresses = await system_resolver(host, port)
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    for text in addresses:
        why = policy.refusal(ip_address(text))
        if why is not None:
            raise UpstreamConnectError(f"refused to connect to {host}:{port}: {text} is {why}")
    return addresses
