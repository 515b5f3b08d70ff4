"""Pure, typed translation between the wire formats SITS speaks and the chat-completions shape the
pipeline and most upstreams speak: the Responses API and the Anthropic Messages API on the client
side, Anthropic's API on the upstream side. No I/O; streams are translated event by event."""
