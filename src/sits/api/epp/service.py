"""envoy.service.ext_proc.v3.ExternalProcessor/Process: one bidirectional stream per HTTP request.

Request path: the headers are kept; the body is buffered (up to the server's max_body_bytes, then
413) until its end; then the pick is made and answered. In full-duplex streaming (the endpoint-picker
protocol's mode, assumed when Envoy does not announce a mode) the headers' answer waits for the body:
it carries the destination header and the dynamic metadata, and the body follows as streamed chunks
(rewritten when the upstream model's name differs). In buffered mode Envoy waits for the headers'
answer first, so the destination goes on the body's answer. A request without a body is answered on
its headers. Errors are ImmediateResponses (503 no endpoint ready, 429 shed by admission, 4xx for
the request itself).

Response path: headers, body and trailers pass through unchanged (a full-duplex response body is
echoed back). The picked endpoint counts the request in flight, and the admission ticket is held,
until the response ends or the stream closes, whichever comes first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from itertools import count

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from sits.api.epp import protocol as p
from sits.api.epp.picker import EndpointPicker, Pick
from sits.errors import PayloadTooLarge, SitsError

log = logging.getLogger("sits.epp")
_ids = count(1)
_ID_PREFIX = os.urandom(3).hex()


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: EndpointPicker) -> None:
        self._picker = picker

    async def Process(self, request_iterator: AsyncIterator[pb.ProcessingRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[pb.ProcessingResponse]:
        stream = _Stream(self._picker)
        try:
            async for message in request_iterator:
                for answer in await stream.on(message):
                    yield answer
            stream.ended_cleanly = True
        finally:
            stream.close()


class _Stream:
    """One HTTP request's ext_proc exchange."""

    __slots__ = (
        "_answered",
        "_body",
        "_buffered",
        "_counted",
        "_duplex_response",
        "_headers",
        "_pick",
        "_picker",
        "_started",
        "_status",
        "_subset",
        "ended_cleanly",
    )

    def __init__(self, picker: EndpointPicker) -> None:
        self._picker = picker
        self._headers: dict[str, str] = {}
        self._subset: frozenset[str] | None = None
        self._body = bytearray()
        self._buffered = False
        self._duplex_response = False
        self._answered = False  # the request path is done (destination sent, or an immediate response)
        self._pick: Pick | None = None
        self._counted: str | None = None  # the endpoint this request is counted in flight on
        self._started = 0.0
        self._status: int | None = None
        self.ended_cleanly = False

    async def on(self, message: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        kind = message.WhichOneof("request")
        if message.HasField("protocol_config"):  # sent on the stream's first message
            self._buffered = p.buffered_request_body(message)
            self._duplex_response = p.duplex_response_body(message)
        if kind == "request_headers":
            return await self._on_request_headers(message)
        if kind == "request_body":
            return await self._on_request_body(message.request_body)
        if kind == "request_trailers":
            return await self._on_request_trailers()
        if kind == "response_headers":
            self._on_served(message)
            status = p.header_map(message.response_headers).get(":status", "")
            self._status = int(status) if status.isdigit() else None
            if message.response_headers.end_of_stream:
                self._finish()
            return [p.RESPONSE_HEADERS_CONTINUE]
        if kind == "response_body":
            body = message.response_body
            if body.end_of_stream or body.end_of_stream_without_message:
                self._finish()
            if self._duplex_response:
                return p.streamed_body(body.body, body.end_of_stream or body.end_of_stream_without_message,
                                       response=True)
            return [p.RESPONSE_BODY_CONTINUE]
        if kind == "response_trailers":
            self._finish()
            return [p.RESPONSE_TRAILERS_CONTINUE]
        return []

    async def _on_request_headers(self, message: pb.ProcessingRequest) -> list[pb.ProcessingResponse]:
        self._headers = p.header_map(message.request_headers)
        self._subset = p.subset_hint(message)
        if message.request_headers.end_of_stream:  # no body: pick now, answer on the headers
            error = await self._decide()
            if error is not None:
                return [error]
            assert self._pick is not None
            return [p.headers_answer(self._common(), p.destination_metadata(self._pick.destinations))]
        if self._buffered:
            return [p.headers_answer(p.CONTINUE)]  # Envoy waits for this before it sends the body
        return []  # full duplex: the headers' answer waits for the whole body

    async def _on_request_body(self, body: pb.HttpBody) -> list[pb.ProcessingResponse]:
        if self._answered:
            return []
        if len(self._body) + len(body.body) > self._picker.max_body_bytes:
            self._answered = True
            return [p.immediate(PayloadTooLarge(f"request body exceeds {self._picker.max_body_bytes} bytes",
                                                param="body"))]
        self._body += body.body
        end = body.end_of_stream or body.end_of_stream_without_message
        if not end and not self._buffered:
            return []
        return await self._request_answers(end_of_stream=True)

    async def _on_request_trailers(self) -> list[pb.ProcessingResponse]:
        if self._answered:
            return [p.TRAILERS_CONTINUE]
        return [*await self._request_answers(end_of_stream=False), p.TRAILERS_CONTINUE]

    async def _request_answers(self, end_of_stream: bool) -> list[pb.ProcessingResponse]:
        """The pick, answered as the body mode needs it."""
        error = await self._decide()
        if error is not None:
            return [error]
        pick = self._pick
        assert pick is not None
        metadata = p.destination_metadata(pick.destinations)
        if self._buffered:
            common = self._common()
            if pick.body is not None:
                common.body_mutation.body = pick.body
            return [p.body_answer(common, metadata)]
        body = pick.body if pick.body is not None else bytes(self._body)
        return [p.headers_answer(self._common(), metadata), *p.streamed_body(body, end_of_stream)]

    def _common(self) -> pb.CommonResponse:
        pick = self._pick
        assert pick is not None
        extra = [("x-sits-model", pick.model)]
        if pick.body is not None:
            extra.append(("content-length", str(len(pick.body))))
        return pb.CommonResponse(header_mutation=p.destination_mutation(pick.destinations, extra),
                                 clear_route_cache=True)

    async def _decide(self) -> pb.ProcessingResponse | None:
        """Pick; None when picked, else the immediate response that answers the client."""
        self._answered = True
        request_id = self._headers.get("x-request-id") or f"epp-{_ID_PREFIX}-{next(_ids):x}"
        try:
            pick = await self._picker.pick(self._headers, bytes(self._body), self._subset, request_id)
        except SitsError as exc:
            log.debug("epp %s: %s %s", request_id, exc.http_status, exc.message)
            return p.immediate(exc)
        self._pick = pick
        self._counted = pick.endpoints[0].id
        self._started = self._picker.clock()
        self._picker.stats.get(self._counted).started()
        log.debug("epp %s -> %s (%s)", request_id, pick.destinations, pick.route)
        return None

    def _on_served(self, message: pb.ProcessingRequest) -> None:
        """The proxy retried on a fallback: the picked endpoint failed, the one that served is busy."""
        served, pick = p.served_endpoint(message), self._pick
        if served is None or pick is None or self._counted is None:
            return
        by_address = {p.address(e): e.id for e in pick.endpoints}
        moved = by_address.get(served)
        if moved is not None and moved != self._counted:
            stats = self._picker.stats
            stats.get(self._counted).finished(self._picker.clock() - self._started, ok=False)
            stats.get(moved).started()
            self._counted = moved

    def _finish(self) -> None:
        """The exchange is over: the endpoint's in-flight count and the admission slot are given back."""
        if self._counted is not None:
            ok = self._status < 500 if self._status is not None else self.ended_cleanly
            self._picker.stats.get(self._counted).finished(self._picker.clock() - self._started, ok=ok)
            self._counted = None
        if self._pick is not None and self._pick.ticket is not None:
            self._pick.ticket.release()

    def close(self) -> None:
        self._finish()
