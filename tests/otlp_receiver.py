"""A real OTLP/HTTP trace receiver for tests: decodes ExportTraceServiceRequest (protobuf) with
opentelemetry-proto and keeps the spans. Can be slowed down or made to fail, to test the
gateway's export self-protection."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.loopback_server import LoopbackServer


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int  # proto enum: 2 SERVER, 3 CLIENT
    attributes: dict[str, Any]
    status_code: int  # proto enum: 0 unset, 1 ok, 2 error
    service_name: str


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class OtlpReceiver(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.spans: list[ReceivedSpan] = []
        self.exports = 0
        self.delay_s = 0.0
        self.fail = False

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/traces", self._traces)
        await self.serve(app)

    async def _traces(self, request: web.Request) -> web.Response:
        self.exports += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            return web.Response(status=400, text="refused by test")  # 400: not retried by the exporter
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        name=span.name, trace_id=span.trace_id.hex(), span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(), kind=span.kind,
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        status_code=span.status.code, service_name=str(resource.get("service.name")),
                    ))
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    async def wait_for(self, predicate: Any, timeout_s: float = 5.0) -> list[ReceivedSpan]:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not predicate(self.spans):
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"spans never matched; got {[s.name for s in self.spans]}")
            await asyncio.sleep(0.05)
        return self.spans
