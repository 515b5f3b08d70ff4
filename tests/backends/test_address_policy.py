"""The SSRF guard: disguised metadata/link-local URLs are refused, honest ones pass, and the
connection pool checks again at connect time."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from ipaddress import ip_address, ip_network

import pytest
from aiohttp import web

from sits.backends.address_policy import AddressPolicy, ParsedUpstreamUrl, check_url
from sits.backends.http_client import ConnectionPool, Origin, Timeouts
from sits.errors import UnprocessableRequest, UpstreamConnectError

PUBLIC = "93.184.215.14"

# What the fake DNS answers; anything else is "public".
FAKE_DNS: dict[str, tuple[str, ...]] = {
    "169.254.169.254.nip.io": ("169.254.169.254",),
    "a9fea9fe.rbndr.example": ("169.254.169.254",),
    "mixed.example": (PUBLIC, "169.254.169.254"),  # one bad answer is enough
    "v6meta.example": ("fd00:ec2::254",),
    "mapped.example": ("::ffff:169.254.169.254",),
    "localhost": ("127.0.0.1", "::1"),
    "internal.example": ("10.0.0.5",),
    "cgnat.example": ("100.64.1.2",),
}


async def fake_resolver(host: str, port: int) -> Sequence[str]:
    return FAKE_DNS.get(host, (PUBLIC,))


async def nxdomain_resolver(host: str, port: int) -> Sequence[str]:
    raise OSError(-2, "Name or service not known")


DISGUISED_METADATA = [
    "http://169.254.169.254/latest/meta-data",
    "https://169.254.169.254/",
    "http://169.254.169.254:80/",
    "http://169.254.169.254./",
    "HTTP://169.254.169.254/",
    "http://2852039166/",  # decimal
    "http://0xA9FEA9FE/",  # hex
    "http://0xa9.0xfe.0xa9.0xfe/",  # hex per part
    "http://0251.0376.0251.0376/",  # octal
    "http://0251.254.0xa9.254/",  # mixed
    "http://169.254.43518/",  # short form: last part fills two bytes
    "http://169.16689662/",  # short form: last part fills three bytes
    "http://0x00a9.0000376.169.254/",  # leading zeros
    "http://%31%36%39.254.169.254/",  # percent-encoded host
    "http://１６９．２５４．１６９．２５４/",  # fullwidth digits and dots (IDNA maps them)
    "http://%EF%BC%91%EF%BC%96%EF%BC%99.254.169.254/",  # the same, percent-encoded
    "http://169。254。169。254/",  # ideographic full stops
    "http://[::ffff:169.254.169.254]/",  # IPv4-mapped IPv6
    "http://[::ffff:a9fe:a9fe]/",
    "http://[0:0:0:0:0:ffff:169.254.169.254]/",
    "http://[::169.254.169.254]/",  # IPv4-compatible IPv6
    "http://[::ffff:0:a9fe:a9fe]/",  # IPv4-translated IPv6
    "http://[64:ff9b::169.254.169.254]/",  # NAT64
    "http://[2002:a9fe:a9fe::1]/",  # 6to4
    "http://[fd00:ec2::254]/",  # AWS IMDS IPv6
    "http://[FD00:0EC2:0:0:0:0:0:0254]/",
    "http://[fe80::1%25eth0]/",  # link-local with zone id
    "http://[fe80::a9fe:a9fe]/",
    "http://169.254.170.2/v2/credentials",  # ECS task metadata
    "http://100.100.100.200/latest/meta-data",  # Alibaba
    "http://168.63.129.16/",  # Azure WireServer
    "http://192.0.0.192/",  # Oracle legacy
    "http://169.254.169.254.nip.io/",  # names that resolve to it
    "http://A9FEA9FE.rbndr.example/",
    "http://mixed.example/",
    "http://v6meta.example/",
    "http://mapped.example/",
    "http://metadata.google.internal/computeMetadata/v1/",  # names refused before resolving
    "http://METADATA.GOOGLE.INTERNAL./",
    "http://metadata/",
    "http://metadata.goog/",
    "http://instance-data/latest/",
]

# Refused as malformed, smuggling or simply not a place a model server lives.
OTHER_REFUSED = [
    "http://good.example@169.254.169.254/",  # userinfo
    "http://good.example:80@169.254.169.254/",
    "http://169.254.169.254#@good.example/",  # fragment trick
    "http://169.254.169.254?@good.example/",  # query trick
    "http://good.example\\@169.254.169.254/",  # backslash trick
    "http://169.254.169.254\\.good.example/",
    "http://0/",
    "http://0.0.0.0/",
    "http://0x0/",
    "http://[::]/",
    "http://[::0.0.0.0]/",
    "http://255.255.255.255/",
    "http://224.0.0.1/",
    "http://[ff02::1]/",
    "http://240.0.0.1/",
    "ftp://169.254.169.254/",
    "file:///etc/passwd",
    "gopher://169.254.169.254:70/_GET",
    "dict://169.254.169.254:11211/",
    "javascript:alert(1)",
    "http:169.254.169.254/",
    "//169.254.169.254/",
    "http:///169.254.169.254/",
    "http://169.254.169.254:0/",
    "http://169.254.169.254:65536/",
    "http://169.254.169.254:+80/",
    "http://169.254.169.254 /",
    "http://169.254.169.254\t/",
    "http://%2531%2536%2539.254.169.254/",  # double encoding is not decoded twice
    "http://169.254.169.254.../",
    "http://256.254.169.254/",
    "http://1.2.3.4.5/",
    "http://08.0.0.1/",
]


# Even the most permissive policy refuses all of these.
PERMISSIVE = AddressPolicy(allow_loopback=True, allowed_private=(ip_network("0.0.0.0/0"), ip_network("::/0")))


@pytest.mark.parametrize("url", DISGUISED_METADATA)
async def test_disguised_metadata_and_link_local_urls_are_refused_as_such(url):
    with pytest.raises(UnprocessableRequest) as info:
        await check_url(url, PERMISSIVE, resolver=fake_resolver)
    assert info.value.param == "endpoint"
    assert info.value.http_status == 422
    assert "link-local/cloud metadata address" in info.value.message or "metadata service name" in info.value.message


@pytest.mark.parametrize("url", OTHER_REFUSED)
async def test_smuggling_and_malformed_urls_are_refused(url):
    with pytest.raises(UnprocessableRequest) as info:
        await check_url(url, PERMISSIVE, resolver=fake_resolver)
    assert info.value.param == "endpoint"
    assert "refused" in info.value.message


async def test_refusal_says_why():
    with pytest.raises(UnprocessableRequest, match=r"169\.254\.169\.254 is a link-local/cloud metadata address"):
        await check_url("http://2852039166/", AddressPolicy())
    with pytest.raises(UnprocessableRequest, match=r"IPv4-mapped IPv6 address of 169\.254\.169\.254"):
        await check_url("http://[::ffff:a9fe:a9fe]/", AddressPolicy())
    with pytest.raises(UnprocessableRequest, match="scheme 'file' is not allowed"):
        await check_url("file:///etc/passwd", AddressPolicy())
    with pytest.raises(UnprocessableRequest, match=r"credentials \(user@host\)"):
        await check_url("http://a@b.example/", AddressPolicy())
    with pytest.raises(UnprocessableRequest, match="cloud metadata service name"):
        await check_url("http://metadata.google.internal/", AddressPolicy(), resolver=fake_resolver)
    with pytest.raises(UnprocessableRequest, match=r"resolves to 169\.254\.169\.254"):
        await check_url("http://169.254.169.254.nip.io/", AddressPolicy(), resolver=fake_resolver)
    with pytest.raises(UnprocessableRequest, match="does not resolve") as info:
        await check_url("http://nowhere.example/", AddressPolicy(), resolver=nxdomain_resolver, param="base_url")
    assert info.value.param == "base_url"


ALLOWED = [
    ("https://api.openai.com/v1", AddressPolicy(), ParsedUpstreamUrl("https", "api.openai.com", 443, "/v1")),
    ("http://8.8.8.8:8000/v1/", AddressPolicy(), ParsedUpstreamUrl("http", "8.8.8.8", 8000, "/v1")),
    ("HTTP://Models.Example.:9000", AddressPolicy(), ParsedUpstreamUrl("http", "models.example", 9000, "")),
    ("http://[2606:4700::1111]:8080/v1", AddressPolicy(), ParsedUpstreamUrl("http", "2606:4700::1111", 8080, "/v1")),
    ("http://bücher.example/", AddressPolicy(), ParsedUpstreamUrl("http", "xn--bcher-kva.example", 80, "")),
    ("http://vllm_service:8000/v1", AddressPolicy(), ParsedUpstreamUrl("http", "vllm_service", 8000, "/v1")),
    ("http://134744072/", AddressPolicy(), ParsedUpstreamUrl("http", "8.8.8.8", 80, "")),
    # loopback only with allow_loopback
    ("http://127.0.0.1:8001/v1", AddressPolicy(allow_loopback=True),
     ParsedUpstreamUrl("http", "127.0.0.1", 8001, "/v1")),
    ("http://localhost:8001", AddressPolicy(allow_loopback=True), ParsedUpstreamUrl("http", "localhost", 8001, "")),
    ("http://[::1]:8001", AddressPolicy(allow_loopback=True), ParsedUpstreamUrl("http", "::1", 8001, "")),
    ("http://127.1/", AddressPolicy(allow_loopback=True), ParsedUpstreamUrl("http", "127.0.0.1", 80, "")),
    # private only inside the allowlist
    ("http://10.0.0.5/", AddressPolicy(allowed_private=(ip_network("10.0.0.0/24"),)),
     ParsedUpstreamUrl("http", "10.0.0.5", 80, "")),
    ("http://internal.example/", AddressPolicy(allowed_private=("10.0.0.5/32",)),
     ParsedUpstreamUrl("http", "internal.example", 80, "")),
    ("http://[::ffff:10.0.0.5]/", AddressPolicy(allowed_private=("10.0.0.0/8",)),
     ParsedUpstreamUrl("http", "::ffff:a00:5", 80, "")),
    ("http://[fd12:3456::1]/", AddressPolicy(allowed_private=("fd12:3456::/32",)),
     ParsedUpstreamUrl("http", "fd12:3456::1", 80, "")),
]


@pytest.mark.parametrize(("url", "policy", "expected"), ALLOWED)
async def test_allowed_urls(url, policy, expected):
    assert await check_url(url, policy, resolver=fake_resolver) == expected


REFUSED_BY_DEFAULT = [
    ("http://127.0.0.1:8001/", "loopback address"),
    ("http://localhost/", "loopback address"),
    ("http://[::1]/", "loopback address"),
    ("http://[::ffff:127.0.0.1]/", "loopback address"),
    ("http://10.0.0.5/", "private address"),
    ("http://internal.example/", "private address"),
    ("http://172.16.3.4/", "private address"),
    ("http://192.168.1.1/", "private address"),
    ("http://cgnat.example/", "private address"),
    ("http://[fd12:3456::1]/", "private address"),
]


@pytest.mark.parametrize(("url", "why"), REFUSED_BY_DEFAULT)
async def test_loopback_and_private_need_a_setting(url, why):
    with pytest.raises(UnprocessableRequest, match=why):
        await check_url(url, AddressPolicy(), resolver=fake_resolver)


async def test_allowlist_is_exact_and_cannot_open_metadata():
    policy = AddressPolicy(allowed_private=("10.0.0.0/24", "100.64.0.0/10", "fc00::/7"))
    with pytest.raises(UnprocessableRequest, match="private address"):
        await check_url("http://10.0.1.5/", policy)
    with pytest.raises(UnprocessableRequest, match="metadata"):
        await check_url("http://100.100.100.200/", policy)  # inside CGNAT, still refused
    with pytest.raises(UnprocessableRequest, match="metadata"):
        await check_url("http://[fd00:ec2::254]/", policy)  # inside fc00::/7, still refused
    await check_url("http://100.64.1.2/", policy)


@pytest.mark.parametrize(
    ("ip", "policy", "refused"),
    [
        ("169.254.1.1", AddressPolicy(allow_loopback=True), True),
        ("fe80::1", AddressPolicy(), True),
        ("127.0.0.1", AddressPolicy(), True),
        ("127.0.0.1", AddressPolicy(allow_loopback=True), False),
        ("10.0.0.5", AddressPolicy(allowed_private=("10.0.0.5/32",)), False),
        ("10.0.0.6", AddressPolicy(allowed_private=("10.0.0.5/32",)), True),
        ("8.8.8.8", AddressPolicy(), False),
        ("2002:0808:0808::1", AddressPolicy(), False),  # 6to4 of a public address
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", AddressPolicy(), False),  # Teredo, public ends
    ],
)
def test_check_ip_table(ip, policy, refused):
    if refused:
        with pytest.raises(UnprocessableRequest):
            policy.check_ip(ip_address(ip))
    else:
        policy.check_ip(ip_address(ip))


# -- connect time: the pool checks the addresses it is about to use ---------------------------


@pytest.fixture
async def loopback_server() -> AsyncIterator[int]:
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    await runner.cleanup()


REQUEST = b"GET / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_pool_refuses_loopback_at_connect_time(loopback_server, host):
    pool = ConnectionPool(address_policy=AddressPolicy())
    try:
        with pytest.raises(UpstreamConnectError, match="loopback address"):
            await pool.request(Origin("http", host, loopback_server), REQUEST, Timeouts(connect=2))
    finally:
        await pool.close()


async def test_pool_connects_when_policy_allows(loopback_server):
    pool = ConnectionPool(address_policy=AddressPolicy(allow_loopback=True))
    try:
        response = await pool.request(Origin("http", "127.0.0.1", loopback_server), REQUEST, Timeouts(connect=2))
        assert response.status == 200
        assert await response.read() == b"hello"
    finally:
        await pool.close()


async def test_dns_rebinding_is_caught_at_connect_time(loopback_server):
    # At registration the name answered a public address; by connect time it answers loopback.
    policy = AddressPolicy()
    parsed = await check_url(f"http://localhost:{loopback_server}/v1", policy, resolver=lambda h, p: _public())
    pool = ConnectionPool(address_policy=policy)
    try:
        with pytest.raises(UpstreamConnectError, match=r"refused to connect to localhost:\d+: .* loopback"):
            await pool.request(Origin(parsed.scheme, parsed.host, parsed.port), REQUEST, Timeouts(connect=2))
    finally:
        await pool.close()


async def _public() -> Sequence[str]:
    return (PUBLIC,)


async def test_pool_without_policy_is_unchanged(loopback_server):
    pool = ConnectionPool()
    try:
        response = await pool.request(Origin("http", "127.0.0.1", loopback_server), REQUEST, Timeouts(connect=2))
        assert await response.read() == b"hello"
    finally:
        await pool.close()
